package tier

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/commitlog"
	"github.com/sluice-io/sluice/recordbatch"
)

// The disk cache's contract, against the in-process bucket and the real S3
// server: a restarted reader serves what an earlier one cached without a
// GET; a changed record never finds the old file; a replay larger than the
// bound stays within it; a damaged file is found, not served, and fetched
// again.
func TestDiskCacheMemory(t *testing.T) {
	testDiskCache(t, func(*testing.T) Bucket { return NewMemory() })
}

func TestDiskCacheS3(t *testing.T) {
	testDiskCache(t, func(t *testing.T) Bucket { return newTestS3(t, s3Options(t)) })
}

func testDiskCache(t *testing.T, newBucket func(*testing.T) Bucket) {
	t.Run("survives a restart", func(t *testing.T) { testDiskCacheRestart(t, newBucket(t)) })
	t.Run("a changed record misses", func(t *testing.T) { testDiskCacheRecordChanged(t, newBucket(t)) })
	t.Run("evicts within its bound", func(t *testing.T) { testDiskCacheBound(t, newBucket(t)) })
	t.Run("a damaged file is fetched again", func(t *testing.T) { testDiskCacheDamaged(t, newBucket(t)) })
}

// diskReader is a cold reader with small chunks, a memory cache too small
// to hold a segment, and a disk cache of limit bytes in dir.
func diskReader(t *testing.T, bkt Bucket, dir string, limit int64) *ColdReader {
	t.Helper()
	cr := NewColdReader(bkt, ColdReaderOptions{ChunkBytes: 256, CacheBytes: 512, DiskCacheDir: dir, DiskCacheBytes: limit,
		Logger: slog.New(slog.DiscardHandler)})
	if cr.disk == nil {
		t.Fatal("the disk cache did not open")
	}
	t.Cleanup(cr.Close)
	return cr
}

// uploadTestLog uploads a log of n batches (segments of 4) to bkt under
// prefix and returns its records.
func uploadTestLog(t *testing.T, bkt Bucket, n int, format, prefix string) []RemoteSegment {
	t.Helper()
	meta := &memMeta{}
	u := &Uploader{Bucket: bkt, Meta: meta, Log: testLogValues(t, n, format), KeyPrefix: prefix, Logger: slog.New(slog.DiscardHandler)}
	return uploadAll(t, u, meta)
}

// readWhole reads seg from its base in one read, checks that the bytes are
// want, and reports whether they came from the disk cache.
func readWhole(t *testing.T, cr *ColdReader, seg RemoteSegment, want []byte) (fromDisk bool) {
	t.Helper()
	r, err := cr.ReadRange(context.Background(), seg, seg.Base, 1<<20, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got := r.Pieces.Bytes()
	if r.File != nil {
		got = make([]byte, r.Size)
		if _, err := r.File.ReadAt(got, r.Position); err != nil {
			t.Fatal(err)
		}
	}
	if r.Next != seg.Next || !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes to offset %d; want the %d bytes of %s to %d", len(got), r.Next, len(want), seg.LogKey(), seg.Next)
	}
	return r.File != nil
}

func gets(fb *FaultBucket) int { return fb.Calls(OpGet) + fb.Calls(OpGetRange) }

func testDiskCacheRestart(t *testing.T, bkt Bucket) {
	fb := NewFaultBucket(bkt)
	segs := uploadTestLog(t, fb, 10, "v-%d", "t/0/")
	dir := t.TempDir()
	cr := diskReader(t, fb, dir, 1<<20)
	for _, seg := range segs {
		if got, err := consume(cr, seg, 1<<20); err != nil || got != seg.Next {
			t.Fatalf("first read of %s: to %d, %v", seg.Key, got, err)
		}
	}
	cr.Close()
	if st := cr.Stats().Disk; st.Bytes == 0 {
		t.Fatalf("nothing cached: %+v", st)
	}

	// A file left half assembled goes at the restart; one not the cache's
	// stays.
	for name, data := range map[string]string{"0123456789012345678901234567890123456789.part": "half", "notes.txt": "mine"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	before := gets(fb)
	cr2 := diskReader(t, fb, dir, 1<<20)
	if _, err := os.Stat(filepath.Join(dir, "0123456789012345678901234567890123456789.part")); !os.IsNotExist(err) {
		t.Errorf("a .part file survived the restart: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "notes.txt")); err != nil || string(b) != "mine" {
		t.Errorf("a file not the cache's was touched: %q %v", b, err)
	}
	for _, seg := range segs {
		if !readWhole(t, cr2, seg, mustGet(t, bkt, seg.LogKey())) {
			t.Fatalf("%s was not served from the disk cache after a restart", seg.Key)
		}
		if got, err := consume(cr2, seg, 100); err != nil || got != seg.Next {
			t.Fatalf("reading %s batch by batch: to %d, %v", seg.Key, got, err)
		}
	}
	if n := gets(fb) - before; n != 0 {
		t.Fatalf("the restarted reader made %d GETs", n)
	}
	if st := cr2.Stats().Disk; st.Hits == 0 || st.Misses != 0 || st.Corrupt != 0 {
		t.Fatalf("stats after the restart: %+v", st)
	}
}

// The segment is uploaded again under the same key and upload ID, with
// other values of the same size: the new record differs in its SHA-256
// only, and the reader serves the new bytes.
func testDiskCacheRecordChanged(t *testing.T, bkt Bucket) {
	fb := NewFaultBucket(bkt)
	old := uploadTestLog(t, fb, 4, "v-%d", "t/0/")[0]
	oldBytes := mustGet(t, bkt, old.LogKey())
	cr := diskReader(t, fb, t.TempDir(), 1<<20)
	readWhole(t, cr, old, oldBytes)
	if !readWhole(t, cr, old, oldBytes) {
		t.Fatal("the second read was not served from the disk cache")
	}

	other := uploadTestLog(t, bkt, 4, "w-%d", "other/")[0]
	if other.SHA256 == old.SHA256 {
		t.Fatal("the test needs different content")
	}
	changed := other
	changed.Key, changed.ID = old.Key, old.ID
	mustPut(t, bkt, old.LogKey(), mustGet(t, bkt, other.LogKey()))
	mustPut(t, bkt, old.IndexKey(), mustGet(t, bkt, other.IndexKey()))
	// What a restarted broker would see, and one that kept running: the
	// new record, whose index it has not read.
	cr.Forget(old)
	missesBefore, getsBefore := cr.Stats().Disk.Misses, fb.Calls(OpGetRange)
	if readWhole(t, cr, changed, mustGet(t, bkt, other.LogKey())) {
		t.Fatal("the changed record was served from the old record's file")
	}
	if cr.Stats().Disk.Misses == missesBefore || fb.Calls(OpGetRange) == getsBefore {
		t.Fatalf("no miss or no GET for the changed record: %+v", cr.Stats().Disk)
	}
	cr2 := diskReader(t, fb, cr.disk.dir, 1<<20) // after a restart as well
	cr.Close()
	if readWhole(t, cr2, changed, mustGet(t, bkt, other.LogKey())) != true {
		t.Fatal("the changed record's own file was not served")
	}
}

func testDiskCacheBound(t *testing.T, bkt Bucket) {
	segs := uploadTestLog(t, bkt, 40, "v-%d", "t/0/") // 10 segments
	limit := 3*segs[0].Size + 100
	dir := t.TempDir()
	cr := diskReader(t, bkt, dir, limit)
	for round := 0; round < 2; round++ {
		for _, seg := range segs {
			if got, err := consume(cr, seg, 200); err != nil || got != seg.Next {
				t.Fatalf("reading %s: to %d, %v", seg.Key, got, err)
			}
			if n := dirBytes(t, dir); n > limit {
				t.Fatalf("the cache directory holds %d bytes, bound %d", n, limit)
			}
		}
	}
	if st := cr.Stats().Disk; st.Evictions == 0 || st.Bytes > limit {
		t.Fatalf("stats %+v, bound %d", st, limit)
	}
}

func testDiskCacheDamaged(t *testing.T, bkt Bucket) {
	fb := NewFaultBucket(bkt)
	seg := uploadTestLog(t, fb, 4, "v-%d", "t/0/")[0]
	want := mustGet(t, bkt, seg.LogKey())
	dir := t.TempDir()
	cr := diskReader(t, fb, dir, 1<<20)
	readWhole(t, cr, seg, want)
	cr.Close()
	file := filepath.Join(dir, recordIdent(seg)+segSuffix)
	flip := func() {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		b[len(b)/2] ^= 0x20
		if err := os.WriteFile(file, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	flip()

	// A restarted reader finds the damage before serving the file.
	cr2 := diskReader(t, fb, dir, 1<<20)
	before := fb.Calls(OpGetRange)
	if readWhole(t, cr2, seg, want) {
		t.Fatal("a damaged file was served")
	}
	if st := cr2.Stats().Disk; st.Corrupt != 1 || fb.Calls(OpGetRange) == before {
		t.Fatalf("stats %+v, %d GETs: the damage was not counted or not fetched again", st, fb.Calls(OpGetRange)-before)
	}
	if !readWhole(t, cr2, seg, want) {
		t.Fatal("the fetched-again segment was not cached again")
	}
	// A running one finds a file written since it checked it (its
	// modification time moves; set here past a coarse clock's tick).
	flip()
	later := time.Now().Add(time.Second)
	if err := os.Chtimes(file, later, later); err != nil {
		t.Fatal(err)
	}
	if readWhole(t, cr2, seg, want) {
		t.Fatal("a file damaged while the reader ran was served")
	}
	if st := cr2.Stats().Disk; st.Corrupt != 2 {
		t.Fatalf("stats %+v", st)
	}
}

func dirBytes(t *testing.T, dir string) int64 {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil {
			if os.IsNotExist(err) {
				continue
			}
			t.Fatal(err)
		}
		if strings.HasSuffix(e.Name(), partSuffix) || strings.HasSuffix(e.Name(), segSuffix) || strings.HasSuffix(e.Name(), indexSuffix) {
			n += fi.Size()
		}
	}
	return n
}

// BenchmarkColdReplay replays 8 segments of 4 MiB from the in-process
// bucket as a consumer does (reads of 1 MiB, each written to a loopback
// TCP connection the way the broker writes an answer): through the memory
// chunk cache only; through the disk cache while it fills (a fresh
// directory each pass); and from the filled disk cache (sendfile).
func BenchmarkColdReplay(b *testing.B) {
	bkt := NewMemory()
	segs := uploadBenchLog(b, bkt, 8, 4<<20)
	var total int64
	for _, s := range segs {
		total += s.Size
	}
	conn := loopbackSink(b)
	replay := func(b *testing.B, cr *ColdReader) {
		for _, seg := range segs {
			for off := seg.Base; off < seg.Next; {
				r, err := cr.ReadRange(context.Background(), seg, off, 1<<20, 0)
				if err != nil {
					b.Fatal(err)
				}
				if r.File != nil {
					if _, err := r.File.Seek(r.Position, io.SeekStart); err != nil {
						b.Fatal(err)
					}
					if _, err := io.Copy(conn, io.LimitReader(r.File, r.Size)); err != nil {
						b.Fatal(err)
					}
				} else {
					for _, p := range r.Pieces {
						if _, err := conn.Write(p); err != nil {
							b.Fatal(err)
						}
					}
				}
				r.Close()
				off = r.Next
			}
		}
	}
	opts := func(dir string) ColdReaderOptions {
		o := ColdReaderOptions{CacheBytes: 8 << 20, Logger: slog.New(slog.DiscardHandler)}
		if dir != "" {
			o.DiskCacheDir, o.DiskCacheBytes = dir, 1<<30
		}
		return o
	}
	b.Run("memory-only", func(b *testing.B) {
		b.SetBytes(total)
		for b.Loop() {
			cr := NewColdReader(bkt, opts(""))
			replay(b, cr)
			cr.Close()
		}
	})
	b.Run("disk-fill", func(b *testing.B) {
		b.SetBytes(total)
		for b.Loop() {
			b.StopTimer()
			dir := b.TempDir()
			b.StartTimer()
			cr := NewColdReader(bkt, opts(dir))
			replay(b, cr)
			cr.Close()
		}
	})
	b.Run("disk-hit", func(b *testing.B) {
		dir := b.TempDir()
		cr := NewColdReader(bkt, opts(dir))
		defer cr.Close()
		replay(b, cr)
		replay(b, cr) // the first replay's last segments' indexes are stored on their next read
		b.SetBytes(total)
		b.ResetTimer()
		for b.Loop() {
			replay(b, cr)
		}
		if st := cr.Stats().Disk; st.Hits == 0 {
			b.Fatalf("no disk hits: %+v", st)
		}
	})
}

// uploadBenchLog uploads n segments of about segBytes each, in batches of
// 100 records of 1 KiB.
func uploadBenchLog(tb testing.TB, bkt Bucket, n int, segBytes int) []RemoteSegment {
	tb.Helper()
	fsys, err := commitlog.NewOSFS(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = fsys.Close() })
	l, err := commitlog.Open(fsys, "p-0", commitlog.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = l.Close() })
	recs := make([]recordbatch.Record, 100)
	for i := range recs {
		recs[i] = recordbatch.Record{Timestamp: 1000, Value: bytes.Repeat([]byte{byte('a' + i%26)}, 1024)}
	}
	batch, err := recordbatch.Encode(nil, recs, recordbatch.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	for s := 0; s <= n; s++ { // one more: the active segment is not uploaded
		for size := 0; size < segBytes; size += len(batch) {
			if _, err := l.Append(bytes.Clone(batch), 2); err != nil {
				tb.Fatal(err)
			}
		}
		if err := l.Roll(); err != nil {
			tb.Fatal(err)
		}
	}
	l.SetHighWatermark(l.Offsets().LogEnd)
	meta := &memMeta{}
	u := &Uploader{Bucket: bkt, Meta: meta, Log: l, KeyPrefix: "t/0/", Logger: slog.New(slog.DiscardHandler)}
	for {
		done, _ := meta.List(context.Background())
		rec, err := u.UploadNext(context.Background(), 2, done)
		if err != nil {
			tb.Fatal(err)
		}
		if rec == nil {
			return done
		}
	}
}

// loopbackSink is a TCP connection to 127.0.0.1 whose far end discards
// what it reads.
func loopbackSink(tb testing.TB) net.Conn {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, c)
		_ = c.Close()
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = conn.Close()
		_ = ln.Close()
		<-done
	})
	return conn
}

// Two fetches of the same chunk both reserve it; the first completes the
// file; the second's write comes after and changes nothing.
func TestDiskCacheLateDuplicateChunk(t *testing.T) {
	bkt := NewMemory()
	seg := uploadTestLog(t, bkt, 4, "v-%d", "t/0/")[0]
	obj := mustGet(t, bkt, seg.LogKey())
	c, err := openDiskCache(t.TempDir(), 1<<20, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const chunk = 256
	chunkOf := func(i int64) []byte { return obj[i*chunk : min((i+1)*chunk, int64(len(obj)))] }
	first, late := c.reserve(seg, chunk, 0), c.reserve(seg, chunk, 0)
	if first == nil || late != first {
		t.Fatalf("reservations %p %p", first, late)
	}
	done := c.write(seg, first, 0, chunk, chunkOf(0))
	for i := int64(1); i*chunk < seg.Size; i++ {
		done = c.fill(seg, chunk, i, chunkOf(i))
	}
	if !done || !c.has(seg) {
		t.Fatal("the file was not completed")
	}
	if c.write(seg, late, 0, chunk, chunkOf(0)) {
		t.Fatal("a late write completed the file again")
	}
	f, ok := c.open(seg, true)
	if !ok {
		t.Fatal("the completed file is not served")
	}
	defer f.Close()
	got, err := io.ReadAll(f)
	if err != nil || !bytes.Equal(got, obj) {
		t.Fatalf("the file holds %d bytes (%v), not the object's %d", len(got), err, len(obj))
	}
}
