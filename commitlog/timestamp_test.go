package commitlog_test

import (
	"io/fs"
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
