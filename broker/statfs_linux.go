package broker

import "syscall"

// statfsFree is the free space (for unprivileged writers) and the size of
// the filesystem holding dir.
func statfsFree(dir string) (free, total uint64, err error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, 0, err
	}
	bs := uint64(st.Bsize) //nolint:gosec // a block size is positive
	return st.Bavail * bs, st.Blocks * bs, nil
}
