package bench

import "syscall"

// childProcAttr kills a cluster process when the bench process dies
// without stopping it (SIGKILL, a crash).
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
