package commitlog

import (
	"errors"
	"os"
	"path"
	"strconv"
	"strings"
)

// Small per-partition files, each replaced atomically (write a temp file,
// fsync it, rename it over the old one, fsync the directory):
//
//	high-watermark           the HW as a decimal number and a newline
//	leader-epoch-checkpoint  "0\n" (format version), the entry count, then one
//	                         "epoch startOffset" line per leader epoch
//	.clean-shutdown          empty; present only between a clean Close and the next Open
const (
	hwFile          = "high-watermark"
	epochFile       = "leader-epoch-checkpoint"
	cleanMarkerFile = ".clean-shutdown"
	tmpSuffix       = ".tmp"
)

// WriteFileAtomic replaces dir/name with data so that a crash leaves either the
// old or the new content, never a mix.
func WriteFileAtomic(fsys FS, dir, name string, data []byte) error {
	tmp := path.Join(dir, name+tmpSuffix)
	f, err := fsys.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(data, 0)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := fsys.Rename(tmp, path.Join(dir, name)); err != nil {
		return err
	}
	return fsys.SyncDir(dir)
}

// ReadFile returns the content of dir/name; exists is false when it is missing.
func ReadFile(fsys FS, dir, name string) (data []byte, exists bool, err error) {
	f, err := fsys.OpenFile(path.Join(dir, name), os.O_RDONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	defer func() { _ = f.Close() }() // opened read-only
	b, err := readWhole(f)
	return b, true, err
}

func readInt64File(fsys FS, dir, name string) (int64, bool, error) {
	b, ok, err := ReadFile(fsys, dir, name)
	if err != nil || !ok {
		return 0, false, err
	}
	n, perr := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if perr != nil {
		return 0, false, nil // a torn checkpoint is as good as none
	}
	return n, true, nil
}

func writeInt64File(fsys FS, dir, name string, n int64) error {
	return WriteFileAtomic(fsys, dir, name, []byte(strconv.FormatInt(n, 10)+"\n"))
}
