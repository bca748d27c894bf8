//go:build !linux

package bench

import "syscall"

// childProcAttr is nil where the kernel cannot end a child with its parent.
func childProcAttr() *syscall.SysProcAttr { return nil }
