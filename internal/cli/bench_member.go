package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/chart"
	"github.com/krabka/krole/internal/supervise"
	"github.com/krabka/krole/processor"
	"github.com/krabka/krole/rolestate"
	"github.com/krabka/krole/view"
)

// runBenchAcquire runs `krole bench acquire`: each round, a fresh member
// (a processor.Member in this process, on the bench's view and on one
// transport connected before the first round, as an etcd client is)
// campaigns for a fresh role nobody else wants; the sample runs from the
// member's Run (it registers, then campaigns) to its Elected event (its
// lease write committed). The phases say where the time went.
func runBenchAcquire(c *ucli.Context) error {
	if err := noArgs(c); err != nil {
		return err
	}
	rounds, err := positive(c, "rounds")
	if err != nil {
		return err
	}
	s, err := benchSettings(c)
	if err != nil {
		return err
	}
	e, err := startBenchEnv(c)
	if err != nil {
		return err
	}
	defer e.close()
	cfg := e.cfg
	cfg.TxnTimeout = s.TransactionTimeout
	cfg.ClientID = "krole-bench-acquire"
	bt, err := fencing.NewBrokerTransport(cfg)
	if err != nil {
		return explainRunError(cfg, err)
	}
	defer bt.Close()
	var samples []float64
	phases := map[string][]float64{}
	for r := range rounds {
		d, ph, err := acquireOnce(c.Context, e, bt, s, r)
		if err != nil {
			return err
		}
		samples = append(samples, float64(d.Microseconds())/1000)
		for k, v := range ph {
			phases[k] = append(phases[k], v)
		}
		e.progress("acquire round %d/%d: %.2f ms", r+1, rounds, samples[len(samples)-1])
	}
	fmt.Fprintln(e.errOut)
	res := chart.Result{Kind: "acquire", System: "krole", Label: c.String("label"), SamplesMS: samples, Settings: map[string]any{
		"rounds": rounds, "lease_duration": s.LeaseDuration.String(), "renew_interval": s.RenewInterval.String(),
		"cluster": e.clusterName(), "member": "processor.Member in the bench process, on the bench's view and one transport",
	}, Phases: map[string]*chart.Dist{}}
	for k, v := range phases {
		res.Phases[k] = chart.NewDist(v)
	}
	res.Stats = chart.Summarize(res.SamplesMS)
	return writeBench(c, res)
}

// traceSource is a processor.Source that times Confirm and notes when the
// member's registration first shows.
type traceSource struct {
	processor.Source
	me codec.MemberID
	tr *tracer
}

func (s *traceSource) Confirm(ctx context.Context, role codec.Role) (rolestate.Confirmed, error) {
	start := time.Now()
	c, err := s.Source.Confirm(ctx, role)
	s.tr.add("confirm", time.Since(start))
	return c, err
}

func (s *traceSource) Follow(ctx context.Context, role codec.Role) <-chan rolestate.State {
	in := s.Source.Follow(ctx, role)
	out := make(chan rolestate.State)
	go func() {
		defer close(out)
		for st := range in {
			if st.Rank(s.me) >= 0 {
				s.tr.mark("registration_shows")
			}
			select {
			case out <- st:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// tracer sums the time of each step of one acquisition.
type tracer struct {
	mu    sync.Mutex
	start time.Time
	sums  map[string]time.Duration
	marks map[string]time.Time
}

func (t *tracer) add(step string, d time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sums[step] += d
}

func (t *tracer) mark(what string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.marks[what]; !ok {
		t.marks[what] = time.Now()
	}
}

// traceTransport times the transport's calls into a tracer.
type traceTransport struct {
	fencing.Transport
	tr *tracer
}

func (t *traceTransport) Register(ctx context.Context, role codec.Role, m codec.MemberID) (int64, error) {
	start := time.Now()
	off, err := t.Transport.Register(ctx, role, m)
	t.tr.add("register", time.Since(start))
	t.tr.mark("registered")
	return off, err
}

func (t *traceTransport) AcquireEpoch(ctx context.Context, role codec.Role) (codec.Token, error) {
	start := time.Now()
	tok, err := t.Transport.AcquireEpoch(ctx, role)
	t.tr.add("acquire_epoch", time.Since(start))
	return tok, err
}

func (t *traceTransport) WriteLease(ctx context.Context, role codec.Role, tok codec.Token, l codec.Lease) error {
	start := time.Now()
	err := t.Transport.WriteLease(ctx, role, tok, l)
	t.tr.add("write_lease", time.Since(start))
	return err
}

func acquireOnce(ctx context.Context, e *benchEnv, bt *fencing.BrokerTransport, s processor.Settings, r int) (time.Duration, map[string]float64, error) {
	role := codec.Role(fmt.Sprintf("bench-acquire-%s-%d", e.run, r))
	me := codec.MemberID(fmt.Sprintf("bench-acquirer-%s-%d", e.run, r))
	tr := &tracer{sums: map[string]time.Duration{}, marks: map[string]time.Time{}}
	elected := make(chan time.Time, 1)
	m, err := processor.New(&traceTransport{Transport: bt, tr: tr}, &traceSource{Source: e.view, me: me, tr: tr}, me, []codec.Role{role},
		processor.Options{Settings: s, OnEvent: func(ev processor.Event) {
			if ev.Kind == processor.Elected {
				select {
				case elected <- time.Now():
				default:
				}
			}
		}})
	if err != nil {
		return 0, nil, err
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	tr.start = time.Now()
	go func() {
		done <- m.Run(rctx, func(ctx context.Context, _ processor.Held) error { <-ctx.Done(); return nil })
	}()
	defer func() { cancel(); <-done }()
	select {
	case at := <-elected:
		tr.mu.Lock()
		defer tr.mu.Unlock()
		total := at.Sub(tr.start)
		ph := map[string]float64{}
		var known time.Duration
		for k, d := range tr.sums {
			ph[k] = float64(d.Microseconds()) / 1000
			known += d
		}
		if reg, ok := tr.marks["registered"]; ok {
			if shows, ok := tr.marks["registration_shows"]; ok && shows.After(reg) {
				d := shows.Sub(reg)
				ph["registration_to_view"] = float64(d.Microseconds()) / 1000
				known += d
			}
		}
		ph["other"] = float64((total - known).Microseconds()) / 1000
		return total, ph, nil
	case err := <-done:
		done <- err
		return 0, nil, fmt.Errorf("the acquiring member stopped: %v", err)
	case <-ctx.Done():
		return 0, nil, ctx.Err()
	case <-time.After(s.LeaseDuration + benchWait):
		return 0, nil, fmt.Errorf("round %d: no election within %v", r, s.LeaseDuration+benchWait)
	}
}

// memberReport is what `krole bench member` prints on stdout, one JSON
// object a line: first {"event":"steady"} once it holds every role (the
// measurement starts), then the report.
type memberReport struct {
	Event string `json:"event"`
	// The report's fields: renew latencies (ms) of the window, from the
	// renewal's start (the lease's GrantedAt, before the wait for one of
	// the member's call slots) to the write's answer, and of the write
	// alone (from the transport's call); how many holdings ended unasked,
	// by reason; and the member process's CPU (user+system) over the
	// window.
	RenewMS  []float64      `json:"renew_ms,omitempty"`
	WriteMS  []float64      `json:"write_ms,omitempty"`
	Missed   int            `json:"missed"`
	MissedBy map[string]int `json:"missed_by,omitempty"`
	Failed   int            `json:"failed_renewals"`
	WindowS  float64        `json:"window_s"`
	CPUS     float64        `json:"cpu_s"`
	ElectedS float64        `json:"elected_s"` // from the start of the campaign to every role held (or to the plateau)
	// HeldAtStart and HeldAtEnd: roles held when the window began and
	// ended. The window begins once every role is held, or once the count
	// held has not grown for two lease durations (a member at its renew
	// capacity keeps the rest queued).
	HeldAtStart int `json:"held_at_start"`
	HeldAtEnd   int `json:"held_at_end"`
}

// runBenchRenew runs `krole bench renew`: a `krole bench member` process
// holds K roles for T; this process runs the cluster (when embedded) and
// the bench's view, and its own CPU over the window is reported apart.
func runBenchRenew(c *ucli.Context) error {
	if err := noArgs(c); err != nil {
		return err
	}
	k, err := positive(c, "roles")
	if err != nil {
		return err
	}
	dur := c.Duration("duration")
	if dur <= 0 {
		return Usagef(c, "--duration %v: must be positive", dur)
	}
	s, err := benchSettings(c)
	if err != nil {
		return err
	}
	e, err := startBenchEnv(c)
	if err != nil {
		return err
	}
	defer e.close()
	out := &tailBuffer{}
	pr, pw, err := os.Pipe()
	if err != nil {
		return err
	}
	args := []string{"bench", "member", "--brokers", e.brokers, "--topic", e.cfg.Topic, "--txn-prefix", e.cfg.TxnPrefix,
		"--member", "bench-renew-" + e.run, "--role-prefix", "bench-renew-" + e.run + "-", "--roles", fmt.Sprint(k),
		"--lease-duration", s.LeaseDuration.String(), "--renew-interval", s.RenewInterval.String(),
		"--duration", dur.String()}
	if p := c.String("member-cpuprofile"); p != "" {
		args = append(args, "--cpuprofile", p)
	}
	child, err := supervise.Start(supervise.Spec{Path: e.exe, Args: args, Env: demoEnv(), Stdout: pw, Stderr: out})
	pw.Close()
	if err != nil {
		pr.Close()
		return err
	}
	defer func() {
		if !exitedChild(child) {
			_, _ = child.Stop(context.Background(), 10*time.Second)
		}
	}()
	e.progress("renew: %d roles, waiting for the member to hold them all (or for the count held to stop growing)", k)
	var (
		rep       memberReport
		steady    bool
		cpu0      float64
		cpu1      float64
		reportErr error
	)
	sc := bufio.NewScanner(pr)
	sc.Buffer(make([]byte, 1<<20), 1<<30)
	readDone := make(chan struct{})
	defer close(readDone)
	go func() { // Ctrl-C: the member leaves, and its pipe ends
		select {
		case <-c.Context.Done():
			_ = syscall.Kill(child.Pid(), syscall.SIGTERM)
		case <-readDone:
		}
	}()
	for sc.Scan() {
		var r memberReport
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			reportErr = fmt.Errorf("the bench member's report: %w", err)
			break
		}
		switch r.Event {
		case "steady":
			steady, cpu0 = true, selfCPU()
			e.progress("renew: measuring for %v", dur)
		case "report":
			rep, cpu1 = r, selfCPU()
		}
	}
	pr.Close()
	<-child.Done()
	fmt.Fprintln(e.errOut)
	if reportErr != nil {
		return reportErr
	}
	if !steady || rep.Event != "report" {
		return fmt.Errorf("the bench member exited %s without a report: %s", exitText(child.ExitCode()), out.last())
	}
	n := float64(len(rep.RenewMS))
	rate := n / rep.WindowS
	missed := rep.Missed
	per1000 := 0.0
	cl := 0.0
	if n > 0 {
		per1000 = rep.CPUS / n * 1000
		cl = (cpu1 - cpu0) / n * 1000
	}
	res := chart.Result{Kind: "renew", System: "krole", Label: c.String("label"), SamplesMS: rep.RenewMS, Settings: map[string]any{
		"roles": k, "lease_duration": s.LeaseDuration.String(), "renew_interval": s.RenewInterval.String(),
		"duration": dur.String(), "cluster": e.clusterName(), "elected_s": chart.Round3(rep.ElectedS),
		"failed_renewals": rep.Failed, "held_at_start": rep.HeldAtStart, "held_at_end": rep.HeldAtEnd,
		"missed_by": rep.MissedBy,
		"samples":   "from the renewal's start (before the wait for a call slot) to the write's answer; phase write: the write alone",
		"cpu": "cpu_s_per_1000: the member process (krole bench member: its view, transport and processor); " +
			"cluster_cpu_s_per_1000: the bench process (the embedded cluster when there is one, and the bench's view)",
	}, RenewalsPerS: &rate, MissedDeadlines: &missed, CPUSPer1000: &per1000}
	if len(rep.WriteMS) > 0 {
		res.Phases = map[string]*chart.Dist{"write": chart.NewDist(rep.WriteMS)}
	}
	if e.embedded {
		res.ClusterCPUSPer1000 = &cl
	}
	res.Stats = chart.Summarize(res.SamplesMS)
	return writeBench(c, res)
}

// selfCPU is this process's user+system CPU seconds.
func selfCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// benchMemberCommand is `krole bench member`, hidden: the member process
// of `krole bench renew`.
func benchMemberCommand() *ucli.Command {
	return &ucli.Command{
		Name:   "member",
		Hidden: true,
		Usage:  "the member process of 'krole bench renew' (reports JSON on stdout)",
		Flags: []ucli.Flag{
			memberFlag(),
			&ucli.StringFlag{Name: "role-prefix", Value: "bench-renew-"},
			&ucli.IntFlag{Name: "roles", Value: 1},
			&ucli.DurationFlag{Name: "lease-duration", Value: benchLease},
			&ucli.DurationFlag{Name: "renew-interval"},
			&ucli.DurationFlag{Name: "duration", Value: 10 * time.Second},
			&ucli.StringFlag{Name: "cpuprofile"},
		},
		Action: runBenchMember,
	}
}

// timedTransport times the renewals that pass through it: the lease
// writes under a token after the first (the challenge's), releases not
// counted.
type timedTransport struct {
	fencing.Transport
	mu        sync.Mutex
	fresh     map[codec.Role]codec.Token // tokens whose first write is still to come
	recording bool
	samples   []float64 // from the renewal's start
	writes    []float64 // the write alone
	failed    int
}

func (t *timedTransport) AcquireEpoch(ctx context.Context, role codec.Role) (codec.Token, error) {
	tok, err := t.Transport.AcquireEpoch(ctx, role)
	if err == nil {
		t.mu.Lock()
		t.fresh[role] = tok
		t.mu.Unlock()
	}
	return tok, err
}

func (t *timedTransport) WriteLease(ctx context.Context, role codec.Role, tok codec.Token, lease codec.Lease) error {
	t.mu.Lock()
	renewal := !lease.Released() && t.fresh[role] != tok
	if t.fresh[role] == tok {
		delete(t.fresh, role)
	}
	t.mu.Unlock()
	start := time.Now()
	err := t.Transport.WriteLease(ctx, role, tok, lease)
	d := time.Since(start)
	if renewal {
		t.mu.Lock()
		if t.recording {
			if err != nil {
				t.failed++
			} else {
				// The lease is dated from the renewal's start, before
				// the wait for a call slot: the latency a holder sees.
				began := time.UnixMilli(lease.GrantedAt)
				t.samples = append(t.samples, float64(time.Since(began).Microseconds())/1000)
				t.writes = append(t.writes, float64(d.Microseconds())/1000)
			}
		}
		t.mu.Unlock()
	}
	return err
}

func runBenchMember(c *ucli.Context) error {
	cfg, err := configFrom(c)
	if err != nil {
		return err
	}
	me, err := memberArg(c)
	if err != nil {
		return err
	}
	k := c.Int("roles")
	if k <= 0 {
		return Usagef(c, "--roles %d: must be at least 1", k)
	}
	s, err := benchSettings(c)
	if err != nil {
		return err
	}
	roles := make([]codec.Role, k)
	for i := range roles {
		roles[i] = codec.Role(fmt.Sprintf("%s%d", c.String("role-prefix"), i))
	}
	cfg.TxnTimeout = s.TransactionTimeout
	cfg.ClientID = "krole-" + string(me)
	v, err := view.New(view.Options{Config: cfg})
	if err != nil {
		return err
	}
	bt, err := fencing.NewBrokerTransport(cfg)
	if err != nil {
		return err
	}
	defer bt.Close()
	tt := &timedTransport{Transport: bt, fresh: map[codec.Role]codec.Token{}}
	var (
		mu       sync.Mutex
		held     = map[codec.Role]bool{}
		missed   int
		missedBy = map[string]int{}
		allHeld  = make(chan struct{})
	)
	m, err := processor.New(tt, v, me, roles, processor.Options{Settings: s, OnEvent: func(ev processor.Event) {
		mu.Lock()
		defer mu.Unlock()
		switch ev.Kind {
		case processor.Elected:
			held[ev.Role] = true
			if len(held) == k {
				select {
				case <-allHeld:
				default:
					close(allHeld)
				}
			}
		case processor.Revoked:
			delete(held, ev.Role)
			if ev.Reason != processor.ReasonContextEnded && ev.Reason != processor.ReasonResigned {
				missed++
				missedBy[string(ev.Reason)]++
			}
		}
	}})
	if err != nil {
		return err
	}
	vctx, stopView := context.WithCancel(context.WithoutCancel(c.Context))
	vdone := make(chan struct{})
	go func() { defer close(vdone); _ = v.Run(vctx) }()
	defer func() { stopView(); <-vdone }()
	if err := waitForView(c.Context, v, vdone); err != nil {
		return err
	}
	mctx, stopMember := context.WithCancel(c.Context)
	mdone := make(chan error, 1)
	campaign := time.Now()
	go func() {
		mdone <- m.Run(mctx, func(ctx context.Context, _ processor.Held) error { <-ctx.Done(); return nil })
	}()
	defer func() { stopMember(); <-mdone }()
	enc := json.NewEncoder(stdout(c))
	heldNow := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(held)
	}
	// Every role held, or a plateau: no more held for two lease
	// durations (a member at its renew capacity keeps the rest queued),
	// or the bound.
	bound := time.After(s.LeaseDuration + 10*benchWait)
	tick := time.NewTicker(time.Second)
	most, grew := 0, time.Now()
wait:
	for {
		select {
		case <-allHeld:
			break wait
		case <-c.Context.Done():
			tick.Stop()
			return nil
		case <-bound:
			break wait
		case <-tick.C:
			if n := heldNow(); n > most {
				most, grew = n, time.Now()
			} else if time.Since(grew) > 2*s.LeaseDuration {
				break wait
			}
		}
	}
	tick.Stop()
	elected := time.Since(campaign)
	tt.mu.Lock()
	tt.recording = true
	tt.mu.Unlock()
	mu.Lock()
	missed, missedBy = 0, map[string]int{}
	heldAtStart := len(held)
	mu.Unlock()
	if path := c.String("cpuprofile"); path != "" {
		stop, err := startCPUProfile(path)
		if err != nil {
			return err
		}
		defer stop()
	}
	cpu0, t0 := selfCPU(), time.Now()
	if err := enc.Encode(memberReport{Event: "steady"}); err != nil {
		return err
	}
	_ = sleepCtx(c.Context, c.Duration("duration"))
	cpu1, window := selfCPU(), time.Since(t0)
	tt.mu.Lock()
	tt.recording = false
	rep := memberReport{Event: "report", RenewMS: tt.samples, WriteMS: tt.writes, Failed: tt.failed, WindowS: window.Seconds(),
		CPUS: cpu1 - cpu0, ElectedS: elected.Seconds(), HeldAtStart: heldAtStart}
	tt.mu.Unlock()
	mu.Lock()
	rep.Missed, rep.MissedBy, rep.HeldAtEnd = missed, missedBy, len(held)
	mu.Unlock()
	return enc.Encode(rep)
}
