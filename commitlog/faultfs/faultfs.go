// Package faultfs wraps a commitlog.FS so tests can make the next write or
// fsync fail, stop every change from some point on (a crash), and count
// fsyncs. Production code never uses it.
package faultfs

import (
	"errors"
	"io/fs"
	"os"
	"sync"

	"github.com/sluice-io/sluice/commitlog"
)

// Errors of injected faults.
var (
	// ErrInjected is the default error returned by injected faults.
	ErrInjected = errors.New("faultfs: injected I/O error")
	// ErrCrashed is returned by every change after the crash point.
	ErrCrashed = errors.New("faultfs: crashed")
)

// FS is a commitlog.FS that fails on demand.
type FS struct {
	inner commitlog.FS

	mu        sync.Mutex // guards the fields below
	failWrite error      // returned by the next WriteAt, then cleared
	failSync  error      // returned by the next Sync, then cleared
	failSyncs error      // returned by every Sync while set (FailSyncs)
	failOpen  error      // returned by the next OpenFile, then cleared
	syncs     int
	// crashIn counts down the changes still allowed before the crash point;
	// negative when no crash is armed.
	crashIn int
	crashed bool
}

// New wraps inner.
func New(inner commitlog.FS) *FS { return &FS{inner: inner, crashIn: -1} }

// CrashAfter lets n more changes through and fails every one after that with
// ErrCrashed, as if the process had died there: what reached the files
// stays, nothing more does. Changes are writes, truncations, fsyncs (of
// files and directories), renames, removals, directory creations and opens
// that create or truncate. Reads keep working, so a test can watch what the
// crashed process would have served and then reopen the directory.
func (f *FS) CrashAfter(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.crashIn, f.crashed = n, false
}

// Crashed reports whether the crash point was reached.
func (f *FS) Crashed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.crashed
}

// change accounts for one change and returns ErrCrashed past the crash point.
func (f *FS) change() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.crashed {
		return ErrCrashed
	}
	if f.crashIn == 0 {
		f.crashed = true
		return ErrCrashed
	}
	if f.crashIn > 0 {
		f.crashIn--
	}
	return nil
}

// FailNextWrite makes the next WriteAt on any file return err (ErrInjected when nil)
// after writing half of its bytes, as a disk that fills up mid-write would.
func (f *FS) FailNextWrite(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil {
		err = ErrInjected
	}
	f.failWrite = err
}

// FailNextSync makes the next Sync on any file return err (ErrInjected when nil).
func (f *FS) FailNextSync(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil {
		err = ErrInjected
	}
	f.failSync = err
}

// FailSyncs makes every Sync of a file or directory return err until it
// is called again with nil: a disk that keeps failing its flushes (EIO),
// until it is repaired.
func (f *FS) FailSyncs(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failSyncs = err
}

// Syncs counts the file fsyncs that succeeded.
func (f *FS) Syncs() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.syncs
}

func (f *FS) takeWrite() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	err := f.failWrite
	f.failWrite = nil
	return err
}

func (f *FS) takeSync() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	err := f.failSync
	f.failSync = nil
	if err == nil {
		err = f.failSyncs
	}
	if err == nil {
		f.syncs++
	}
	return err
}

// FailNextOpen makes the next OpenFile fail with err (syscall.EMFILE: the
// process is out of file descriptors).
func (f *FS) FailNextOpen(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failOpen = err
}

func (f *FS) OpenFile(name string, flag int, perm fs.FileMode) (commitlog.File, error) {
	f.mu.Lock()
	failOpen := f.failOpen
	f.failOpen = nil
	f.mu.Unlock()
	if failOpen != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: failOpen}
	}
	if flag&(os.O_CREATE|os.O_TRUNC) != 0 {
		if err := f.change(); err != nil {
			return nil, err
		}
	}
	file, err := f.inner.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &faultFile{File: file, fs: f}, nil
}

func (f *FS) Remove(name string) error {
	if err := f.change(); err != nil {
		return err
	}
	return f.inner.Remove(name)
}

func (f *FS) RemoveAll(name string) error {
	if err := f.change(); err != nil {
		return err
	}
	return f.inner.RemoveAll(name)
}

func (f *FS) Rename(oldname, newname string) error {
	if err := f.change(); err != nil {
		return err
	}
	return f.inner.Rename(oldname, newname)
}

func (f *FS) ReadDir(name string) ([]fs.DirEntry, error) {
	return f.inner.ReadDir(name)
}

func (f *FS) MkdirAll(name string, perm fs.FileMode) error {
	if err := f.change(); err != nil {
		return err
	}
	return f.inner.MkdirAll(name, perm)
}

func (f *FS) SyncDir(name string) error {
	if err := f.change(); err != nil {
		return err
	}
	if err := f.takeSync(); err != nil {
		return err
	}
	return f.inner.SyncDir(name)
}

type faultFile struct {
	commitlog.File
	fs *FS
}

func (ff *faultFile) WriteAt(p []byte, off int64) (int, error) {
	if err := ff.fs.change(); err != nil {
		return 0, err
	}
	if err := ff.fs.takeWrite(); err != nil {
		n, _ := ff.File.WriteAt(p[:len(p)/2], off)
		return n, err
	}
	return ff.File.WriteAt(p, off)
}

func (ff *faultFile) Truncate(size int64) error {
	if err := ff.fs.change(); err != nil {
		return err
	}
	return ff.File.Truncate(size)
}

func (ff *faultFile) Sync() error {
	if err := ff.fs.change(); err != nil {
		return err
	}
	if err := ff.fs.takeSync(); err != nil {
		return err
	}
	return ff.File.Sync()
}
