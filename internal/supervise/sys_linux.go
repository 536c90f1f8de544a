package supervise

import (
	"bytes"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// treeKept: on Linux the watchdog keeps the whole tree (see the package
// doc).
const treeKept = true

func sysProcAttr(deathSig syscall.Signal, ownGroup bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: ownGroup, Pdeathsig: deathSig}
}

// becomeSubreaper makes this process a child subreaper: orphans among its
// descendants are reparented to it.
func becomeSubreaper() error {
	return unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
}

// procStat is what /proc/PID/stat says of a process.
type procStat struct {
	pid, ppid, pgid int
	zombie          bool
}

// readStat reads /proc/PID/stat. A stop reads every process's while the
// tree is dying, on the same cores: one open, read and close each costs
// about half of what os.ReadFile's calls do.
func readStat(pid int) (procStat, bool) {
	var buf [1024]byte // the fields read come first; a longer line is cut
	b, ok := readSmall("/proc/"+strconv.Itoa(pid)+"/stat", buf[:])
	if !ok {
		return procStat{}, false
	}
	// "pid (comm) state ppid pgrp ...": comm may hold spaces and
	// parentheses, so the fields start after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 3 {
		return procStat{}, false
	}
	ppid, err1 := strconv.Atoi(string(f[1]))
	pgid, err2 := strconv.Atoi(string(f[2]))
	if err1 != nil || err2 != nil {
		return procStat{}, false
	}
	return procStat{pid: pid, ppid: ppid, pgid: pgid, zombie: string(f[0]) == "Z"}, true
}

// readSmall reads the start of file path into buf with one read, and
// returns what it read.
func readSmall(path string, buf []byte) ([]byte, bool) {
	fd, err := retryEINTR(func() (int, error) { return syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0) })
	if err != nil {
		return nil, false
	}
	defer syscall.Close(fd)
	n, err := retryEINTR(func() (int, error) { return syscall.Read(fd, buf) })
	if err != nil || n <= 0 {
		return nil, false
	}
	return buf[:n], true
}

// retryEINTR calls call again while it is interrupted by a signal.
func retryEINTR(call func() (int, error)) (int, error) {
	for {
		n, err := call()
		if err != syscall.EINTR {
			return n, err
		}
	}
}

// allProcs reads /proc/PID/stat of every process.
func allProcs() []procStat {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	var out []procStat
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		if st, ok := readStat(pid); ok {
			out = append(out, st)
		}
	}
	return out
}

// groupLive reports whether process group pgid has a member that is not a
// zombie: a zombie has exited (its parent has yet to reap it, and the one
// it was reparented to may be slow to).
func groupLive(pgid int) bool {
	if syscall.Kill(-pgid, 0) == syscall.ESRCH {
		return false
	}
	for _, p := range allProcs() {
		if p.pgid == pgid && !p.zombie {
			return true
		}
	}
	return false
}

// descendants returns every descendant of root that /proc shows, by their
// parent pid chains, and the set of their pids with root's.
func descendants(root int) ([]procStat, map[int]bool) {
	in := map[int]bool{root: true}
	children := make(map[int][]procStat)
	for _, st := range allProcs() {
		children[st.ppid] = append(children[st.ppid], st)
	}
	var out []procStat
	queue := []int{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			if !in[c.pid] {
				in[c.pid] = true
				out = append(out, c)
				queue = append(queue, c.pid)
			}
		}
	}
	return out, in
}

// signalDescendants sends sig to every descendant of root outside process
// group skip, when not 0 (the caller signals it as a whole). Each process is
// signalled through a pidfd opened before its parent is checked again, so
// a pid that was reused meanwhile by a process outside the tree is never
// signalled.
func signalDescendants(root, skip int, sig syscall.Signal) {
	procs, in := descendants(root)
	for _, p := range procs {
		if skip != 0 && p.pgid == skip && sig != syscall.SIGKILL {
			continue
		}
		fd, err := unix.PidfdOpen(p.pid, 0)
		if err != nil {
			if err == unix.ENOSYS { // before Linux 5.3
				_ = syscall.Kill(p.pid, sig)
			}
			continue
		}
		if st, ok := readStat(p.pid); ok && in[st.ppid] {
			_ = unix.PidfdSendSignal(fd, sig, nil, 0)
		}
		unix.Close(fd)
	}
}
