package commitlog

import (
	"io"
	"io/fs"
	"os"
)

// File is what the log needs of an open file. The OS implementation returns
// *os.File, which is what lets a fetch hand a segment to sendfile: callers that
// want zero-copy type-assert the File they got from Open to *os.File.
type File interface {
	io.Reader
	io.ReaderAt
	io.WriterAt
	io.Seeker
	io.Closer
	// Sync flushes the file's data to stable storage.
	Sync() error
	// Truncate changes the file's size.
	Truncate(size int64) error
	// Stat describes the file; only Size is used.
	Stat() (os.FileInfo, error)
}

// FS is the filesystem a log lives in. Names are relative to the FS root and
// use '/' separators; an implementation must never let a name escape its root.
// Tests wrap it to fail the next write or sync (see package faultfs).
type FS interface {
	// OpenFile opens name with os.OpenFile semantics.
	OpenFile(name string, flag int, perm fs.FileMode) (File, error)
	// Remove deletes a file or an empty directory.
	Remove(name string) error
	// RemoveAll deletes name and everything below it; a missing name is not an error.
	RemoveAll(name string) error
	// Rename moves oldname to newname atomically, replacing newname.
	Rename(oldname, newname string) error
	// ReadDir lists a directory, sorted by name.
	ReadDir(name string) ([]fs.DirEntry, error)
	// MkdirAll creates a directory and its parents.
	MkdirAll(name string, perm fs.FileMode) error
	// SyncDir fsyncs a directory so that creates, renames and removes in it survive a crash.
	SyncDir(name string) error
}

// OSFS is an FS on a real directory, opened through os.Root so that a crafted
// topic name can never reach outside the data directory.
type OSFS struct {
	root *os.Root
}

// NewOSFS creates dir if needed and opens it as an FS root.
func NewOSFS(dir string) (*OSFS, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	return &OSFS{root: r}, nil
}

// Close releases the root directory handle.
func (o *OSFS) Close() error { return o.root.Close() }

// Name is the directory the FS is rooted at.
func (o *OSFS) Name() string { return o.root.Name() }

func (o *OSFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	f, err := o.root.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return f, nil
}

func (o *OSFS) Remove(name string) error             { return o.root.Remove(name) }
func (o *OSFS) RemoveAll(name string) error          { return o.root.RemoveAll(name) }
func (o *OSFS) Rename(oldname, newname string) error { return o.root.Rename(oldname, newname) }
func (o *OSFS) MkdirAll(name string, perm fs.FileMode) error {
	return o.root.MkdirAll(name, perm)
}

func (o *OSFS) ReadDir(name string) ([]fs.DirEntry, error) {
	return fs.ReadDir(o.root.FS(), name)
}

func (o *OSFS) SyncDir(name string) error {
	d, err := o.root.Open(name)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
