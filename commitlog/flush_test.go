package commitlog_test

import (
	"fmt"
	"io/fs"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-io/sluice/commitlog"
	"github.com/sluice-io/sluice/internal/testwait"
)

// syncGateFS holds every fsync of a segment's log file while held is set,
// telling entered when one starts waiting.
type syncGateFS struct {
	commitlog.FS
	held    atomic.Bool
	gate    chan struct{}
	entered chan struct{}
	syncs   atomic.Int64
}

type syncGateFile struct {
	commitlog.File
	fs  *syncGateFS
	log bool
}

func (g *syncGateFS) OpenFile(name string, flag int, perm fs.FileMode) (commitlog.File, error) {
	f, err := g.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &syncGateFile{File: f, fs: g, log: strings.HasSuffix(name, ".log")}, nil
}

func (f *syncGateFile) Sync() error {
	if f.log {
		if f.fs.held.Load() {
			f.fs.entered <- struct{}{}
			<-f.fs.gate
		}
		f.fs.syncs.Add(1)
	}
	return f.File.Sync()
}

// TestIntervalFsyncDoesNotBlockAppends: while the interval fsync waits on
// the disk, appends and reads of the log go on; the records appended
// meanwhile are fsynced by the next interval.
func TestIntervalFsyncDoesNotBlockAppends(t *testing.T) {
	g := &syncGateFS{FS: osFS(t, t.TempDir()), gate: make(chan struct{}), entered: make(chan struct{}, 1)}
	l := openLog(t, g, commitlog.Options{FlushInterval: 10 * time.Millisecond})
	defer l.Close()
	warmUp(t, l)
	g.held.Store(true)
	released := false
	release := func() {
		if !released {
			released = true
			g.held.Store(false)
			close(g.gate)
		}
	}
	defer release()
	if _, err := l.Append(batch(t, "a", 3, 1), 0); err != nil {
		t.Fatal(err)
	}
	select {
	case <-g.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no interval fsync 10 s after an append with flush.ms=10")
	}
	// The fsync is held: an append and a read must not wait for it.
	done := make(chan error, 1)
	go func() {
		_, err := l.Append(batch(t, "b", 3, 2), 0)
		if err == nil {
			_ = l.Offsets()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("an append waited 10 s behind an interval fsync held by the disk")
	}
	before := g.syncs.Load()
	release()
	// The second append is fsynced by an interval of its own.
	testwait.Check(t, 10*time.Second, "the later append's fsync", func() error {
		if n := g.syncs.Load() - before; n < 2 {
			return fmt.Errorf("%d log fsyncs after the release; want the held one and one for the later append", n)
		}
		return nil
	})
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
}
