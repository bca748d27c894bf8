package commitlog_test

import (
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-io/sluice/commitlog"
	"github.com/sluice-io/sluice/recordbatch"
)

// gatedFS holds every read of one batch's bytes (len bytes at off of a
// segment log: the read that decodes it, which header scans never match)
// until gate is closed, and says when one started. Reads of anything else
// pass.
type gatedFS struct {
	commitlog.FS
	started  chan struct{}
	gate     chan struct{}
	off, len atomic.Int64
}

func (g *gatedFS) OpenFile(name string, flag int, perm fs.FileMode) (commitlog.File, error) {
	f, err := g.FS.OpenFile(name, flag, perm)
	if err != nil || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	return gatedFile{f, g}, nil
}

type gatedFile struct {
	commitlog.File
	g *gatedFS
}

func (f gatedFile) ReadAt(p []byte, off int64) (int, error) {
	if off == f.g.off.Load() && int64(len(p)) == f.g.len.Load() {
		select {
		case f.g.started <- struct{}{}:
		default:
		}
		<-f.g.gate
	}
	return f.File.ReadAt(p, off)
}

// ListOffsets by time reads and decodes its batch without the log's lock:
// an append goes through while that read is stalled.
func TestOffsetForTimestampDecodesOutsideTheLock(t *testing.T) {
	dir := t.TempDir()
	g := &gatedFS{FS: osFS(t, dir), started: make(chan struct{}, 1), gate: make(chan struct{})}
	l := openLog(t, g, commitlog.Options{SegmentBytes: 2048})
	defer l.Close()
	for i := 0; i < 20; i++ {
		if _, err := l.Append(batch(t, "t", 5, int64(1000+10*i)), 0); err != nil {
			t.Fatal(err)
		}
	}
	commit(l)
	// The batch holding 1103 (records 1100 to 1104, offsets 50 to 54):
	// its bytes are what the lookup decodes.
	off, size := batchAt(t, filepath.Join(dir, "orders-0"), 50)
	g.off.Store(off)
	g.len.Store(size)
	type result struct {
		off int64
		ok  bool
		err error
	}
	done := make(chan result, 1)
	go func() {
		off, ok, err := l.OffsetForTimestamp(1103)
		done <- result{off, ok, err}
	}()
	select {
	case <-g.started:
	case <-time.After(10 * time.Second):
		t.Fatal("the lookup never read its batch")
	}
	appended := make(chan error, 1)
	go func() {
		_, err := l.Append(batch(t, "late", 5, 5000), 0)
		appended <- err
	}()
	select {
	case err := <-appended:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		close(g.gate)
		t.Fatal("an append waited for a timestamp lookup's read")
	}
	close(g.gate)
	r := <-done
	if r.err != nil || !r.ok || r.off != 53 {
		t.Fatalf("lookup of 1103: %d %v %v, want 53", r.off, r.ok, r.err)
	}
}

// batchAt finds the batch whose base offset is base in a log directory's
// segment files: its position in its file and its size.
func batchAt(t *testing.T, dir string, base int64) (pos, size int64) {
	t.Helper()
	segs, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil {
		t.Fatal(err)
	}
	for _, seg := range segs {
		b, err := os.ReadFile(seg)
		if err != nil {
			t.Fatal(err)
		}
		for p := 0; p+recordbatch.HeaderSize <= len(b); {
			h, err := recordbatch.ParseHeader(b[p:])
			if err != nil {
				t.Fatal(err)
			}
			if h.BaseOffset == base {
				return int64(p), int64(h.Size())
			}
			p += h.Size()
		}
	}
	t.Fatalf("no batch at offset %d in %s", base, dir)
	return 0, 0
}

// The time index is as sparse as the offset index (an entry per
// index.interval.bytes at most, not per batch), and lookups by time and
// each segment's max timestamp stay exact: with timestamps out of order,
// after a clean reopen and after a crash.
func TestSparseTimeIndex(t *testing.T) {
	dir := t.TempDir()
	opts := commitlog.Options{SegmentBytes: 64 << 10, IndexIntervalBytes: 1024}
	l := openLog(t, osFS(t, dir), opts)
	var ts []int64 // by offset
	rng := rand.New(rand.NewPCG(7, 7))
	for i := range 3000 {
		t0 := int64(1_000_000 + 10*i + rng.IntN(200) - 100)
		if i%500 == 250 {
			t0 += 50_000 // a max in mid-segment, away from any index entry
		}
		b := batch(t, "s", 2, t0)
		if _, err := l.Append(b, 0); err != nil {
			t.Fatal(err)
		}
		ts = append(ts, t0, t0+1)
	}
	commit(l)
	// The first record at or after q, by a scan of every timestamp.
	want := func(q int64) (int64, bool) {
		for off, x := range ts {
			if x >= q {
				return int64(off), true
			}
		}
		return 0, false
	}
	check := func(when string, l *commitlog.Log) {
		t.Helper()
		for q := int64(999_000); q < 1_000_000+30_000+60_000; q += 997 {
			got, ok, err := l.OffsetForTimestamp(q)
			w, wok := want(q)
			if err != nil || ok != wok || got != w {
				t.Fatalf("%s: OffsetForTimestamp(%d) = %d %v %v, want %d %v", when, q, got, ok, err, w, wok)
			}
		}
	}
	maxTS := func(l *commitlog.Log) []int64 {
		var out []int64
		for _, s := range l.ClosedSegments() {
			out = append(out, s.MaxTimestamp)
		}
		return out
	}
	check("appended", l)
	maxes := maxTS(l)
	for i, s := range l.ClosedSegments() {
		var w int64 = -1
		for off := s.Base; off < s.Next; off++ {
			w = max(w, ts[off])
		}
		if maxes[i] != w {
			t.Fatalf("segment %d: max timestamp %d, want %d", s.Base, maxes[i], w)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	idx, _ := filepath.Glob(filepath.Join(dir, "orders-0", "*.index"))
	for _, name := range idx {
		oi, err := os.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		ti, err := os.Stat(strings.TrimSuffix(name, ".index") + ".timeindex")
		if err != nil {
			t.Fatal(err)
		}
		if ti.Size()/12 > oi.Size()/8 {
			t.Fatalf("%s: %d time-index entries for %d offset-index entries", filepath.Base(name), ti.Size()/12, oi.Size()/8)
		}
	}
	l = openLog(t, osFS(t, dir), opts)
	check("reopened", l)
	if got := maxTS(l); fmt.Sprint(got) != fmt.Sprint(maxes) {
		t.Fatalf("max timestamps after a reopen %v, want %v", got, maxes)
	}
	// A crash: the active segment is recovered, its indexes rebuilt.
	for i := range 200 {
		t0 := int64(1_000_000 + 10*(3000+i))
		if _, err := l.Append(batch(t, "c", 2, t0), 0); err != nil {
			t.Fatal(err)
		}
		ts = append(ts, t0, t0+1)
	}
	commit(l)
	check("before the crash", l)
	l = openLog(t, osFS(t, dir), opts) // the crashed process's log is left open
	defer l.Close()
	commit(l)
	check("after the crash", l)
}
