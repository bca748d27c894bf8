package commitlog_test

import (
	"io/fs"
	"os"
	"testing"
	"time"

	"github.com/sluice-io/sluice/commitlog"
)

// gatedFS holds every read of a descriptor opened read-only (the ones a
// reader opens for itself) until gate is closed, and says when one started.
type gatedFS struct {
	commitlog.FS
	started chan struct{}
	gate    chan struct{}
}

func (g *gatedFS) OpenFile(name string, flag int, perm fs.FileMode) (commitlog.File, error) {
	f, err := g.FS.OpenFile(name, flag, perm)
	if err != nil || flag != os.O_RDONLY {
		return f, err
	}
	return gatedFile{f, g}, nil
}

type gatedFile struct {
	commitlog.File
	g *gatedFS
}

func (f gatedFile) ReadAt(p []byte, off int64) (int, error) {
	select {
	case f.g.started <- struct{}{}:
	default:
	}
	<-f.g.gate
	return f.File.ReadAt(p, off)
}

// ListOffsets by time reads and decodes its batch without the log's lock:
// an append goes through while that read is stalled.
func TestOffsetForTimestampDecodesOutsideTheLock(t *testing.T) {
	g := &gatedFS{FS: osFS(t, t.TempDir()), started: make(chan struct{}, 1), gate: make(chan struct{})}
	l := openLog(t, g, commitlog.Options{SegmentBytes: 2048})
	defer l.Close()
	for i := 0; i < 20; i++ {
		if _, err := l.Append(batch(t, "t", 5, int64(1000+10*i)), 0); err != nil {
			t.Fatal(err)
		}
	}
	commit(l)
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
