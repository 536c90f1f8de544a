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
	var samples []float64
	phases := map[string][]float64{}
	for r := range o.Rounds {
		d, ph, err := acquireOnce(ctx, c, bt, o, r)
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
		"rounds": o.Rounds, "lease_duration": o.Settings.LeaseDuration.String(), "renew_interval": o.Settings.RenewInterval.String(),
		"member": "processor.Member in the bench process, on the bench's view and one transport",
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

func (t *traceTransport) WriteLease(ctx context.Context, role codec.Role, tok codec.Token, l codec.Lease) (int64, error) {
	start := time.Now()
	off, err := t.Transport.WriteLease(ctx, role, tok, l)
	t.tr.add("write_lease", time.Since(start))
	return off, err
}

// acquireOnce runs round r: the time to the Elected event, and its phases
// in ms.
func acquireOnce(ctx context.Context, c Cluster, t fencing.Transport, o AcquireOptions, r int) (time.Duration, map[string]float64, error) {
	s := o.Settings
	role := codec.Role(fmt.Sprintf("bench-acquire-%s-%d", o.Run, r))
	me := codec.MemberID(fmt.Sprintf("bench-acquirer-%s-%d", o.Run, r))
	tr := &tracer{sums: map[string]time.Duration{}, marks: map[string]time.Time{}}
	elected := make(chan time.Time, 1)
	m, err := processor.New(&traceTransport{Transport: t, tr: tr}, &traceSource{Source: c.View, me: me, tr: tr}, me, []codec.Role{role},
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
			ph[k] = ms(d)
			known += d
		}
		if reg, ok := tr.marks["registered"]; ok {
			if shows, ok := tr.marks["registration_shows"]; ok && shows.After(reg) {
				d := shows.Sub(reg)
				ph["registration_to_view"] = ms(d)
				known += d
			}
		}
		ph["other"] = ms(total - known)
		return total, ph, nil
	case err := <-done:
		done <- err
		return 0, nil, fmt.Errorf("the acquiring member stopped: %v", err)
	case <-ctx.Done():
		return 0, nil, ctx.Err()
	case <-time.After(s.LeaseDuration + Wait):
		return 0, nil, fmt.Errorf("round %d: no election within %v", r, s.LeaseDuration+Wait)
	}
}

// ms is d in milliseconds, to the microsecond.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
