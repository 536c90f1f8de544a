//go:build !linux

package supervise

import (
	"errors"
	"syscall"
)

// treeKept: elsewhere the tree is the command's process group only (see
// the package doc).
const treeKept = false

// Without Linux's parent-death signal a child can outlive a krole killed
// with SIGKILL; the watchdog, when there is one, still stops its group.
func sysProcAttr(_ syscall.Signal, ownGroup bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: ownGroup}
}

// becomeSubreaper: no child subreaper here (FreeBSD's procctl
// PROC_REAP_ACQUIRE is not used).
func becomeSubreaper() error { return errors.ErrUnsupported }

// signalDescendants: no /proc here; the group is signalled by the caller.
func signalDescendants(root, skip int, sig syscall.Signal) {}

// groupLive reports whether process group pgid has a member (a zombie
// included: there is no /proc here to tell).
func groupLive(pgid int) bool { return syscall.Kill(-pgid, 0) != syscall.ESRCH }
