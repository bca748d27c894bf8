package commitlog_test

import (
	"io/fs"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sluice-io/sluice/commitlog"
)

// countFS counts ReadAt calls on segment files.
type countFS struct {
	commitlog.FS
	reads atomic.Int64
}

type countFile struct {
	commitlog.File
	c *countFS
}

func (c *countFS) OpenFile(name string, flag int, perm fs.FileMode) (commitlog.File, error) {
	f, err := c.FS.OpenFile(name, flag, perm)
	if err != nil || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	return &countFile{File: f, c: c}, nil
}

func (f *countFile) ReadAt(p []byte, off int64) (int, error) {
	f.c.reads.Add(1)
	return f.File.ReadAt(p, off)
}

// Finding an offset among small batches and walking the batches a fetch
// takes read their headers in bulk, not one read per batch.
func TestSmallBatchHeadersAreReadInBulk(t *testing.T) {
	c := &countFS{FS: osFS(t, t.TempDir())}
	l := openLog(t, c, commitlog.Options{})
	defer l.Close()
	const batches = 2000
	for i := 0; i < batches; i++ {
		if _, err := l.Append(batch(t, "x", 1, 1), 0); err != nil {
			t.Fatal(err)
		}
	}
	commit(l)
	for _, off := range []int64{0, 37, 1000, 1999} {
		c.reads.Store(0)
		res, err := l.Read(off, 1<<20, l.Offsets().HighWatermark)
		if err != nil {
			t.Fatal(err)
		}
		res.Close()
		if res.NextOffset != batches {
			t.Fatalf("read from %d ends at %d, want %d", off, res.NextOffset, batches)
		}
		// ~100-byte batches: 8 KiB reads hold ~80 headers each.
		if n, most := c.reads.Load(), int64(batches-off)/40+2; n > most {
			t.Fatalf("read from %d over %d batches made %d header reads, want at most %d", off, batches-off, n, most)
		}
	}
}
