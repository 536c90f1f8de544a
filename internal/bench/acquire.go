package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/chart"
	"github.com/krabka/krole/processor"
	"github.com/krabka/krole/rolestate"
)

// AcquireOptions are a `krole bench acquire` run.
type AcquireOptions struct {
	// Rounds: one fresh member and role, one sample, each.
	Rounds   int
	Settings processor.Settings
	// Run tags the role and member names.
	Run string
	// Running: one member, started and elected for a first role before
	// the rounds, takes one more role each round (Member.Add), as etcd's
	// Campaign runs on a session already open.
	Running bool
}

// Acquire runs `krole bench acquire`: each round, a fresh member (a
// processor.Member in this process, on the bench's view c.View and on one
// transport connected before the first round, as an etcd client is)
// campaigns for a fresh role nobody else wants; the sample runs from the
// member's Run (it registers, then campaigns) to its Elected event (its
// lease write committed). The phases say where the time went.
func Acquire(ctx context.Context, c Cluster, o AcquireOptions) (*chart.Result, error) {
	if o.Rounds < 1 {
		return nil, fmt.Errorf("bench acquire: %d rounds: need at least 1", o.Rounds)
	}
	bt, err := c.Connect("krole-bench-acquire", o.Settings.TransactionTimeout)
	if err != nil {
		return nil, err
	}
	defer bt.Close()
	round, member := acquireFresh(ctx, c, bt, o), "processor.Member in the bench process, on the bench's view and one transport"
	if o.Running {
		a, err := startAcquirer(ctx, c, bt, o.Settings, codec.MemberID("bench-acquirer-"+o.Run), codec.Role("bench-acquire-"+o.Run+"-first"))
		if err != nil {
			return nil, err
		}
		defer a.close()
		if _, err := a.awaitElected(ctx, "the first role"); err != nil {
			return nil, err
		}
		round = a.takeOneMore(ctx, o)
		member = "one processor.Member in the bench process, running, taking one more role each round (Member.Add)"
	}
	var samples []float64
	phases := map[string][]float64{}
	for r := range o.Rounds {
		d, ph, err := round(r)
		if err != nil {
			return nil, err
		}
		samples = append(samples, ms(d))
		for k, v := range ph {
			phases[k] = append(phases[k], v)
		}
		c.progress("acquire round %d/%d: %.2f ms", r+1, o.Rounds, samples[len(samples)-1])
	}
	c.endProgress()
	res := &chart.Result{Kind: "acquire", System: "krole", SamplesMS: samples, Settings: map[string]any{
		"rounds": o.Rounds, "lease_duration": o.Settings.LeaseDuration.String(), "heartbeat_interval": o.Settings.HeartbeatInterval.String(),
		"member": member,
	}, Phases: map[string]*chart.Dist{}}
	for k, v := range phases {
		res.Phases[k] = chart.NewDist(v)
	}
	res.Stats = chart.Summarize(res.SamplesMS)
	return res, nil
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
	if s.tr.tracing(role) {
		s.tr.add("confirm", time.Since(start))
	}
	return c, err
}

func (s *traceSource) Follow(ctx context.Context, role codec.Role) <-chan rolestate.State {
	in := s.Source.Follow(ctx, role)
	out := make(chan rolestate.State)
	go func() {
		defer close(out)
		for st := range in {
			if st.Rank(s.me) >= 0 && s.tr.tracing(role) {
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
	role  codec.Role // the role acquired; "" for any
}

// reset starts the acquisition of role now. The member's heartbeat rounds
// (DescribeMany, Heartbeat) and its other roles' calls are not traced.
func (t *tracer) reset(role codec.Role) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.start, t.sums, t.marks, t.role = time.Now(), map[string]time.Duration{}, map[string]time.Time{}, role
}

// tracing reports whether role is the one acquired.
func (t *tracer) tracing(role codec.Role) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.role == "" || t.role == role
}

// phases returns the time from start to at, and its phases in ms: each
// traced call's sum, the wait for the registration to show, and the rest.
func (t *tracer) phases(at time.Time) (time.Duration, map[string]float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	total := at.Sub(t.start)
	ph := map[string]float64{}
	var known time.Duration
	for k, d := range t.sums {
		ph[k] = ms(d)
		known += d
	}
	if reg, ok := t.marks["registered"]; ok {
		if shows, ok := t.marks["registration_shows"]; ok && shows.After(reg) {
			d := shows.Sub(reg)
			ph["registration_to_view"] = ms(d)
			known += d
		}
	}
	ph["other"] = ms(total - known)
	return total, ph
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
	if t.tr.tracing(role) {
		t.tr.add("register", time.Since(start))
		t.tr.mark("registered")
	}
	return off, err
}

func (t *traceTransport) AcquireEpoch(ctx context.Context, role codec.Role) (codec.Token, error) {
	start := time.Now()
	tok, err := t.Transport.AcquireEpoch(ctx, role)
	if t.tr.tracing(role) {
		t.tr.add("acquire_epoch", time.Since(start))
	}
	return tok, err
}

func (t *traceTransport) WriteLease(ctx context.Context, role codec.Role, tok codec.Token, l codec.Lease) (int64, error) {
	start := time.Now()
	off, err := t.Transport.WriteLease(ctx, role, tok, l)
	if t.tr.tracing(role) {
		t.tr.add("write_lease", time.Since(start))
	}
	return off, err
}

// acquirer is a traced processor.Member of the bench, running, and the
// times of its Elected events.
type acquirer struct {
	m       *processor.Member
	tr      *tracer
	s       processor.Settings
	elected chan time.Time
	done    chan error
	cancel  context.CancelFunc
}

// startAcquirer runs member me for role on t and the bench's view; its
// clock (tr.start) starts with Run.
func startAcquirer(ctx context.Context, c Cluster, t fencing.Transport, s processor.Settings, me codec.MemberID, role codec.Role) (*acquirer, error) {
	a := &acquirer{tr: &tracer{sums: map[string]time.Duration{}, marks: map[string]time.Time{}}, s: s,
		elected: make(chan time.Time, 16), done: make(chan error, 1)}
	m, err := processor.New(&traceTransport{Transport: t, tr: a.tr}, &traceSource{Source: c.View, me: me, tr: a.tr}, me, []codec.Role{role},
		processor.Options{Settings: s, OnEvent: func(ev processor.Event) {
			if ev.Kind == processor.Elected {
				select {
				case a.elected <- time.Now():
				default:
				}
			}
		}})
	if err != nil {
		return nil, err
	}
	a.m = m
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	a.cancel = cancel
	a.tr.start = time.Now()
	go func() {
		a.done <- m.Run(rctx, func(ctx context.Context, _ processor.Held) error { <-ctx.Done(); return nil })
	}()
	return a, nil
}

// awaitElected returns when the member's next Elected event came.
func (a *acquirer) awaitElected(ctx context.Context, what string) (time.Time, error) {
	select {
	case at := <-a.elected:
		return at, nil
	case err := <-a.done:
		a.done <- err
		return time.Time{}, fmt.Errorf("the acquiring member stopped: %v", err)
	case <-ctx.Done():
		return time.Time{}, ctx.Err()
	case <-time.After(a.s.LeaseDuration + Wait):
		return time.Time{}, fmt.Errorf("%s: no election within %v", what, a.s.LeaseDuration+Wait)
	}
}

// close ends the member's Run and waits for it.
func (a *acquirer) close() {
	a.cancel()
	<-a.done
}

// acquireFresh returns the rounds of a fresh member each: from its Run to
// its Elected event, and the phases in ms.
func acquireFresh(ctx context.Context, c Cluster, t fencing.Transport, o AcquireOptions) func(r int) (time.Duration, map[string]float64, error) {
	return func(r int) (time.Duration, map[string]float64, error) {
		me := codec.MemberID(fmt.Sprintf("bench-acquirer-%s-%d", o.Run, r))
		a, err := startAcquirer(ctx, c, t, o.Settings, me, codec.Role(fmt.Sprintf("bench-acquire-%s-%d", o.Run, r)))
		if err != nil {
			return 0, nil, err
		}
		defer a.close()
		at, err := a.awaitElected(ctx, fmt.Sprintf("round %d", r))
		if err != nil {
			return 0, nil, err
		}
		total, ph := a.tr.phases(at)
		return total, ph, nil
	}
}

// takeOneMore returns the rounds of the running member a: from Add of a
// new role to its Elected event, and the phases in ms.
func (a *acquirer) takeOneMore(ctx context.Context, o AcquireOptions) func(r int) (time.Duration, map[string]float64, error) {
	return func(r int) (time.Duration, map[string]float64, error) {
		role := codec.Role(fmt.Sprintf("bench-acquire-%s-%d", o.Run, r))
		a.tr.reset(role)
		if err := a.m.Add(role); err != nil {
			return 0, nil, err
		}
		at, err := a.awaitElected(ctx, fmt.Sprintf("round %d", r))
		if err != nil {
			return 0, nil, err
		}
		total, ph := a.tr.phases(at)
		return total, ph, nil
	}
}

// ms is d in milliseconds, to the microsecond.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
