//go:build !linux

package broker

import "errors"

// statfsFree is not measured off Linux: the free-space watermark is off.
func statfsFree(string) (free, total uint64, err error) {
	return 0, 0, errors.New("free space is measured on Linux only")
}
