package tier

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"
	"time"
)

// LocalDir is a Bucket in a local directory, for `sluice dev` and tests.
// Several LocalDirs (in one process or several) may share a directory.
//
// Layout under the directory, opened through os.Root so that no key (and no
// symlink planted in the tree) can reach outside it:
//
//	objects/<key>   one file per object; a key's slashes are directories
//	tmp/<random>    uploads in progress; renamed into objects/ when complete
//
// Put writes the temp file, fsyncs it, renames it over objects/<key> and
// fsyncs the directories it touched, so a crash leaves the old object or the
// new one, never a torn one. Delete removes directories it leaves empty.
type LocalDir struct {
	root *os.Root
	dir  string
}

var _ Bucket = (*LocalDir)(nil)

const (
	localObjects = "objects"
	localTmp     = "tmp"
	// localStaleTmp is how long a temp file may go unmodified before
	// OpenLocalDir deletes it as the leftover of a crashed upload. An upload in
	// progress writes to its temp file continually.
	localStaleTmp = time.Hour
	// localCopyChunk is how much Put copies between two looks at ctx.
	localCopyChunk = 8 << 20
)

// OpenLocalDir opens (creating it if needed) a LocalDir in dir and deletes
// temp files that crashed uploads left behind.
func OpenLocalDir(dir string) (*LocalDir, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("tier: local dir: %w", err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("tier: local dir: %w", err)
	}
	for _, d := range []string{localObjects, localTmp} {
		if err := root.MkdirAll(d, 0o755); err != nil {
			_ = root.Close() // the mkdir error is the one to report
			return nil, fmt.Errorf("tier: local dir %s: %w", dir, err)
		}
	}
	b := &LocalDir{root: root, dir: dir}
	b.removeStaleTemps()
	return b, nil
}

func (b *LocalDir) removeStaleTemps() {
	entries, err := fs.ReadDir(b.root.FS(), localTmp)
	if err != nil {
		return
	}
	for _, e := range entries {
		if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > localStaleTmp {
			_ = b.root.Remove(path.Join(localTmp, e.Name()))
		}
	}
}

// String names the bucket for logs.
func (b *LocalDir) String() string { return "dir:" + b.dir }

func objectPath(key string) string { return localObjects + "/" + key }

// Put implements Bucket.
func (b *LocalDir) Put(ctx context.Context, key string, r io.Reader, size int64) (err error) {
	if err := checkPut(key, size); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return b.fail("put", key, err)
	}
	var rnd [12]byte
	_, _ = rand.Read(rnd[:])
	tmp := path.Join(localTmp, hex.EncodeToString(rnd[:]))
	f, err := b.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return b.fail("put", key, err)
	}
	renamed := false
	defer func() {
		if f != nil {
			_ = f.Close() // only on a failed put: the error is already chosen
		}
		if !renamed {
			_ = b.root.Remove(tmp)
		}
	}()

	// Copy in chunks so that a cancelled ctx stops a large copy; io.CopyN
	// keeps the copy_file_range/sendfile path when r is an *os.File.
	var n int64
	for n < size {
		if err := ctx.Err(); err != nil {
			return b.fail("put", key, err)
		}
		c, err := io.CopyN(f, r, min(size-n, localCopyChunk))
		n += c
		if err == io.EOF {
			return fmt.Errorf("tier: local put %q: %w", key, &errShortBody{got: n, want: size})
		}
		if err != nil {
			return b.fail("put", key, err)
		}
	}
	if err := f.Sync(); err != nil {
		return b.fail("put", key, err)
	}
	err = f.Close()
	f = nil
	if err != nil {
		return b.fail("put", key, err)
	}

	// A concurrent Delete may remove the parent directories between MkdirAll
	// and Rename (it prunes empty ones): make them again and retry.
	dst := objectPath(key)
	for attempt := 0; ; attempt++ {
		if dir := path.Dir(dst); dir != localObjects {
			if err := b.root.MkdirAll(dir, 0o755); err != nil {
				return b.fail("put", key, err)
			}
		}
		err = b.root.Rename(tmp, dst)
		if err == nil || !errors.Is(err, fs.ErrNotExist) || attempt == 10 {
			break
		}
	}
	if err != nil {
		return b.fail("put", key, err)
	}
	renamed = true
	// Make the rename and any new directories durable: fsync every directory
	// from the key's parent up to objects/.
	for dir := path.Dir(dst); ; dir = path.Dir(dir) {
		if err := b.syncDir(dir); err != nil {
			return b.fail("put", key, err)
		}
		if dir == localObjects {
			return nil
		}
	}
}

func (b *LocalDir) syncDir(dir string) error {
	d, err := b.root.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// open opens the object's file, failing with ErrNotExist for directories.
func (b *LocalDir) open(op, key string) (*os.File, os.FileInfo, error) {
	if err := CheckKey(key); err != nil {
		return nil, nil, err
	}
	f, err := b.root.Open(objectPath(key))
	if err != nil {
		return nil, nil, b.fail(op, key, err)
	}
	info, err := f.Stat()
	if err != nil {
		_ = f.Close() // opened read-only
		return nil, nil, b.fail(op, key, err)
	}
	if !info.Mode().IsRegular() {
		_ = f.Close() // opened read-only
		return nil, nil, fmt.Errorf("tier: local %s %q: %w (a folder of other keys)", op, key, ErrNotExist)
	}
	return f, info, nil
}

// Get implements Bucket. The body is the object's *os.File.
func (b *LocalDir) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := ctx.Err(); err != nil {
		return nil, b.fail("get", key, err)
	}
	f, _, err := b.open("get", key)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// GetRange implements Bucket. The body reads the file from off with an
// io.LimitReader, which net/http can turn into sendfile.
func (b *LocalDir) GetRange(ctx context.Context, key string, off, length int64) (io.ReadCloser, error) {
	if err := CheckKey(key); err != nil {
		return nil, err
	}
	if err := checkRange(off, length); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, b.fail("get", key, err)
	}
	f, info, err := b.open("get", key)
	if err != nil {
		return nil, err
	}
	if off >= info.Size() {
		_ = f.Close() // opened read-only
		return nil, fmt.Errorf("tier: local get %q: %w: offset %d of a %d-byte object", key, ErrInvalidRange, off, info.Size())
	}
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		_ = f.Close() // opened read-only
		return nil, b.fail("get", key, err)
	}
	return &fileRange{Reader: io.LimitReader(f, length), f: f}, nil
}

// fileRange is a range of an open file.
type fileRange struct {
	io.Reader // an *io.LimitedReader over f
	f         *os.File
}

func (r *fileRange) Close() error { return r.f.Close() }

// Stat implements Bucket.
func (b *LocalDir) Stat(ctx context.Context, key string) (ObjectInfo, error) {
	if err := CheckKey(key); err != nil {
		return ObjectInfo{}, err
	}
	if err := ctx.Err(); err != nil {
		return ObjectInfo{}, b.fail("stat", key, err)
	}
	info, err := b.root.Stat(objectPath(key))
	if err != nil {
		return ObjectInfo{}, b.fail("stat", key, err)
	}
	if !info.Mode().IsRegular() {
		return ObjectInfo{}, fmt.Errorf("tier: local stat %q: %w (a folder of other keys)", key, ErrNotExist)
	}
	return ObjectInfo{Key: key, Size: info.Size(), LastModified: info.ModTime()}, nil
}

// List implements Bucket. It walks only the directory the prefix points into,
// collects the matching keys, sorts them (a directory walk's order is not
// byte order: "a/b" sorts after "a-c" and "a.c") and then calls fn.
func (b *LocalDir) List(ctx context.Context, prefix string, fn func(ObjectInfo) error) error {
	// The directory to walk: the prefix up to its last slash.
	start := localObjects
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		if checkPath(prefix[:i]) != nil {
			return nil // no valid key lies under it
		}
		start = objectPath(prefix[:i])
	}
	var infos []ObjectInfo
	err := fs.WalkDir(b.root.FS(), start, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == start && (errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)) {
				return fs.SkipAll // nothing under the prefix
			}
			if errors.Is(err, fs.ErrNotExist) {
				return nil // deleted while we walked
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if p == start {
			return nil
		}
		key := p[len(localObjects)+1:]
		if d.IsDir() {
			// Descend only where keys can still start with the prefix.
			if !strings.HasPrefix(key+"/", prefix) && !strings.HasPrefix(prefix, key+"/") {
				return fs.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || !strings.HasPrefix(key, prefix) {
			return nil
		}
		info, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		infos = append(infos, ObjectInfo{Key: key, Size: info.Size(), LastModified: info.ModTime()})
		return nil
	})
	if err != nil {
		return b.fail("list", prefix, err)
	}
	slices.SortFunc(infos, func(x, y ObjectInfo) int { return strings.Compare(x.Key, y.Key) })
	for _, info := range infos {
		if err := fn(info); err != nil {
			return err
		}
	}
	return nil
}

// Delete implements Bucket; it also removes the parent directories it leaves
// empty, so that the key's path can hold an object again.
func (b *LocalDir) Delete(ctx context.Context, key string) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return b.fail("delete", key, err)
	}
	p := objectPath(key)
	info, err := b.root.Lstat(p)
	if err != nil {
		if err = b.fail("delete", key, err); IsNotExist(err) {
			return nil
		}
		return err
	}
	if info.IsDir() {
		return nil // a folder of other keys: not an object
	}
	if err := b.root.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return b.fail("delete", key, err)
	}
	dir := path.Dir(p)
	if err := b.syncDir(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return b.fail("delete", key, err)
	}
	for ; dir != localObjects; dir = path.Dir(dir) {
		if b.root.Remove(dir) != nil {
			break // not empty (or gone): stop
		}
	}
	return nil
}

// Close implements Bucket. Bodies already returned stay readable.
func (b *LocalDir) Close() error { return b.root.Close() }

// fail wraps err with the operation, the key and the sentinel it is classified
// as, if any. This is the one place LocalDir's errors are classified.
func (b *LocalDir) fail(op, key string, err error) error {
	var sentinel error
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, os.ErrClosed), errors.Is(err, fs.ErrPermission):
	case errors.Is(err, context.DeadlineExceeded):
		sentinel = ErrUnavailable
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR) && op != "put":
		// ENOTDIR: a parent of the key is an object, so the key is none.
		sentinel = ErrNotExist
	case errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.EISDIR), errors.Is(err, fs.ErrExist),
		errors.Is(err, syscall.ENOTEMPTY):
		// Put of a key whose parent is an object, or which is a folder of objects.
		sentinel = ErrInvalidKey
	default:
		sentinel = ErrUnavailable // an I/O error, a full disk
	}
	if sentinel != nil {
		return fmt.Errorf("tier: local %s %q: %w: %w", op, key, sentinel, err)
	}
	return fmt.Errorf("tier: local %s %q: %w", op, key, err)
}
