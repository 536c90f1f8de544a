package supervise

import (
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

// WatchdogCommand is the first argument that makes a krole binary act as
// the watchdog (see [Spec].Watchdog). It is not a user-facing command.
const WatchdogCommand = "__krole_watchdog"

// DeathSignal is the watchdog's parent-death signal (Linux only; see
// [Watchdog]).
const DeathSignal = syscall.SIGWINCH

// Watchdog is the body of the watchdog process.
//
// Linux's parent-death signal reaches only the process it was set on, so
// the command dies with a krole killed by SIGKILL, but its own children (a
// shell script's commands, say) would not. The watchdog closes that gap. It
// runs beside the command, outside its process group, with a parent-death
// signal it can catch (SIGWINCH: ignored by default, so one that arrives
// before the handler is installed cannot kill the watchdog, and the check
// of the parent after installing it sees the death); when krole dies, it
// sends SIGTERM to the
// command's whole process group, then SIGKILL after the grace period, and
// exits. While krole lives, krole ends the watchdog itself once the command
// has exited.
//
// Its arguments: the parent's pid, the process group, the grace period
// (as time.ParseDuration reads it). It blocks until the parent has died,
// then until the group is gone or the grace period has passed. It returns
// the process exit code: 0, or 2 for bad arguments.
func Watchdog(args []string) int {
	if len(args) != 3 {
		return 2
	}
	parent, err1 := strconv.Atoi(args[0])
	group, err2 := strconv.Atoi(args[1])
	grace, err3 := time.ParseDuration(args[2])
	if err1 != nil || err2 != nil || err3 != nil || group <= 1 {
		return 2
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, DeathSignal, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	// A signal while the parent lives (a terminal's SIGWINCH or Ctrl-C
	// reaches krole's whole process group) changes nothing: krole ends the
	// watchdog with SIGKILL once the command has exited. The loop also
	// covers a parent that died before the death signal was armed.
	for os.Getppid() == parent {
		<-sigs
	}
	_ = syscall.Kill(-group, syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if syscall.Kill(-group, 0) != nil {
			return 0 // the group is gone
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = syscall.Kill(-group, syscall.SIGKILL)
	return 0
}
