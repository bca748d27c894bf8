package commitlog

import (
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"
)

// countingFS hands out fakeFiles and counts those open.
type countingFS struct {
	FS   // unused but for OpenFile
	open atomic.Int64
}

type fakeFile struct {
	File
	fs     *countingFS
	closed atomic.Bool
	reader atomic.Int64 // id of the reader lease using the offset, 0 when none
}

func (c *countingFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	c.open.Add(1)
	return &fakeFile{fs: c}, nil
}

func (f *fakeFile) Close() error {
	if f.closed.Swap(true) {
		return os.ErrClosed
	}
	f.fs.open.Add(-1)
	return nil
}

// Leases taken and released at random by many goroutines, while files are
// retired and replaced: no leased descriptor is ever closed, no two reader
// leases ever hold one descriptor, and once every lease ended the pool
// keeps at most its bound open, every other descriptor closed.
func TestFilePoolLeases(t *testing.T) {
	const bound, files, workers, rounds = 3, 5, 8, 2000
	cfs := &countingFS{}
	p := NewFilePool(bound)
	var mu sync.Mutex // guards pfs
	pfs := make([]*poolFile, files)
	for i := range pfs {
		pfs[i] = p.file(cfs, fmt.Sprintf("f%d", i))
	}
	var ids atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			type held struct {
				l      *lease
				reader bool
			}
			var hs []held
			check := func() bool {
				for _, h := range hs {
					if h.l.f.(*fakeFile).closed.Load() {
						errs <- fmt.Errorf("leased descriptor closed under its user")
						return false
					}
				}
				return true
			}
			for range rounds {
				if !check() {
					return
				}
				if len(hs) > 0 && (len(hs) == 3 || rng.IntN(2) == 0) {
					j := rng.IntN(len(hs))
					h := hs[j]
					hs = append(hs[:j], hs[j+1:]...)
					if h.reader {
						h.l.f.(*fakeFile).reader.Store(0)
					}
					h.l.release()
					h.l.release() // twice is once
					continue
				}
				i := rng.IntN(files)
				if rng.IntN(50) == 0 {
					// Retire the file, as a deletion does, and replace it.
					mu.Lock()
					pfs[i].retire()
					pfs[i] = p.file(cfs, fmt.Sprintf("f%d", i))
					mu.Unlock()
					continue
				}
				mu.Lock()
				pf := pfs[i]
				mu.Unlock()
				reader := rng.IntN(2) == 0
				l, err := pf.acquire(reader, 0)
				if err != nil {
					continue // retired meanwhile
				}
				if id := ids.Add(1); reader && !l.f.(*fakeFile).reader.CompareAndSwap(0, id) {
					errs <- fmt.Errorf("reader lease %d on a descriptor reader %d holds", id, l.f.(*fakeFile).reader.Load())
					return
				}
				hs = append(hs, held{l, reader})
			}
			for _, h := range hs {
				if h.reader {
					h.l.f.(*fakeFile).reader.Store(0)
				}
				h.l.release()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	st := p.Stats()
	if st.Open > bound || st.Idle != st.Open {
		t.Fatalf("pool after every lease ended: %+v", st)
	}
	if n := cfs.open.Load(); n != int64(st.Open) {
		t.Fatalf("%d descriptors open, the pool counts %d", n, st.Open)
	}
	for _, pf := range pfs {
		pf.retire()
	}
	if n := cfs.open.Load(); n != 0 || p.Stats().Open != 0 {
		t.Fatalf("%d descriptors open after every file retired (pool %+v)", n, p.Stats())
	}
}
