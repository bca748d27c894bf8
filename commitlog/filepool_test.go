package commitlog_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/commitlog"
	"github.com/sluice-io/sluice/commitlog/faultfs"
)

// segmentFDs counts the process's descriptors open on segment log files
// under dir, and of those, how many are on deleted files.
func segmentFDs(t *testing.T, dir string) (open, deleted int) {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatalf("counting descriptors needs /proc/self/fd (Linux): %v", err)
	}
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err != nil || !strings.HasPrefix(target, dir+"/") {
			continue // closed since the listing, or not ours
		}
		name, gone := strings.CutSuffix(target, " (deleted)")
		if !strings.HasSuffix(name, ".log") {
			continue
		}
		open++
		if gone {
			deleted++
		}
	}
	return open, deleted
}

// readBatches reads what res located through its File the way the broker
// does for sendfile: a seek, then sequential reads.
func readBatches(t *testing.T, res commitlog.ReadResult) []byte {
	t.Helper()
	if _, err := res.File.Seek(res.Position, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(io.LimitReader(res.File, res.Size))
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(b)) != res.Size {
		t.Fatalf("read %d bytes of %d", len(b), res.Size)
	}
	return b
}

// Many logs appended to and read keep no more descriptors open than their
// pool's bound once the uses end, whatever their number; while reads are
// in flight the pool opens what they need, and closes it after.
func TestDescriptorsBoundedAcrossLogs(t *testing.T) {
	const logs, bound = 64, 8
	dir := t.TempDir()
	fsys := osFS(t, dir)
	pool := commitlog.NewFilePool(bound)
	opts := commitlog.Options{SegmentBytes: 2048, Files: pool}
	all := make([]*commitlog.Log, logs)
	for i := range all {
		l, err := commitlog.Open(fsys, fmt.Sprintf("p-%d", i), opts)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		all[i] = l
	}
	for round := range 3 {
		for i, l := range all {
			for range 8 { // past a roll or two
				if _, err := l.Append(batch(t, fmt.Sprintf("r%d-%d", round, i), 5, 1), 0); err != nil {
					t.Fatal(err)
				}
			}
			commit(l)
			if err := l.Flush(); err != nil {
				t.Fatal(err)
			}
			if n := len(readAll(t, l, 0)); n != 40*(round+1) {
				t.Fatalf("log %d: read %d records, want %d", i, n, 40*(round+1))
			}
		}
		if open, _ := segmentFDs(t, dir); open > bound {
			t.Fatalf("round %d: %d segment descriptors open for %d logs, bound %d", round, open, logs, bound)
		}
		if st := pool.Stats(); st.Open > bound || st.Open != st.Idle {
			t.Fatalf("round %d: pool %+v", round, st)
		}
	}
	// Reads in flight at once each get a descriptor, past the bound.
	var held []commitlog.ReadResult
	for _, l := range all[:3*bound] {
		res, err := l.Read(0, 1<<20, l.Offsets().HighWatermark)
		if err != nil || res.Size == 0 {
			t.Fatalf("read: %+v %v", res, err)
		}
		held = append(held, res)
	}
	if open, _ := segmentFDs(t, dir); open != 3*bound {
		t.Fatalf("%d segment descriptors open with %d reads in flight", open, 3*bound)
	}
	for i := range held {
		readBatches(t, held[i])
		held[i].Close()
	}
	if open, _ := segmentFDs(t, dir); open > bound {
		t.Fatalf("%d segment descriptors open after the reads ended, bound %d", open, bound)
	}
	if st := pool.Stats(); st.Evictions == 0 || st.Open > bound {
		t.Fatalf("pool after the reads: %+v", st)
	}
}

// Two readers of one segment never share a descriptor (each moves its own
// offset), and eviction closes only idle ones: a reader keeps reading
// while descriptors around it come and go.
func TestEvictionSparesDescriptorsInUse(t *testing.T) {
	dir := t.TempDir()
	fsys := osFS(t, dir)
	pool := commitlog.NewFilePool(1)
	l := openLog(t, fsys, commitlog.Options{Files: pool})
	defer l.Close()
	other, err := commitlog.Open(fsys, "other-0", commitlog.Options{Files: pool})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	for range 20 {
		for _, x := range []*commitlog.Log{l, other} {
			if _, err := x.Append(batch(t, "e", 10, 1), 0); err != nil {
				t.Fatal(err)
			}
			commit(x)
		}
	}
	// Fsynced: no writer holds a descriptor.
	for _, x := range []*commitlog.Log{l, other} {
		if err := x.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	hw := l.Offsets().HighWatermark
	r1, err := l.Read(0, 1<<20, hw)
	if err != nil {
		t.Fatal(err)
	}
	defer r1.Close()
	r2, err := l.Read(100, 1<<20, hw)
	if err != nil {
		t.Fatal(err)
	}
	if r1.File == r2.File {
		t.Fatal("two readers were handed one descriptor")
	}
	want1, err := os.ReadFile(activeSegment(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	want2 := want1[r2.Position : r2.Position+r2.Size]
	want1 = want1[r1.Position : r1.Position+r1.Size]
	// Interleaved sequential reads: each reader's offset is its own.
	if _, err := r1.File.Seek(r1.Position, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	if _, err := r2.File.Seek(r2.Position, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	half := make([]byte, r1.Size/2)
	if _, err := io.ReadFull(r1.File, half); err != nil {
		t.Fatal(err)
	}
	if got := readBatches(t, r2); !bytes.Equal(got, want2) {
		t.Fatal("the second reader read other bytes than its batches")
	}
	r2.Close()
	// Past the bound of 1, the second reader's descriptor closed when it
	// ended; the first reader's did not.
	if st := pool.Stats(); st.Open != 1 || st.Idle != 0 || st.Evictions == 0 {
		t.Fatalf("pool after the second reader: %+v", st)
	}
	// Another log's reads and appends open and evict around it.
	for range 5 {
		readAll(t, other, 0)
		if _, err := other.Append(batch(t, "o", 3, 1), 0); err != nil {
			t.Fatal(err)
		}
		if err := other.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	rest, err := io.ReadAll(io.LimitReader(r1.File, r1.Size-int64(len(half))))
	if err != nil {
		t.Fatal(err)
	}
	if got := append(half, rest...); !bytes.Equal(got, want1) {
		t.Fatal("the first reader's bytes changed while descriptors were evicted around it")
	}
	r1.Close()
	if st := pool.Stats(); st.Open != 1 || st.Idle != 1 {
		t.Fatalf("pool after every reader ended: %+v", st)
	}
}

// Retention deleting segments closes their idle pooled descriptors at
// once; a read in flight on one keeps its descriptor, and its bytes, until
// it ends.
func TestRetentionClosesPooledDescriptors(t *testing.T) {
	dir := t.TempDir()
	fsys := osFS(t, dir)
	pool := commitlog.NewFilePool(64)
	l := openLog(t, fsys, commitlog.Options{SegmentBytes: 2048, RetentionBytes: 4096, RetentionAge: -1, Files: pool})
	defer l.Close()
	for range 120 {
		if _, err := l.Append(batch(t, "r", 5, 1), 0); err != nil {
			t.Fatal(err)
		}
	}
	commit(l)
	readAll(t, l, 0) // every segment's descriptor is idle in the pool now
	segs := len(l.ClosedSegments()) + 1
	if open, _ := segmentFDs(t, dir); open != segs {
		t.Fatalf("%d segment descriptors open for %d segments read", open, segs)
	}
	inFlight, err := l.Read(0, 1<<20, l.Offsets().HighWatermark)
	if err != nil {
		t.Fatal(err)
	}
	defer inFlight.Close()
	want, err := os.ReadFile(filepath.Join(dir, "orders-0", "00000000000000000000.log"))
	if err != nil {
		t.Fatal(err)
	}
	n, err := l.ApplyRetention()
	if err != nil || n < 2 {
		t.Fatalf("retention deleted %d segments: %v", n, err)
	}
	left := len(l.ClosedSegments()) + 1
	open, deleted := segmentFDs(t, dir)
	if deleted != 1 || open != left+1 {
		t.Fatalf("after deleting %d segments: %d segment descriptors open, %d on deleted files; want %d and 1 (the read in flight)", n, open, deleted, left+1)
	}
	if got := readBatches(t, inFlight); !bytes.Equal(got, want[inFlight.Position:inFlight.Position+inFlight.Size]) {
		t.Fatal("the read in flight lost its bytes to retention")
	}
	inFlight.Close()
	if _, deleted := segmentFDs(t, dir); deleted != 0 {
		t.Fatalf("%d descriptors still open on deleted segments after the read ended", deleted)
	}
}

// A descriptor holding writes not yet fsynced is never closed by the pool:
// logs appended to with fsync off keep theirs past the bound; a crash
// (no Close) and a torn tail recover as without a pool, with another one.
func TestRecoveryAfterCrashWithPool(t *testing.T) {
	const logs = 6
	dir := t.TempDir()
	fsys := osFS(t, dir)
	pool := commitlog.NewFilePool(1)
	opts := commitlog.Options{SegmentBytes: 2048, FlushInterval: -1, Files: pool}
	var lastSize int
	for i := range logs {
		l, err := commitlog.Open(fsys, fmt.Sprintf("c-%d", i), opts)
		if err != nil {
			t.Fatal(err)
		}
		for j := range 30 {
			b := batch(t, fmt.Sprintf("c%d-%d", i, j), 4, 1)
			lastSize = len(b)
			if _, err := l.Append(b, 0); err != nil {
				t.Fatal(err)
			}
		}
		commit(l)
		readAll(t, l, 0)
		// Left open, never closed: the process dies with them.
	}
	if st := pool.Stats(); st.Open < logs {
		t.Fatalf("pool %+v: the writers' descriptors of %d logs with unsynced appends were closed", st, logs)
	}
	for i := range logs {
		segs, _ := filepath.Glob(filepath.Join(dir, fmt.Sprintf("c-%d", i), "*.log"))
		appendFile(t, segs[len(segs)-1], batch(t, "torn", 4, 1)[:lastSize/2])
	}
	fsys2 := osFS(t, dir)
	pool2 := commitlog.NewFilePool(2)
	opts.Files = pool2
	for i := range logs {
		l, err := commitlog.Open(fsys2, fmt.Sprintf("c-%d", i), opts)
		if err != nil {
			t.Fatal(err)
		}
		if end := l.Offsets().LogEnd; end != 120 {
			t.Fatalf("log %d ends at %d after recovery, want 120", i, end)
		}
		commit(l)
		recs := readAll(t, l, 0)
		if len(recs) != 120 || string(recs[119].Value) != fmt.Sprintf("c%d-29-3", i) {
			t.Fatalf("log %d: %d records after recovery", i, len(recs))
		}
		if info, err := l.Append(batch(t, "after", 1, 1), 0); err != nil || info.FirstOffset != 120 {
			t.Fatalf("log %d: append after recovery: %+v %v", i, info, err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if st := pool2.Stats(); st.Open != 0 {
		t.Fatalf("descriptors open after every log closed: %+v", st)
	}
}

// An append whose active segment lost its idle descriptor to eviction and
// cannot open it again (EMFILE) fails retriably and leaves the log
// writable, as a roll without descriptors does.
func TestAppendWithoutDescriptors(t *testing.T) {
	dir := t.TempDir()
	ffs := faultfs.New(osFS(t, dir))
	pool := commitlog.NewFilePool(1)
	l := openLog(t, ffs, commitlog.Options{Files: pool})
	defer l.Close()
	other, err := commitlog.Open(osFS(t, dir), "other-0", commitlog.Options{Files: pool})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := l.Append(batch(t, "a", 5, 1), 0); err != nil {
		t.Fatal(err)
	}
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	// The other log's append and fsync take the one idle slot.
	if _, err := other.Append(batch(t, "o", 5, 1), 0); err != nil {
		t.Fatal(err)
	}
	if err := other.Flush(); err != nil {
		t.Fatal(err)
	}
	ffs.FailNextOpen(syscall.EMFILE)
	_, err = l.Append(batch(t, "b", 5, 1), 0)
	if !errors.Is(err, api.ErrStorage) || l.Err() != nil {
		t.Fatalf("append that found no descriptor: %v; Err() %v", err, l.Err())
	}
	// Running out closed every idle descriptor, so the retry finds one.
	if st := pool.Stats(); st.Idle != 0 {
		t.Fatalf("pool after EMFILE: %+v", st)
	}
	if info, err := l.Append(batch(t, "c", 5, 1), 0); err != nil || info.FirstOffset != 5 {
		t.Fatalf("append after descriptors came back: %+v %v", info, err)
	}
	commit(l)
	if n := len(readAll(t, l, 0)); n != 10 {
		t.Fatalf("read %d records, want 10", n)
	}
}

// A clean's swap replaces segment files under pooled descriptors: the old
// files' idle descriptors close, a read in flight on one keeps reading the
// old bytes, and reads after the swap see the cleaned segment, whose
// descriptors followed its files through the renames.
func TestCleanSwapWithPooledDescriptors(t *testing.T) {
	dir := t.TempDir()
	pool := commitlog.NewFilePool(4)
	opts := crashOpts
	opts.Files = pool
	l := openLog(t, osFS(t, dir), opts)
	defer l.Close()
	h := history{}
	h.fillKeyed(t, l, api.CompressionNone, 40, t0)
	before := allOffsets(h)
	readAll(t, l, 0) // the segments' descriptors are idle in the pool
	inFlight, err := l.Read(0, 1<<20, l.Offsets().HighWatermark)
	if err != nil {
		t.Fatal(err)
	}
	defer inFlight.Close()
	old, err := os.ReadFile(filepath.Join(dir, "orders-0", "00000000000000000000.log"))
	if err != nil {
		t.Fatal(err)
	}
	limit := cleanLimit(l)
	if _, err := l.Clean(t.Context(), t0, keepTombstones); err != nil {
		t.Fatal(err)
	}
	h.checkLog(t, l, h.survivors(limit))
	if _, deleted := segmentFDs(t, dir); deleted != 1 {
		t.Fatalf("%d descriptors on replaced segment files after the clean; want 1 (the read in flight)", deleted)
	}
	if got := readBatches(t, inFlight); !bytes.Equal(got, old[inFlight.Position:inFlight.Position+inFlight.Size]) {
		t.Fatal("the read in flight did not read the bytes it located")
	}
	inFlight.Close()
	if _, deleted := segmentFDs(t, dir); deleted != 0 {
		t.Fatalf("%d descriptors on replaced segment files after the read ended", deleted)
	}
	// The cleaned segments survive a reopen, their indexes written whole.
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, osFS(t, dir), opts)
	defer l.Close()
	h.checkLog(t, l, h.survivors(limit))
	if len(h.survivors(limit)) == len(before) {
		t.Fatal("fixture: the clean removed nothing")
	}
}
