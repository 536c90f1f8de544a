package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"time"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/ctxcall"
	"github.com/krabka/krole/processor"
	"github.com/krabka/krole/view"
)

// MemberOptions are what one bench member process runs ([RunMember]).
type MemberOptions struct {
	// Config names the cluster; ClientID and TxnTimeout are set here.
	Config fencing.Config
	// Member is the member's id.
	Member codec.MemberID
	// Roles are the roles it campaigns for; the last Own of them are its
	// own: it reports steady once it holds those. Own 0: all of them.
	// (failover-many: a member is a candidate of earlier members' roles,
	// which they hold, and owns the roles nobody held before it.)
	Roles []codec.Role
	Own   int
	// Settings are the member's timings.
	Settings processor.Settings
	// Events: print an "elected" and a "revoked" line for each event.
	Events bool
	// ViewMemory: after the window, start a second view of the topic in
	// this process, and report its heap per role (view_bytes_per_role).
	ViewMemory bool
	// CPUProfile, when set, is where a pprof CPU profile of the window
	// goes, and a heap profile at its end into CPUProfile + ".heap".
	CPUProfile string
	// In carries the bench's commands, one a line: "window D" measures
	// for D and reports; the end of In (or "leave") makes the member
	// leave (it releases what it holds) and RunMember return.
	In io.Reader
	// Out receives the member's lines (JSON, one object a line).
	Out io.Writer
	// Profile starts a CPU profile into a file until the returned func
	// is called ([StartCPUProfile]; nil: none).
	Profile func(path string) (func(), error)
}

// Line is one line a bench member prints: an event, or the report.
type Line struct {
	// Event is "steady" (its own roles are held, or the count held
	// stopped growing: the bench may start a window), "elected" and
	// "revoked" (with Events), or "report" (a window's figures).
	Event string `json:"event"`
	// Role, AtUS, Reason: of an elected or revoked event; AtUS is the
	// member's Unix time in µs when its OnEvent ran.
	Role   codec.Role `json:"role,omitempty"`
	AtUS   int64      `json:"at_us,omitempty"`
	Reason string     `json:"reason,omitempty"`
	// Held: roles held when the line was written (steady, report).
	Held int `json:"held,omitempty"`
	// ElectedS (steady): from the start of the campaign to steady.
	ElectedS float64 `json:"elected_s,omitempty"`
	*MemberReport
}

// MemberReport is one member's figures over one window.
type MemberReport struct {
	// RenewMS: each renewal's latency (ms), a renewal being one
	// heartbeat round of the member session (see [RenewalSampler]):
	// from the round's start (the heartbeat's GrantedAt, before the
	// round's DescribeMany over the held roles) to the heartbeat's
	// answer; WriteMS the heartbeat's write alone (from the transport's
	// call).
	RenewMS []float64 `json:"renew_ms,omitempty"`
	WriteMS []float64 `json:"write_ms,omitempty"`
	// Missed counts the holdings that ended unasked in the window, by
	// reason (MissedBy); Failed the heartbeats that failed.
	Missed   int            `json:"missed"`
	MissedBy map[string]int `json:"missed_by,omitempty"`
	Failed   int            `json:"failed_renewals"`
	WindowS  float64        `json:"window_s"`
	// CPUS: the member process's CPU (user+system) over the window.
	CPUS float64 `json:"cpu_s"`
	// Commits and Aborts: the EndTxn requests its transport sent in the
	// window (fencing.BrokerTransport.EndTxnsSent): every transaction
	// the member ended: heartbeats, lease writes, releases and session
	// ends.
	Commits uint64 `json:"commits"`
	Aborts  uint64 `json:"aborts"`
	// HeldAtStart and HeldAtEnd: roles held when the window began and
	// ended.
	HeldAtStart int `json:"held_at_start"`
	HeldAtEnd   int `json:"held_at_end"`
	// HeapBytes: the process's live heap after a GC at the end of the
	// window; BaseHeapBytes: the same before the member was made (its
	// view caught up, nothing registered). HeapBytes - BaseHeapBytes
	// over HeldAtEnd is the member's memory per held role, its view's
	// growth included.
	HeapBytes     uint64 `json:"heap_bytes"`
	BaseHeapBytes uint64 `json:"base_heap_bytes"`
	// StackBytes and BaseStackBytes: the goroutine stacks in use
	// (runtime.MemStats.StackInuse) at the same two moments.
	StackBytes     uint64 `json:"stack_bytes"`
	BaseStackBytes uint64 `json:"base_stack_bytes"`
	// ViewHeapBytes and ViewRoles (ViewMemory): the live heap a second
	// view of the topic added once caught up, and the roles it knows.
	ViewHeapBytes uint64 `json:"view_heap_bytes,omitempty"`
	ViewRoles     int    `json:"view_roles,omitempty"`
}

// RenewalSampler is the hook where a member's renewals are timed: a
// member renews all its roles with one member-session heartbeat per
// HeartbeatInterval (processor, "Member sessions"), so the renewal sampled is
// the heartbeat round, from its GrantedAt (the round's start, before its
// DescribeMany over the held roles' tokens) to the heartbeat's answer
// (timedTransport.Heartbeat); lease writes (challenges, releases, the
// rare rewrites) are not renewals. transactions_per_s counts every
// transaction, heartbeats included (fencing.BrokerTransport.EndTxnsSent).
type RenewalSampler interface {
	sample(began, writeStart time.Time, err error)
}

// timedTransport times the renewals that pass through it: the member
// session's heartbeats (session ends not counted). It is the member's
// [RenewalSampler].
type timedTransport struct {
	fencing.Transport
	mu        sync.Mutex
	recording bool
	samples   []float64 // from the renewal's start
	writes    []float64 // the write alone
	failed    int
}

var _ RenewalSampler = (*timedTransport)(nil)

func (t *timedTransport) Heartbeat(ctx context.Context, hb codec.Heartbeat) error {
	start := time.Now()
	err := t.Transport.Heartbeat(ctx, hb)
	if !hb.End {
		t.sample(time.UnixMilli(hb.GrantedAt), start, err)
	}
	return err
}

func (t *timedTransport) sample(began, writeStart time.Time, err error) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.recording {
		return
	}
	if err != nil {
		t.failed++
		return
	}
	t.samples = append(t.samples, float64(now.Sub(began).Microseconds())/1000)
	t.writes = append(t.writes, float64(now.Sub(writeStart).Microseconds())/1000)
}

// Plateau is how long the count a member holds must not grow before it
// reports steady without holding all its roles: five lease durations,
// and at least 30 s. A member whose challenge timed out pauses every
// campaign, RetryBackoff doubling with each consecutive timeout up to a
// lease duration (package processor, "Many roles"): a member still
// taking roles after a few such pauses is not taken for one that
// stopped.
func Plateau(s processor.Settings) time.Duration {
	return max(5*s.LeaseDuration, 30*time.Second)
}

// writeHeapProfile writes a pprof heap profile (live objects as of the
// last GC) into path.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// liveHeap is the live heap after a GC.
func liveHeap() uint64 {
	h, _ := liveMemory()
	return h
}

// liveMemory is the live heap after a GC, and the goroutine stacks in use
// (not heap).
func liveMemory() (heap, stacks uint64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc, ms.StackInuse
}

// RunMember runs one bench member: it holds o.Roles through its own view
// and transport, prints "steady" once it holds its own roles (or the count
// held has not grown for [Plateau], or after a bound), and then
// serves the bench's commands on o.In (see [MemberOptions]). ctx ending
// makes it leave as the end of In does.
func RunMember(ctx context.Context, o MemberOptions) error {
	cfg := o.Config
	s := o.Settings
	cfg.TxnTimeout = s.TransactionTimeout
	cfg.ClientID = "krole-" + string(o.Member)
	own := o.Roles
	if o.Own > 0 && o.Own < len(o.Roles) {
		own = o.Roles[len(o.Roles)-o.Own:]
	}
	ownSet := make(map[codec.Role]bool, len(own))
	for _, r := range own {
		ownSet[r] = true
	}
	bt, err := fencing.NewBrokerTransport(cfg)
	if err != nil {
		return err
	}
	defer bt.Close()
	// As election's member does: the view shares the transport's record of
	// the producer ids the member mints, so it does not verify the
	// member's own leases at the coordinator.
	v, err := view.New(view.Options{Config: cfg, Authors: bt.Authors()})
	if err != nil {
		return err
	}
	tt := &timedTransport{Transport: bt}
	out := &lineWriter{enc: json.NewEncoder(o.Out)}
	// Counts, not a set of the roles held: the Elected and Revoked of a
	// role alternate, Revoked never without Elected (processor, Event),
	// and state per role here would count in the member's per role.
	var (
		mu       sync.Mutex
		held     int
		ownHeld  int
		missed   int
		missedBy = map[string]int{}
		allHeld  = make(chan struct{})
	)
	vctx, stopView := context.WithCancel(context.WithoutCancel(ctx))
	vdone := make(chan struct{})
	go func() { defer close(vdone); _ = v.Run(vctx) }()
	defer func() { stopView(); <-vdone }()
	if err := v.WaitCaughtUp(ctx); err != nil {
		return err
	}
	// The base is taken before New, so that the member's state per role
	// (its runners) counts in the growth, as its view's does.
	base, baseStacks := liveMemory()
	m, err := processor.New(tt, v, o.Member, o.Roles, processor.Options{Settings: s, OnEvent: func(ev processor.Event) {
		at := time.Now().UnixMicro()
		mu.Lock()
		switch ev.Kind {
		case processor.Elected:
			held++
			if ownSet[ev.Role] {
				ownHeld++
			}
			if ownHeld == len(own) {
				select {
				case <-allHeld:
				default:
					close(allHeld)
				}
			}
		case processor.Revoked:
			held--
			if ownSet[ev.Role] {
				ownHeld--
			}
			if ev.Reason != processor.ReasonContextEnded && ev.Reason != processor.ReasonResigned {
				missed++
				missedBy[string(ev.Reason)]++
			}
		}
		mu.Unlock()
		if o.Events && (ev.Kind == processor.Elected || ev.Kind == processor.Revoked) {
			l := Line{Event: "elected", Role: ev.Role, AtUS: at}
			if ev.Kind == processor.Revoked {
				l.Event, l.Reason = "revoked", string(ev.Reason)
			}
			out.write(l)
		}
	}})
	if err != nil {
		return err
	}
	mctx, stopMember := context.WithCancel(ctx)
	mdone := make(chan error, 1)
	campaign := time.Now()
	go func() {
		// No work: a work callback's goroutine is the user's, not krole's
		// cost per role.
		mdone <- m.Run(mctx, nil)
	}()
	defer func() { stopMember(); <-mdone }()
	heldNow := func() int {
		mu.Lock()
		defer mu.Unlock()
		return held
	}
	// Its own roles held, or a plateau (a member whose campaigns are
	// paused after challenge timeouts keeps the rest queued), or the
	// bound.
	bound := time.After(s.LeaseDuration + 10*Wait)
	tick := time.NewTicker(time.Second)
	most, grew := 0, time.Now()
wait:
	for {
		select {
		case <-allHeld:
			break wait
		case <-ctx.Done():
			tick.Stop()
			return nil
		case err := <-mdone:
			mdone <- err
			tick.Stop()
			return fmt.Errorf("the member stopped before it held its roles: %v", err)
		case <-bound:
			break wait
		case <-tick.C:
			if n := heldNow(); n > most {
				most, grew = n, time.Now()
			} else if time.Since(grew) > Plateau(s) {
				break wait
			}
		}
	}
	tick.Stop()
	out.write(Line{Event: "steady", Held: heldNow(), ElectedS: time.Since(campaign).Seconds()})
	cmds := make(chan string)
	go func() {
		defer close(cmds)
		sc := bufio.NewScanner(o.In)
		for sc.Scan() {
			cmds <- strings.TrimSpace(sc.Text())
		}
	}()
	for {
		var cmd string
		select {
		case <-ctx.Done():
			return nil
		case err := <-mdone:
			mdone <- err
			return fmt.Errorf("the member stopped: %v", err)
		case c, ok := <-cmds:
			if !ok {
				return nil
			}
			cmd = c
		}
		verb, arg, _ := strings.Cut(cmd, " ")
		switch verb {
		case "leave":
			return nil
		case "window":
			d, err := time.ParseDuration(arg)
			if err != nil || d <= 0 {
				return fmt.Errorf("bench member: bad command %q", cmd)
			}
			rep, err := window(ctx, o, cfg, tt, bt, d, base, baseStacks, func() (int, int, map[string]int) {
				mu.Lock()
				defer mu.Unlock()
				n, mi, by := held, missed, missedBy
				missed, missedBy = 0, map[string]int{}
				return n, mi, by
			})
			if err != nil {
				return err
			}
			out.write(Line{Event: "report", Held: rep.HeldAtEnd, MemberReport: rep})
		default:
			return fmt.Errorf("bench member: unknown command %q", cmd)
		}
	}
}

// window measures one window of d: renewals, transactions, CPU, memory.
// take returns the roles held and the losses since its last call (and
// forgets those).
func window(ctx context.Context, o MemberOptions, cfg fencing.Config, tt *timedTransport, bt *fencing.BrokerTransport,
	d time.Duration, base, baseStacks uint64, take func() (int, int, map[string]int)) (*MemberReport, error) {
	heldAtStart, _, _ := take()
	tt.mu.Lock()
	tt.recording, tt.samples, tt.writes, tt.failed = true, nil, nil, 0
	tt.mu.Unlock()
	var stopProfile func()
	if o.CPUProfile != "" && o.Profile != nil {
		stop, err := o.Profile(o.CPUProfile)
		if err != nil {
			return nil, err
		}
		stopProfile = stop
	}
	c0, a0 := bt.EndTxnsSent()
	cpu0, t0 := SelfCPU(), time.Now()
	_ = ctxcall.Sleep(ctx, d)
	cpu1, win := SelfCPU(), time.Since(t0)
	c1, a1 := bt.EndTxnsSent()
	if stopProfile != nil {
		stopProfile()
	}
	tt.mu.Lock()
	tt.recording = false
	rep := &MemberReport{RenewMS: tt.samples, WriteMS: tt.writes, Failed: tt.failed, WindowS: win.Seconds(),
		CPUS: cpu1 - cpu0, Commits: c1 - c0, Aborts: a1 - a0, HeldAtStart: heldAtStart}
	tt.mu.Unlock()
	rep.HeldAtEnd, rep.Missed, rep.MissedBy = take()
	rep.HeapBytes, rep.StackBytes = liveMemory()
	if o.CPUProfile != "" {
		if err := writeHeapProfile(o.CPUProfile + ".heap"); err != nil {
			return nil, err
		}
	}
	rep.BaseHeapBytes, rep.BaseStackBytes = base, baseStacks
	if o.ViewMemory {
		b, n, err := viewHeap(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("measuring a view's memory: %w", err)
		}
		rep.ViewHeapBytes, rep.ViewRoles = b, n
	}
	return rep, nil
}

// viewHeap starts a second view of the topic, waits for it to catch up,
// and returns the live heap it added and the roles it knows.
func viewHeap(ctx context.Context, cfg fencing.Config) (uint64, int, error) {
	cfg.ClientID += "-viewmem"
	before := liveHeap()
	v, err := view.New(view.Options{Config: cfg})
	if err != nil {
		return 0, 0, err
	}
	vctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() { defer close(done); _ = v.Run(vctx) }()
	defer func() { stop(); <-done }()
	if err := v.WaitCaughtUp(ctx); err != nil {
		return 0, 0, err
	}
	roles, err := v.Roles(ctx)
	if err != nil {
		return 0, 0, err
	}
	after := liveHeap()
	runtime.KeepAlive(v)
	if after < before {
		return 0, len(roles), nil
	}
	return after - before, len(roles), nil
}

// lineWriter writes Lines, one at a time.
type lineWriter struct {
	mu  sync.Mutex
	enc *json.Encoder
	err error
}

func (w *lineWriter) write(l Line) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		w.err = w.enc.Encode(l)
	}
}

// errMemberExit is the error of a member process that exited unasked.
var errMemberExit = errors.New("a bench member exited unasked")
