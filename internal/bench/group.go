package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"text/tabwriter"
	"time"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/chart"
	"github.com/krabka/krole/internal/ctxcall"
	"github.com/krabka/krole/processor"
	"github.com/krabka/krole/view"
)

// GroupOptions are a `krole bench group` run.
type GroupOptions struct {
	// Members: the group's members at the start (the join adds one);
	// Roles: the group's roles, RolePrefix0 .. RolePrefix(Roles-1).
	Members, Roles int
	// RolePrefix names the roles; default "shard-".
	RolePrefix string
	Settings   processor.Settings
	// Pause: between two members' starts; default 100ms.
	Pause time.Duration
	// Wait bounds each phase's wait for the group to balance, beyond a
	// lease; default [Wait] plus 10ms a role.
	Wait time.Duration
}

// GroupResult is a `krole bench group` run. Its samples are the unheld
// gaps of the rolling restart (ms).
type GroupResult struct {
	chart.Result
	Members int            `json:"members"`
	Roles   int            `json:"roles"`
	Start   GroupStart     `json:"start"`
	Join    GroupJoin      `json:"join"`
	Kill    GroupKill      `json:"kill"`
	Rolling GroupRolling   `json:"rolling_restart"`
	Memory  GroupMemory    `json:"memory"`
	Steps   []GroupRestart `json:"restarts,omitempty"`
}

// GroupStart: the members start one after another; from the last start
// until the group is balanced ([GroupBalanced]).
type GroupStart struct {
	// BalancedS: until every role was held once and no member held more
	// than 1.05 times the mean (or the mean rounded up, when more), and
	// stayed so; SettledS: until the last Elected or Revoked of the
	// phase (the assignment stopped moving).
	BalancedS float64 `json:"balanced_s"`
	SettledS  float64 `json:"settled_s"`
	// MaxOverMean: the most roles a member held over the mean, once
	// settled.
	MaxOverMean float64 `json:"max_over_mean"`
	// StartsS: from the first member's start to the last's (each waits
	// for its view to catch up, then Pause).
	StartsS   float64 `json:"starts_s"`
	Elections int     `json:"elections"`
	Handovers int     `json:"handovers"`
}

// GroupJoin: one more member joins the balanced group.
type GroupJoin struct {
	BalancedS   float64 `json:"balanced_s"`
	SettledS    float64 `json:"settled_s"`
	MaxOverMean float64 `json:"max_over_mean"`
	// Moved: the handovers (Revoked, handed over) after the join;
	// Expected: ceil(roles / (members + 1)), the joiner's share.
	Moved    int `json:"moved"`
	Expected int `json:"expected"`
	// Gaps: per handover, from its Revoked to the role's next Elected
	// (0 when the new holder's Elected came first).
	Gaps *chart.Dist `json:"unheld_ms"`
	// Overlaps: handovers whose new holder's Elected came before the
	// Revoked (events only: the broker's fence still had one holder).
	Overlaps int `json:"overlaps"`
}

// GroupKill: the joiner is stopped without releasing (KeepOnExit): its
// leases run out.
type GroupKill struct {
	Killed      codec.MemberID `json:"killed"`
	KilledRoles int            `json:"killed_roles"`
	// HeldAgainS: from the kill to the last of its roles' first Elected
	// after it; FirstS: to the first.
	HeldAgainS  float64 `json:"held_again_s"`
	FirstS      float64 `json:"first_s"`
	HeldAgain   int     `json:"held_again"`
	BalancedS   float64 `json:"balanced_s"`
	SettledS    float64 `json:"settled_s"`
	MaxOverMean float64 `json:"max_over_mean"`
	// OthersMoved: roles the killed member did not hold that a survivor
	// lost after the kill (should be 0).
	OthersMoved int `json:"others_moved"`
	// DoubleWins: roles elected more than once after the kill (until
	// balanced, and a settle after).
	DoubleWins int `json:"double_wins"`
}

// GroupRolling: each member in turn drains, stops, and starts again
// under its id; the group rebalances before the next.
type GroupRolling struct {
	Restarts int `json:"restarts"`
	// Gaps: every time a role was unheld (a Revoked that left it without
	// a holder, to its next Elected) over the whole phase.
	Gaps *chart.Dist `json:"unheld_ms"`
	// DrainGaps: those that began while a member drained; RejoinGaps:
	// those that began once its new instance started.
	DrainGaps  *chart.Dist `json:"drain_unheld_ms"`
	RejoinGaps *chart.Dist `json:"rejoin_unheld_ms"`
	Unfilled   int         `json:"unfilled"`
	Handovers  int         `json:"handovers"`
	// LeaseWaits: gaps as long as the lease or longer: a role that
	// waited for a lease to run out (0 when every handover was a hand).
	LeaseWaits int     `json:"lease_waits"`
	Overlaps   int     `json:"overlaps"`
	TotalS     float64 `json:"total_s"`
}

// GroupRestart is one member's restart.
type GroupRestart struct {
	Member codec.MemberID `json:"member"`
	// DrainS: Drain's return; RebalancedS: from the new instance's start
	// until balanced.
	DrainS      float64 `json:"drain_s"`
	RebalancedS float64 `json:"rebalanced_s"`
	SettledS    float64 `json:"settled_s"`
	// Held: the roles it held before the drain; Back: how many of them it
	// holds again once balanced (stickiness across a restart).
	Held int `json:"held"`
	Back int `json:"back"`
}

// GroupMemory: this process after the start phase (after a GC). It holds
// every member, its view and transport, the bench's view and (unless
// --brokers) the embedded cluster: a figure per held role, not a
// member's own cost.
type GroupMemory struct {
	HeapInuseBytes     uint64  `json:"heap_inuse_bytes"`
	BaseHeapInuseBytes uint64  `json:"base_heap_inuse_bytes"`
	Goroutines         int     `json:"goroutines"`
	BaseGoroutines     int     `json:"base_goroutines"`
	HeapPerRole        float64 `json:"heap_inuse_bytes_per_role"`
	HeapGrowthPerRole  float64 `json:"heap_growth_bytes_per_role"`
	GoroutinesPerRole  float64 `json:"goroutines_per_role"`
	GoroutineGrowth    float64 `json:"goroutine_growth_per_role"`
}

// groupMember is one member of the group, in this process, on a view and
// a transport of its own.
type groupMember struct {
	id     codec.MemberID
	m      *processor.Member
	bt     *fencing.BrokerTransport
	stopM  context.CancelFunc
	stopV  context.CancelFunc
	mdone  chan error
	vdone  chan struct{}
	closed bool
}

// stop ends the member's Run (it releases its roles unless KeepOnExit)
// and closes its view and transport.
func (gm *groupMember) stop() error {
	if gm.closed {
		return nil
	}
	gm.closed = true
	gm.stopM()
	err := <-gm.mdone
	gm.stopV()
	<-gm.vdone
	gm.bt.Close()
	if err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("member %s: %w", gm.id, err)
	}
	return nil
}

// groupRun is one run's state.
type groupRun struct {
	e     *Env
	c     Cluster
	cfg   fencing.Config
	o     GroupOptions
	name  string
	roles []codec.Role
	rec   *groupRec
}

// start starts member id: its view caught up, then its Run.
func (g *groupRun) start(ctx context.Context, id codec.MemberID, keep bool) (*groupMember, error) {
	cfg := g.cfg
	cfg.ClientID = "krole-" + string(id)
	cfg.TxnTimeout = g.o.Settings.TransactionTimeout
	bt, err := g.e.connect(cfg.ClientID, cfg.TxnTimeout)
	if err != nil {
		return nil, err
	}
	// The view shares the transport's record of the member's own producer
	// ids, as election's member does.
	v, err := view.New(view.Options{Config: cfg, Authors: bt.Authors()})
	if err != nil {
		bt.Close()
		return nil, err
	}
	gm := &groupMember{id: id, bt: bt, mdone: make(chan error, 1), vdone: make(chan struct{})}
	vctx, stopV := context.WithCancel(context.WithoutCancel(ctx))
	gm.stopV = stopV
	go func() { defer close(gm.vdone); _ = v.Run(vctx) }()
	if err := v.WaitCaughtUp(ctx); err != nil {
		stopV()
		<-gm.vdone
		bt.Close()
		return nil, err
	}
	s := g.o.Settings
	s.KeepOnExit = keep
	m, err := processor.New(bt, v, id, g.roles, processor.Options{Settings: s, Group: &processor.Group{Name: g.name}, OnEvent: g.rec.on})
	if err != nil {
		stopV()
		<-gm.vdone
		bt.Close()
		return nil, err
	}
	gm.m = m
	mctx, stopM := context.WithCancel(context.WithoutCancel(ctx))
	gm.stopM = stopM
	go func() {
		gm.mdone <- m.Run(mctx, func(ctx context.Context, _ processor.Held) error { <-ctx.Done(); return nil })
	}()
	return gm, nil
}

// RunGroup runs `krole bench group` on e: Members processor.Members in
// this process, each on its own view and transport, of one group over
// Roles roles; phases start, join, kill and rolling restart (see
// [GroupResult]), timed from the members' Elected and Revoked events.
func RunGroup(ctx context.Context, e *Env, o GroupOptions) (*GroupResult, error) {
	if o.Members < 1 || o.Roles < 1 {
		return nil, fmt.Errorf("bench group: %d members, %d roles: need at least 1 of each", o.Members, o.Roles)
	}
	if o.RolePrefix == "" {
		o.RolePrefix = "shard-"
	}
	if o.Pause <= 0 {
		o.Pause = 100 * time.Millisecond
	}
	if o.Wait <= 0 {
		o.Wait = Wait + time.Duration(o.Roles)*10*time.Millisecond
	}
	s := o.Settings
	g := &groupRun{e: e, c: e.Cluster(), cfg: e.cfg, o: o, name: "bench-group-" + e.Run(), rec: newGroupRec(o.Roles)}
	g.roles = make([]codec.Role, o.Roles)
	for i := range g.roles {
		g.roles[i] = codec.Role(fmt.Sprintf("%s%d", o.RolePrefix, i))
	}
	bound := s.LeaseDuration + o.Wait
	settle := max(2*s.HeartbeatInterval, 200*time.Millisecond)
	memberID := func(i int) codec.MemberID { return codec.MemberID(fmt.Sprintf("bench-g%s-%d", e.Run(), i)) }

	members := map[codec.MemberID]*groupMember{}
	defer func() {
		for _, gm := range members {
			_ = gm.stop()
		}
	}()
	res := &GroupResult{Members: o.Members, Roles: o.Roles}
	res.Result = chart.Result{Kind: "group", System: "krole", Settings: map[string]any{
		"members": o.Members, "roles": o.Roles, "lease_duration": s.LeaseDuration.String(),
		"heartbeat_interval": s.HeartbeatInterval.String(), "pause": o.Pause.String(),
		"member": "processor.Members in the bench process, each on its own view and transport",
	}}

	// Memory before any member.
	baseHeap, baseG := heapInuse()

	// 1. start.
	first := time.Now()
	var last time.Time
	for i := range o.Members {
		id := memberID(i)
		g.c.progress("group start: member %d/%d", i+1, o.Members)
		g.rec.setLive(id, true)
		gm, err := g.start(ctx, id, false)
		if err != nil {
			return nil, fmt.Errorf("starting member %s: %w", id, err)
		}
		members[id] = gm
		last = time.Now()
		if i < o.Members-1 {
			if err := ctxcall.Sleep(ctx, o.Pause); err != nil {
				return nil, err
			}
		}
	}
	res.Start.StartsS = last.Sub(first).Seconds()
	g.c.progress("group start: waiting for balance")
	st, err := g.rec.awaitBalanced(ctx, g.c, settle, bound)
	if err != nil {
		return nil, fmt.Errorf("start: %w", err)
	}
	res.Start.BalancedS, res.Start.SettledS, res.Start.MaxOverMean = nonNeg(st.balanced.Sub(last)), nonNeg(st.quiet.Sub(last)), st.ratio
	res.Start.Elections, res.Start.Handovers = g.rec.counts(first)

	// 5. memory, after the start.
	heap, gs := heapInuse()
	res.Memory = GroupMemory{HeapInuseBytes: heap, BaseHeapInuseBytes: baseHeap, Goroutines: gs, BaseGoroutines: baseG,
		HeapPerRole: float64(heap) / float64(o.Roles), GoroutinesPerRole: float64(gs) / float64(o.Roles),
		GoroutineGrowth: float64(gs-baseG) / float64(o.Roles)}
	if heap > baseHeap {
		res.Memory.HeapGrowthPerRole = float64(heap-baseHeap) / float64(o.Roles)
	}

	// 2. join: the joiner keeps its leases on exit, for the kill.
	joiner := memberID(o.Members)
	g.c.progress("group join: %s", joiner)
	g.rec.setLive(joiner, true)
	joined := time.Now()
	gm, err := g.start(ctx, joiner, true)
	if err != nil {
		return nil, fmt.Errorf("starting the joiner %s: %w", joiner, err)
	}
	members[joiner] = gm
	st, err = g.rec.awaitBalanced(ctx, g.c, settle, bound)
	if err != nil {
		return nil, fmt.Errorf("join: %w", err)
	}
	res.Join.BalancedS, res.Join.SettledS, res.Join.MaxOverMean = nonNeg(st.balanced.Sub(joined)), nonNeg(st.quiet.Sub(joined)), st.ratio
	res.Join.Expected = int(math.Ceil(float64(o.Roles) / float64(o.Members+1)))
	gaps := g.rec.gaps(joined, time.Now(), true)
	res.Join.Moved, res.Join.Overlaps = gaps.handovers, gaps.overlaps
	res.Join.Gaps = chart.NewDist(gaps.ms)

	// 3. kill: the joiner stops without releasing.
	g.c.progress("group kill: %s", joiner)
	victim := g.rec.heldBy(joiner)
	g.rec.setLive(joiner, false)
	killed := time.Now()
	if err := members[joiner].stop(); err != nil {
		return nil, err
	}
	delete(members, joiner)
	g.rec.drop(joiner)
	st, err = g.rec.awaitBalanced(ctx, g.c, settle, bound)
	if err != nil {
		return nil, fmt.Errorf("kill: %w", err)
	}
	res.Kill = g.rec.kill(joiner, victim, killed, time.Now())
	res.Kill.BalancedS, res.Kill.SettledS, res.Kill.MaxOverMean = nonNeg(st.balanced.Sub(killed)), nonNeg(st.quiet.Sub(killed)), st.ratio

	// 4. rolling restart of the members started first.
	rolled := time.Now()
	var drainGaps, rejoinGaps []float64
	for i := range o.Members {
		id := memberID(i)
		g.c.progress("group rolling restart: %s (%d/%d)", id, i+1, o.Members)
		step := GroupRestart{Member: id}
		before := g.rec.heldBy(id)
		step.Held = len(before)
		t0 := time.Now()
		dctx, cancel := context.WithTimeout(ctx, bound)
		err := members[id].m.Drain(dctx)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("rolling restart: draining %s: %w", id, err)
		}
		step.DrainS = time.Since(t0).Seconds()
		if err := members[id].stop(); err != nil {
			return nil, err
		}
		delete(members, id)
		t1 := time.Now()
		gm, err := g.start(ctx, id, false)
		if err != nil {
			return nil, fmt.Errorf("rolling restart: starting %s again: %w", id, err)
		}
		members[id] = gm
		st, err := g.rec.awaitBalanced(ctx, g.c, settle, bound)
		if err != nil {
			return nil, fmt.Errorf("rolling restart of %s: %w", id, err)
		}
		step.RebalancedS, step.SettledS = nonNeg(st.balanced.Sub(t1)), nonNeg(st.quiet.Sub(t1))
		for role := range g.rec.heldBy(id) {
			if before[role] {
				step.Back++
			}
		}
		drainGaps = append(drainGaps, g.rec.gaps(t0, t1, false).ms...)
		rejoinGaps = append(rejoinGaps, g.rec.gaps(t1, time.Now(), false).ms...)
		res.Steps = append(res.Steps, step)
	}
	g.c.endProgress()
	gaps = g.rec.gaps(rolled, time.Now(), false)
	res.Rolling = GroupRolling{Restarts: o.Members, Unfilled: gaps.unfilled, Handovers: gaps.handovers, Overlaps: gaps.overlaps,
		TotalS: time.Since(rolled).Seconds()}
	for _, d := range gaps.ms {
		if d >= ms(s.LeaseDuration) {
			res.Rolling.LeaseWaits++
		}
	}
	res.SamplesMS = append([]float64(nil), gaps.ms...)
	res.Stats = chart.Summarize(res.SamplesMS)
	res.Rolling.Gaps = chart.NewDist(gaps.ms)
	res.Rolling.DrainGaps, res.Rolling.RejoinGaps = chart.NewDist(drainGaps), chart.NewDist(rejoinGaps)
	for id, gm := range members {
		delete(members, id)
		if err := gm.stop(); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// heapInuse is this process's heap in use after a GC, and its goroutines.
func heapInuse() (uint64, int) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse, runtime.NumGoroutine()
}

func nonNeg(d time.Duration) float64 { return max(d, 0).Seconds() }

// WriteDetails writes the lines that follow the gaps in the text of a
// group run: a table of its phases, the restarts and the memory.
func (res *GroupResult) WriteDetails(w io.Writer) {
	lease, _ := res.Settings["lease_duration"].(string)
	fmt.Fprintf(w, "%-16s %d members, %d roles, lease %s; the samples above: unheld gaps of the rolling restart\n", "", res.Members, res.Roles, lease)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "phase\tbalanced\tsettled\tmax/mean\tmoved\tunheld p50 / p99 / max ms\tnotes")
	st := res.Start
	fmt.Fprintf(tw, "start\t%.2f s\t%.2f s\t%.3f\t-\t-\tafter the last of %d starts (%.2f s from first to last); %d elections, %d handovers\n",
		st.BalancedS, st.SettledS, st.MaxOverMean, res.Members, st.StartsS, st.Elections, st.Handovers)
	j := res.Join
	fmt.Fprintf(tw, "join\t%.2f s\t%.2f s\t%.3f\t%d (share %d)\t%s\toverlaps %d\n",
		j.BalancedS, j.SettledS, j.MaxOverMean, j.Moved, j.Expected, distText(j.Gaps), j.Overlaps)
	k := res.Kill
	fmt.Fprintf(tw, "kill\t%.2f s\t%.2f s\t%.3f\tothers %d\t-\t%s held %d: %d held again after %.2f s (first %.2f s); double wins %d\n",
		k.BalancedS, k.SettledS, k.MaxOverMean, k.OthersMoved, k.Killed, k.KilledRoles, k.HeldAgain, k.HeldAgainS, k.FirstS, k.DoubleWins)
	r := res.Rolling
	fmt.Fprintf(tw, "rolling restart\t-\t%.2f s in all\t-\t%d\t%s\t%d restarts; gaps >= lease %d; unfilled %d; overlaps %d\n",
		r.TotalS, r.Handovers, distText(r.Gaps), r.Restarts, r.LeaseWaits, r.Unfilled, r.Overlaps)
	fmt.Fprintf(tw, "  while draining\t\t\t\t\t%s\t\n", distText(r.DrainGaps))
	fmt.Fprintf(tw, "  after rejoining\t\t\t\t\t%s\t\n", distText(r.RejoinGaps))
	tw.Flush()
	for _, s := range res.Steps {
		fmt.Fprintf(w, "%-16s restart %s: drained in %.2f s; after its new start balanced %.2f s, settled %.2f s; took back %d of the %d roles it held\n", "",
			s.Member, s.DrainS, s.RebalancedS, s.SettledS, s.Back, s.Held)
	}
	m := res.Memory
	fmt.Fprintf(w, "memory after the start, per role: %.0f B heap in use (%.0f B over the process before the members), %.1f goroutines (%.1f over)\n",
		m.HeapPerRole, m.HeapGrowthPerRole, m.GoroutinesPerRole, m.GoroutineGrowth)
	fmt.Fprintf(w, "  (one process: all %d members, their views and transports, the bench's view and any embedded cluster; not one member's cost)\n", res.Members)
}

// distText is a Dist's p50 / p99 / max.
func distText(d *chart.Dist) string {
	if d == nil || len(d.SamplesMS) == 0 {
		return "none"
	}
	return fmt.Sprintf("%.1f / %.1f / %.1f (n=%d)", d.MedianMS, d.P99MS, d.MaxMS, len(d.SamplesMS))
}
