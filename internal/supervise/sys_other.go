//go:build !linux

package supervise

import "syscall"

// Without Linux's parent-death signal a child can outlive a krole killed
// with SIGKILL; Stop still reaches its whole process group.
func sysProcAttr(_ syscall.Signal, ownGroup bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: ownGroup}
}
