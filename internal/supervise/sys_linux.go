package supervise

import "syscall"

func sysProcAttr(deathSig syscall.Signal, ownGroup bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: ownGroup, Pdeathsig: deathSig}
}
