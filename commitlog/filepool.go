package commitlog

import (
	"container/list"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
)

// FilePool holds the descriptors of segment log files for every log that
// shares it, so that the descriptors a broker keeps open follow what its
// partitions do, not how many it has.
//
// A descriptor is opened when a segment is used (an append, a read, a
// recovery scan), leased to that use, and kept open, idle, once the last
// lease on it ends. When more than the pool's bound are open, idle ones
// are closed, least recently used first. A leased descriptor is never
// closed: not by eviction, not when its segment is deleted (retention,
// truncation, a clean's swap: it closes when its last lease ends, so a
// read in flight finishes on the bytes it started on). Nor is a use ever
// refused or made to wait because the bound is reached: the bound is on
// what is kept, and while more descriptors are in use at once the count
// passes it.
//
// Leases come in two kinds. Positional ones (pread, pwrite, fsync,
// ftruncate, fstat: everything the log does itself) share a descriptor
// with any number of others. A reader's lease (ReadResult, OpenSegment)
// owns the descriptor's file offset, which its holder moves with Seek and
// sendfile: no two readers share a descriptor, though positional users
// may use it beside one.
//
// Index files are not pooled: a segment's indexes live in memory and are
// written whole, through a descriptor opened for the write, when the
// segment closes (roll) and when the log does.
type FilePool struct {
	max int

	mu        sync.Mutex // guards the fields below; a leaf, never held across I/O
	open      int        // descriptors open through the pool, idle or leased
	idle      list.List  // *poolFD with no lease, most recently used at the front
	opens     uint64
	evictions uint64
}

// DefaultMaxOpenFiles is the bound of a FilePool made with NewFilePool(0),
// and of the pool every log that names none shares.
const DefaultMaxOpenFiles = 1024

// NewFilePool returns a pool that keeps at most maxOpen descriptors open
// once their uses end; maxOpen <= 0 means DefaultMaxOpenFiles.
func NewFilePool(maxOpen int) *FilePool {
	if maxOpen <= 0 {
		maxOpen = DefaultMaxOpenFiles
	}
	return &FilePool{max: maxOpen}
}

// sharedPool is the pool of the logs whose Options name none.
var sharedPool = sync.OnceValue(func() *FilePool { return NewFilePool(0) })

// FilePoolStats is a snapshot of a pool.
type FilePoolStats struct {
	Max       int    // the bound on descriptors kept open
	Open      int    // descriptors open now, idle or leased
	Idle      int    // of which not leased: those eviction may close
	Opens     uint64 // descriptors opened since the pool was made
	Evictions uint64 // idle descriptors closed to keep within the bound, or to free one after EMFILE
}

// Stats describes the pool now.
func (p *FilePool) Stats() FilePoolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return FilePoolStats{Max: p.max, Open: p.open, Idle: p.idle.Len(), Opens: p.opens, Evictions: p.evictions}
}

// poolFile is one segment log file whose descriptors come from a pool. All
// of them refer to the same file: once opened, a descriptor follows the
// file through a rename, and keeps an unlinked file readable.
type poolFile struct {
	pool *FilePool
	fs   FS

	// Guarded by pool.mu.
	name string    // what a new descriptor opens; a clean's swap renames it
	fds  []*poolFD // the open descriptors
	gone bool      // deleted or replaced: no new lease, descriptors close as their leases end
}

// poolFD is one open descriptor of a poolFile. Its fields are guarded by
// pool.mu.
type poolFD struct {
	f      File
	pf     *poolFile
	leases int
	reader bool          // a reader's lease owns the file offset
	elem   *list.Element // in pool.idle while leases == 0
}

// lease is one use of a descriptor. f is valid until release, which may
// be called more than once.
type lease struct {
	f      File
	fd     *poolFD
	reader bool
	done   bool // guarded by pool.mu
}

func (p *FilePool) file(fsys FS, name string) *poolFile {
	return &poolFile{pool: p, fs: fsys, name: name}
}

// errFileGone is what a lease on a deleted segment's file gets: the log
// never asks for one (segments leave its list, under its lock, before they
// are deleted), so it means a bug, reported as a storage error.
var errFileGone = errors.New("segment file already deleted")

// acquire leases a descriptor of pf, opening one when none fits: any
// descriptor for a positional lease, one without a reader for a reader's.
// flag adds to os.O_RDWR (os.O_CREATE to create the file). An open that
// fails for want of descriptors (EMFILE, ENFILE) closes every idle
// descriptor of the pool first, so that a retry finds some.
func (pf *poolFile) acquire(reader bool, flag int) (*lease, error) {
	p := pf.pool
	p.mu.Lock()
	if pf.gone {
		p.mu.Unlock()
		return nil, fmt.Errorf("%s: %w", pf.name, errFileGone)
	}
	for _, fd := range pf.fds {
		if reader && fd.reader {
			continue
		}
		l := p.leaseLocked(fd, reader)
		p.mu.Unlock()
		return l, nil
	}
	name := pf.name
	p.mu.Unlock()

	f, err := pf.fs.OpenFile(name, os.O_RDWR|flag, 0o644)
	if err != nil {
		if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
			p.closeIdle()
		}
		return nil, err
	}
	p.mu.Lock()
	p.opens++
	p.open++
	fd := &poolFD{f: f, pf: pf}
	pf.fds = append(pf.fds, fd)
	l := p.leaseLocked(fd, reader)
	victims := p.evictLocked()
	p.mu.Unlock()
	closeFDs(victims)
	return l, nil
}

func (p *FilePool) leaseLocked(fd *poolFD, reader bool) *lease {
	if fd.elem != nil {
		p.idle.Remove(fd.elem)
		fd.elem = nil
	}
	fd.leases++
	fd.reader = fd.reader || reader
	return &lease{f: fd.f, fd: fd, reader: reader}
}

// share is another positional lease on l's descriptor, for a use that
// must outlast l or run beside it without the log's lock.
func (l *lease) share() *lease {
	p := l.fd.pf.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.leaseLocked(l.fd, false)
}

// release ends the lease. The descriptor goes idle when it was the last
// one, or closes when its file is gone or the pool is past its bound.
func (l *lease) release() {
	if l == nil {
		return
	}
	fd := l.fd
	p := fd.pf.pool
	p.mu.Lock()
	if l.done {
		p.mu.Unlock()
		return
	}
	l.done = true
	fd.leases--
	if l.reader {
		fd.reader = false
	}
	var victims []*poolFD
	if fd.leases == 0 {
		if fd.pf.gone {
			p.dropLocked(fd)
			victims = append(victims, fd)
		} else {
			fd.elem = p.idle.PushFront(fd)
			victims = p.evictLocked()
		}
	}
	p.mu.Unlock()
	closeFDs(victims)
}

// retire marks pf gone: its idle descriptors close now, leased ones when
// their leases end, and it gives no new lease.
func (pf *poolFile) retire() {
	p := pf.pool
	p.mu.Lock()
	pf.gone = true
	var victims []*poolFD
	for _, fd := range append([]*poolFD(nil), pf.fds...) {
		if fd.leases == 0 {
			p.dropLocked(fd)
			victims = append(victims, fd)
		}
	}
	p.mu.Unlock()
	closeFDs(victims)
}

// rename points pf at the name its file was renamed to; descriptors
// already open follow the file by themselves.
func (pf *poolFile) rename(name string) {
	pf.pool.mu.Lock()
	pf.name = name
	pf.pool.mu.Unlock()
}

// evictLocked takes idle descriptors, oldest use first, until the pool is
// within its bound; the caller closes them after unlocking.
func (p *FilePool) evictLocked() []*poolFD {
	var victims []*poolFD
	for p.open > p.max && p.idle.Len() > 0 {
		fd := p.idle.Back().Value.(*poolFD)
		p.dropLocked(fd)
		p.evictions++
		victims = append(victims, fd)
	}
	return victims
}

// closeIdle closes every idle descriptor.
func (p *FilePool) closeIdle() {
	p.mu.Lock()
	var victims []*poolFD
	for p.idle.Len() > 0 {
		fd := p.idle.Back().Value.(*poolFD)
		p.dropLocked(fd)
		p.evictions++
		victims = append(victims, fd)
	}
	p.mu.Unlock()
	closeFDs(victims)
}

// dropLocked forgets an unleased descriptor; the caller closes it.
func (p *FilePool) dropLocked(fd *poolFD) {
	if fd.elem != nil {
		p.idle.Remove(fd.elem)
		fd.elem = nil
	}
	fds := fd.pf.fds
	for i, x := range fds {
		if x == fd {
			fd.pf.fds = append(fds[:i], fds[i+1:]...)
			break
		}
	}
	p.open--
}

// closeFDs closes descriptors no lease holds. Every write through them was
// fsynced before its lease ended (a segment holds its writer's lease until
// then), or belongs to a file that is gone: a close error tells nothing.
func closeFDs(fds []*poolFD) {
	for _, fd := range fds {
		_ = fd.f.Close()
	}
}
