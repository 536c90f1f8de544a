// Package peerkit is what krole bench's peers share: the election benches
// of etcd (bench/), ZooKeeper (bench/zk) and a Kafka consumer group
// (bench/kgroup). It holds their command line, the rounds of each kind,
// the candidate processes and the result's output, in the format of krole
// bench (package github.com/krabka/krole/internal/chart). Each peer keeps
// what is its own: connecting to its system, campaigning, resigning and
// seeing who leads. It is a module of its own, with the standard library
// and krole's chart only, so that each peer's module brings just its own
// system's client.
//
// A peer's binary has four modes (see [Main]): failover, handover and
// acquire run a bench; candidate is one candidate process, which
// [Succession] starts as this same binary.
package peerkit

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/krabka/krole/internal/chart"
)

// WaitLimit bounds each wait for a system or a process to get somewhere.
const WaitLimit = 60 * time.Second

// Main runs command name by its first argument: failover, handover and
// acquire call drive with the kind and the other arguments; candidate
// calls candidate with them. Any other first argument, or none, prints
// "usage: <name> <usage>" and exits with status 2; an error is printed
// and exits with status 1.
func Main(name, usage string, drive func(kind string, args []string) error, candidate func(args []string) error) {
	if len(os.Args) < 2 {
		printUsage(name, usage)
	}
	var err error
	switch os.Args[1] {
	case "failover", "handover", "acquire":
		err = drive(os.Args[1], os.Args[2:])
	case "candidate":
		err = candidate(os.Args[2:])
	default:
		printUsage(name, usage)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
}

func printUsage(name, usage string) {
	fmt.Fprintln(os.Stderr, "usage: "+name+" "+usage)
	os.Exit(2)
}

// Flags are a bench's command line: the flags of every peer, here, and
// the peer's own, which it defines on the embedded FlagSet before Parse.
type Flags struct {
	*flag.FlagSet
	Kind        string // failover, handover or acquire
	Members     int
	Rounds      int
	TTL         time.Duration
	Output      string // table or json
	Label       string
	WithSession bool
	name        string
}

// NewFlags defines the common flags of command name's bench kind; ttl and
// withSession are the help of --ttl and --with-session, which say what
// they mean on the peer's system.
func NewFlags(name, kind, ttl, withSession string) *Flags {
	f := &Flags{FlagSet: flag.NewFlagSet(kind, flag.ContinueOnError), Kind: kind, name: name}
	f.IntVar(&f.Members, "members", 3, "candidate processes")
	f.IntVar(&f.Rounds, "rounds", 20, "rounds")
	f.DurationVar(&f.TTL, "ttl", 3*time.Second, ttl)
	f.StringVar(&f.Output, "o", "table", "table or json")
	f.StringVar(&f.Label, "label", "", "the run's label in charts")
	f.BoolVar(&f.WithSession, "with-session", false, withSession)
	return f
}

// Parse parses args, and exits with status 2 if they do not parse or are
// out of range: --members below 2, --rounds below 1, -o neither table nor
// json, or valid, the peer's own rules (of --ttl, say), false. rules, the
// message then, says what is allowed.
func (f *Flags) Parse(args []string, rules string, valid func() bool) {
	if err := f.FlagSet.Parse(args); err != nil {
		os.Exit(2)
	}
	if f.Members < 2 || f.Rounds < 1 || (f.Output != "table" && f.Output != "json") || !valid() {
		fmt.Fprintln(os.Stderr, f.name+": "+rules)
		os.Exit(2)
	}
}

// Settings starts a result's settings with the flags': ttl, rounds, and
// with_session (acquire) or members (failover, handover). The peer adds
// its own.
func (f *Flags) Settings() map[string]any {
	s := map[string]any{"ttl": f.TTL.String(), "rounds": f.Rounds}
	if f.Kind == "acquire" {
		s["with_session"] = f.WithSession
	} else {
		s["members"] = f.Members
	}
	return s
}

// Report writes the result of system's samples to stdout: a line of
// statistics, or with -o json krole bench's JSON object.
func (f *Flags) Report(system string, samples []float64, settings map[string]any) error {
	res := chart.Result{Kind: f.Kind, System: system, Label: f.Label, SamplesMS: samples, Settings: settings}
	res.Stats = chart.Summarize(res.SamplesMS)
	if f.Output == "json" {
		return json.NewEncoder(os.Stdout).Encode(res)
	}
	chart.WriteText(os.Stdout, res)
	return nil
}

// RunID names one run's keys, nodes, topics or groups, apart from any
// earlier run's on the same cluster.
func RunID() string { return fmt.Sprintf("%x", time.Now().UnixNano()&0xffffffffff) }

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "\r%-70s", fmt.Sprintf(format, args...))
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// Acquire runs rounds acquisitions: round(r) acquires round r's election
// and returns how long that took. It shows each on stderr, on one line.
func Acquire(ctx context.Context, rounds int, round func(r int) (time.Duration, error)) ([]float64, error) {
	defer fmt.Fprintln(os.Stderr) // ends the progress line
	var samples []float64
	for r := range rounds {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		d, err := round(r)
		if err != nil {
			return nil, err
		}
		samples = append(samples, ms(d))
		progress("acquire round %d/%d: %.2f ms", r+1, rounds, samples[r])
	}
	return samples, nil
}

// An Event is who leads, as the bench sees it: Name leads from At on, or
// (Leads false) no longer does.
type Event struct {
	Name  string
	Leads bool
	At    time.Time
}

// The lines a candidate prints on stdout for the bench, when the bench
// sees who leads through its candidates (Succession's Events nil).
const (
	LeaderLine   = "leader"   // it leads now
	FollowerLine = "follower" // it leads no more
)

// Succession runs the rounds of failover and handover. Members candidate
// processes campaign; each round signals the leader's process, SIGKILL
// (failover) or SIGTERM (handover: it resigns and exits), and times from
// the signal to the event that another leads. Then it starts the old
// leader again, at the back.
type Succession struct {
	Kind    string // failover or handover
	Members int
	Rounds  int
	// TTL is the lease: a SIGKILL falls at a random phase of TTL/3, the
	// interval of the keep-alives (pings, heartbeats) that keep it.
	TTL time.Duration
	// PhaseInHandover puts a SIGTERM at a random phase of TTL/3 too.
	PhaseInHandover bool
	// Args are the candidates' arguments: each runs as this binary's
	// candidate mode with Args, --name (cand-1, cand-2, ...) and --ttl
	// (see CandidateFlags).
	Args []string
	// Events, when set, are who leads as the bench observes it; else they
	// are the candidates' lines LeaderLine and FollowerLine, at the time
	// the bench reads them.
	Events <-chan Event
	// Holds says whether the election holds n candidates, settled, and
	// what it holds, for the error when it does not in time.
	Holds func(n int) (ok bool, have string, err error)
}

// Run runs the rounds and returns their samples, in milliseconds. It
// shows each round on stderr, on one line, and stops the candidates at
// the end.
func (s *Succession) Run(ctx context.Context) ([]float64, error) {
	defer fmt.Fprintln(os.Stderr) // ends the progress line
	p := &procs{args: append([]string{"--ttl", s.TTL.String()}, s.Args...), cmds: map[string]*exec.Cmd{}, exited: map[string]chan struct{}{}}
	events := s.Events
	if events == nil {
		p.lines = make(chan Event, 16)
		events = p.lines
	}
	defer p.stopAll()
	leader := ""
	await := func(ok func(string) bool) (time.Time, error) {
		if ok(leader) {
			return time.Now(), nil
		}
		t := time.NewTimer(s.TTL + WaitLimit)
		defer t.Stop()
		for {
			select {
			case e, open := <-events:
				if !open {
					return time.Time{}, errors.New("the observer stopped")
				}
				switch {
				case e.Leads:
					leader = e.Name
				case e.Name == leader:
					leader = ""
				}
				if ok(leader) {
					return e.At, nil
				}
			case <-t.C:
				return time.Time{}, errors.New("no new leader in time")
			case <-ctx.Done():
				return time.Time{}, ctx.Err()
			}
		}
	}
	n := s.Members
	for i := range n {
		if err := p.start(fmt.Sprintf("cand-%d", i+1)); err != nil {
			return nil, err
		}
		if err := s.settle(ctx, p, i+1); err != nil {
			return nil, err
		}
	}
	var samples []float64
	for r := range s.Rounds {
		if _, err := await(func(l string) bool { return p.cmds[l] != nil }); err != nil {
			return nil, err
		}
		sig := syscall.SIGTERM
		if s.Kind == "failover" {
			sig = syscall.SIGKILL
		}
		if sig == syscall.SIGKILL || s.PhaseInHandover {
			time.Sleep(rand.N(s.TTL / 3))
		}
		old := leader
		cmd := p.cmds[old]
		t0 := time.Now()
		if err := cmd.Process.Signal(sig); err != nil {
			return nil, err
		}
		at, err := await(func(l string) bool { return l != old && l != "" })
		if err != nil {
			return nil, err
		}
		samples = append(samples, ms(at.Sub(t0)))
		progress("%s round %d/%d: %.2f ms", s.Kind, r+1, s.Rounds, samples[r])
		<-p.exited[old]
		delete(p.cmds, old)
		// The old leader is out of the election (it resigned, or its
		// lease ran out): start it again, at the back.
		if err := s.settle(ctx, p, n-1); err != nil {
			return nil, err
		}
		if err := p.start(old); err != nil {
			return nil, err
		}
		if err := s.settle(ctx, p, n); err != nil {
			return nil, err
		}
	}
	return samples, nil
}

// settle waits until the election holds n candidates. A candidate that
// exits unasked fails it.
func (s *Succession) settle(ctx context.Context, p *procs, n int) error {
	deadline := time.Now().Add(s.TTL + WaitLimit)
	for {
		for name, done := range p.exited {
			select {
			case <-done:
				if p.cmds[name] != nil {
					return fmt.Errorf("candidate %s exited", name)
				}
			default:
			}
		}
		ok, have, err := s.Holds(n)
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("waited for %d candidates, have %s", n, have)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// procs are the candidate processes of a run.
type procs struct {
	args   []string
	lines  chan Event // nil: their stdout is not read
	cmds   map[string]*exec.Cmd
	exited map[string]chan struct{}
}

// start runs candidate name as a process of this binary, which dies with
// this one.
func (p *procs) start(name string) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(exe, append([]string{"candidate", "--name", name}, p.args...)...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var out *bufio.Scanner
	if p.lines != nil {
		pipe, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		out = bufio.NewScanner(pipe)
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() {
		for out != nil && out.Scan() {
			switch out.Text() {
			case LeaderLine:
				p.lines <- Event{name, true, time.Now()}
			case FollowerLine:
				p.lines <- Event{name, false, time.Now()}
			}
		}
		_ = cmd.Wait()
		close(done)
	}()
	p.cmds[name] = cmd
	p.exited[name] = done
	return nil
}

// stopAll sends each candidate SIGTERM, and SIGKILL if it has not exited
// within 5 seconds.
func (p *procs) stopAll() {
	for name, cmd := range p.cmds {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited[name]:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
		}
	}
}

// CandidateFlags are a candidate's command line: --name and --ttl, as
// Succession passes them, and the peer's own, which it defines on the
// embedded FlagSet before Parse.
type CandidateFlags struct {
	*flag.FlagSet
	Name string
	TTL  time.Duration
}

func NewCandidateFlags() *CandidateFlags {
	c := &CandidateFlags{FlagSet: flag.NewFlagSet("candidate", flag.ContinueOnError)}
	c.StringVar(&c.Name, "name", "", "")
	c.DurationVar(&c.TTL, "ttl", 3*time.Second, "")
	return c
}

// Parse parses args, and exits with status 2 if they do not parse. It
// returns a channel that receives SIGTERM and SIGINT, from then on: the
// bench's request to resign (or withdraw) and exit.
func (c *CandidateFlags) Parse(args []string) <-chan os.Signal {
	if err := c.FlagSet.Parse(args); err != nil {
		os.Exit(2)
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM, os.Interrupt)
	return term
}
