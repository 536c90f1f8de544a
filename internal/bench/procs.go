package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/supervise"
	"github.com/krabka/krole/processor"
	"github.com/krabka/krole/view"
)

// Wait bounds every wait of a bench beyond its lease.
const Wait = 30 * time.Second

// Cluster is where a bench runs: where its members connect and how to
// start them, the bench's own view and transports, and where its status
// goes.
type Cluster struct {
	// Exe is the krole binary: its `krole run` is a member of the one-role
	// benches, its `bench member` ([RunMember]) one of the many-roles ones.
	Exe string
	// Env is added to each member's environment.
	Env []string
	// Brokers, Topic, TxnPrefix: the members' cluster flags.
	Brokers, Topic, TxnPrefix string
	// Pipeline is the members' --pipeline flag ("" for auto).
	Pipeline string
	// Embedded: the cluster runs in this process (its CPU is this
	// process's).
	Embedded bool
	// Progress, when set, is called with a one-line status.
	Progress func(format string, args ...any)
	// Log, when set, receives what a run writes for the person running
	// it besides its status (stderr): the end of the status line, and
	// notes on a round.
	Log io.Writer
	// View is the bench's own view of the topic, caught up: the observer
	// that says when a role is held, and acquire's members' source.
	View *view.View
	// Connect opens a transport of this process's own (acquire's member,
	// steady's read of the topic) with clientID and, when positive, the
	// transaction timeout txnTimeout; its error says what to do about it.
	Connect func(clientID string, txnTimeout time.Duration) (*fencing.BrokerTransport, error)
}

func (c Cluster) progress(format string, args ...any) {
	if c.Progress != nil {
		c.Progress(format, args...)
	}
}

// logf writes to c.Log, when set.
func (c Cluster) logf(format string, args ...any) {
	if c.Log != nil {
		fmt.Fprintf(c.Log, format, args...)
	}
}

// endProgress ends the status line.
func (c Cluster) endProgress() { c.logf("\n") }

// pipelineFlag is the members' --pipeline flag.
func (c Cluster) pipelineFlag() string {
	if c.Pipeline == "" {
		return "auto"
	}
	return c.Pipeline
}

// proc is one `krole bench member` process.
type proc struct {
	name  codec.MemberID
	child *supervise.Child
	in    io.WriteCloser
	lines chan Line
	// events keeps the elected and revoked lines (Events); the other
	// lines go to lines.
	mu      sync.Mutex
	events  []Line
	stderr  *tail
	readErr error
}

// memberSpec is what a member process runs.
type memberSpec struct {
	name       codec.MemberID
	prefix     string // roles prefix<from> ... prefix<from+count-1>
	from       int
	count      int
	own        int // the last own of them are its own (0: all)
	s          processor.Settings
	events     bool
	viewMemory bool
	cpuProfile string
}

// start starts a `krole bench member` process for spec.
func (c Cluster) start(spec memberSpec) (*proc, error) {
	args := []string{"bench", "member", "--brokers", c.Brokers, "--topic", c.Topic, "--txn-prefix", c.TxnPrefix, "--pipeline", c.pipelineFlag(),
		"--member", string(spec.name), "--role-prefix", spec.prefix, "--from", fmt.Sprint(spec.from),
		"--roles", fmt.Sprint(spec.count), "--own", fmt.Sprint(spec.own),
		"--lease-duration", spec.s.LeaseDuration.String(), "--heartbeat-interval", spec.s.HeartbeatInterval.String()}
	if spec.events {
		args = append(args, "--events")
	}
	if spec.viewMemory {
		args = append(args, "--view-memory")
	}
	if spec.cpuProfile != "" {
		args = append(args, "--cpuprofile", spec.cpuProfile)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		pr.Close()
		pw.Close()
		return nil, err
	}
	p := &proc{name: spec.name, in: inW, lines: make(chan Line, 16), stderr: &tail{}}
	child, err := supervise.Start(supervise.Spec{Path: c.Exe, Args: args, Env: c.Env, Stdout: pw, Stderr: p.stderr, Stdin: inR})
	pw.Close()
	inR.Close()
	if err != nil {
		pr.Close()
		inW.Close()
		return nil, fmt.Errorf("starting member %s: %w", spec.name, err)
	}
	p.child = child
	go func() {
		defer close(p.lines)
		defer pr.Close()
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<30)
		for sc.Scan() {
			var l Line
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				p.readErr = fmt.Errorf("member %s printed %q: %w", spec.name, sc.Text(), err)
				break
			}
			if l.Event == "elected" || l.Event == "revoked" {
				p.mu.Lock()
				p.events = append(p.events, l)
				p.mu.Unlock()
				continue
			}
			p.lines <- l
		}
	}()
	return p, nil
}

// next waits for p's next line that is not an event: of kind want.
func (p *proc) next(ctx context.Context, want string, timeout time.Duration) (Line, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case l, ok := <-p.lines:
		if !ok {
			<-p.child.Done()
			if p.readErr != nil {
				return Line{}, p.readErr
			}
			return Line{}, fmt.Errorf("%w: %s exited %s while the bench waited for %q: %s", errMemberExit, p.name,
				supervise.ExitText(p.child.ExitCode()), want, p.stderr.last())
		}
		if l.Event != want {
			return Line{}, fmt.Errorf("member %s: got %q while the bench waited for %q", p.name, l.Event, want)
		}
		return l, nil
	case <-ctx.Done():
		return Line{}, ctx.Err()
	case <-t.C:
		return Line{}, fmt.Errorf("waited %v for member %s's %q in vain", timeout, p.name, want)
	}
}

// send writes a command line to p.
func (p *proc) send(cmd string) error {
	_, err := io.WriteString(p.in, cmd+"\n")
	return err
}

// takeEvents returns the events p printed so far.
func (p *proc) takeEvents() []Line {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Line(nil), p.events...)
}

// leave closes p's commands (it leaves) and waits for it to exit, at most
// d; then it is stopped.
func (p *proc) leave(d time.Duration) {
	_ = p.in.Close()
	select {
	case <-p.child.Done():
	case <-time.After(d):
		_, _ = p.child.Stop(context.Background(), 5*time.Second)
	}
}

func (p *proc) kill() error {
	_ = p.in.Close()
	return syscall.Kill(p.child.Pid(), syscall.SIGKILL)
}

// SelfCPU is this process's user+system CPU seconds.
func SelfCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
