package commitlog_test

import (
	"io/fs"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/commitlog"
)

// gateFS holds the fsync of the HW checkpoint's file until release is
// closed, and says when one is held.
type gateFS struct {
	commitlog.FS
	held    chan struct{}
	release chan struct{}
	once    sync.Once
}

type gateFile struct {
	commitlog.File
	g *gateFS
}

func (g *gateFS) OpenFile(name string, flag int, perm fs.FileMode) (commitlog.File, error) {
	f, err := g.FS.OpenFile(name, flag, perm)
	if err != nil || !strings.Contains(name, "high-watermark") {
		return f, err
	}
	return &gateFile{File: f, g: g}, nil
}

func (f *gateFile) Sync() error {
	f.g.once.Do(func() { close(f.g.held) })
	<-f.g.release
	return f.File.Sync()
}

// An HW checkpoint held up in fsync holds up neither appends nor reads of
// the partition, and a truncation made meanwhile is what the checkpoint
// ends up saying.
func TestHWCheckpointRunsOutsideTheLock(t *testing.T) {
	dir := t.TempDir()
	g := &gateFS{FS: osFS(t, dir), held: make(chan struct{}), release: make(chan struct{})}
	l := openLog(t, g, commitlog.Options{})
	for i := 0; i < 3; i++ {
		if _, err := l.Append(batch(t, "x", 10, 1), 0); err != nil {
			t.Fatal(err)
		}
	}
	commit(l) // HW 30
	done := make(chan error, 1)
	go func() { done <- l.CheckpointHW() }()
	select {
	case <-g.held:
	case <-time.After(10 * time.Second):
		t.Fatal("the checkpoint never reached its fsync")
	}

	appended := make(chan error, 1)
	go func() {
		_, err := l.Append(batch(t, "y", 10, 1), 0)
		if err == nil {
			var res commitlog.ReadResult
			res, err = l.Read(0, 1<<20, l.Offsets().LogEnd)
			res.Close()
		}
		if err == nil {
			_, err = l.TruncateTo(20) // the HW goes down to 20 with it
		}
		appended <- err
	}()
	select {
	case err := <-appended:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		close(g.release)
		t.Fatal("an append, read or truncation waited for the checkpoint's fsync")
	}
	close(g.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	data, ok, err := commitlog.ReadFile(g.FS, "orders-0", "high-watermark")
	if err != nil || !ok {
		t.Fatalf("checkpoint file: %v %v", ok, err)
	}
	if got, _ := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64); got != 20 {
		t.Fatalf("checkpoint says %d after the truncation to 20", got)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}
