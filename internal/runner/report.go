package runner

import (
	"encoding/json"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// ReportFDEnv names a file descriptor, inherited from the process that
// started `krole run`, to which it writes one JSON object per line for
// each CMD it starts (see [Report]). `krole demo` passes a pipe there
// to learn the pids of the members' CMDs as data, rather than from the
// text of their lines. It is an interface between two processes of one
// krole build, not documented for users.
const ReportFDEnv = "KROLE_RUN_REPORT_FD"

// Report is a line written to [ReportFDEnv]'s descriptor.
type Report struct {
	Event string `json:"event"` // "cmd_started"
	Pid   int    `json:"pid"`   // CMD's pid
	Token string `json:"token"` // the token CMD runs under, "producerID/epoch"
}

// OpenReport returns the writer of [ReportFDEnv], or nil when it is not
// set or does not name an inherited pipe. It unsets the variable, so that
// CMD does not inherit it, and marks the descriptor close-on-exec, so that
// neither CMD nor the watchdog inherits the pipe: its reader sees the end
// of the stream when krole run exits.
func OpenReport() *os.File {
	s, ok := os.LookupEnv(ReportFDEnv)
	if !ok {
		return nil
	}
	_ = os.Unsetenv(ReportFDEnv)
	fd, err := strconv.Atoi(s)
	if err != nil || fd < 3 {
		return nil
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFIFO {
		return nil // not open, or not a pipe: not one the starter passed
	}
	syscall.CloseOnExec(fd)
	return os.NewFile(uintptr(fd), "krole-run-report")
}

// ReadReports reads the reports of a `krole run` from r until its end,
// and passes on the pid of each CMD started.
func ReadReports(r io.Reader, cmdStarted func(pid int)) {
	dec := json.NewDecoder(r)
	for {
		var rep Report
		if err := dec.Decode(&rep); err != nil {
			return // io.EOF: the member exited
		}
		if rep.Event == "cmd_started" {
			cmdStarted(rep.Pid)
		}
	}
}

// ClearedEnv empties the KROLE_ variables of this process's environment,
// for the `krole run` members that the demo and the benches start: those
// name their own cluster, without TLS or SASL, and their own timings. (An
// empty variable counts as unset.)
func ClearedEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "KROLE_") {
			env = append(env, k+"=")
		}
	}
	return env
}
