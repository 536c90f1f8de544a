package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/chart"
	"github.com/krabka/krole/internal/ctxcall"
	"github.com/krabka/krole/internal/supervise"
	"github.com/krabka/krole/processor"
	"github.com/krabka/krole/view"
)

// FailoverManyOptions are a `krole bench failover-many` run.
type FailoverManyOptions struct {
	// Roles over Members member processes (see [FailoverMany]).
	Roles, Members int
	// KilledRoles, when positive, is how many of Roles the first member
	// (the one killed) holds; the others share the rest. Zero: each
	// member holds its Roles / Members.
	KilledRoles int
	Settings    processor.Settings
	// Grace: how long after the last of the dead member's roles showed
	// held again the bench keeps watching for a second election of a
	// role or a loss of a survivor's own (default one lease).
	Grace time.Duration
	// Wait: how long past one lease after the kill the bench waits for
	// the killed member's roles to show held again (default [Wait]).
	Wait time.Duration
	// Run tags the role and member names.
	Run string
	// SurvivorCPUProfile, when set, is where the first survivor (the
	// second member started) writes a pprof CPU profile of the failover:
	// from the kill for one lease plus Wait.
	SurvivorCPUProfile string
}

// FailoverManyResult is what `krole bench failover-many` prints. Its
// samples are, per role of the dead member, the time from the SIGKILL to
// the bench's view showing a survivor's lease of it.
type FailoverManyResult struct {
	chart.Result
	// KilledRoles: the roles the killed member held at the kill;
	// HeldAgain: how many of them the bench's view showed held by a
	// survivor within the bound (lease + FailoverManyOptions.Wait).
	KilledRoles int `json:"killed_roles"`
	HeldAgain   int `json:"held_again"`
	// FailoverS: from the SIGKILL until the view showed the last of them
	// held again; FirstS: until the first.
	FailoverS float64 `json:"failover_s"`
	FirstS    float64 `json:"first_s"`
	// AcquisitionRate: the survivors' elections of the dead member's
	// roles per second, from the first such election to the last (on
	// the survivors' clocks, this machine's): (n-1) / (last - first).
	AcquisitionRate float64 `json:"acquisition_rate_per_s"`
	// DueSpreadS: the last deadline of the killed member's leases minus
	// the first, each lease's deadline being the later of its own and
	// that of the killed session's last heartbeat. Its heartbeats renew
	// every lease at once, so they fall due together (DueSpreadS about
	// 0, apart from leases written after that heartbeat) and the rate is
	// the survivors' own. PastDeadline (per role, the survivor's lease
	// start minus the dead lease's deadline, in ms, both on this
	// machine's clock) shows whether they kept up.
	DueSpreadS float64 `json:"due_spread_s"`
	// BoundS: lease + KilledRoles / AcquisitionRate, the goal's bound.
	BoundS float64 `json:"bound_s"`
	// ElectionsMax: the most elections of one of the dead member's
	// roles after the kill, over all survivors (1 when each was taken
	// once); AcquiredTwice: how many roles were elected more than once.
	ElectionsMax  int `json:"elections_max"`
	AcquiredTwice int `json:"acquired_twice"`
	// SurvivorsLost: holdings of roles a survivor held at the kill that
	// ended after it (revoked events, any reason), summed.
	SurvivorsLost int `json:"survivors_lost"`
	// SurvivorsLostBy: those by revocation reason ("lease lost": no
	// heartbeat of its session vouched for it in time, or its runner
	// did not check in; "fenced": another member took it). RevokedBy:
	// every revocation of a survivor after the kill, of any role, by
	// reason (a role of the killed member taken and then let go is how
	// one comes to be elected twice).
	SurvivorsLostBy map[string]int `json:"survivors_lost_by,omitempty"`
	RevokedBy       map[string]int `json:"revoked_by,omitempty"`
	// ElectedByTwo: roles of the killed member that two different
	// survivors were elected to after the kill (one after the other:
	// the view shows one holder at a time).
	ElectedByTwo int `json:"elected_by_two"`
	// LongestOverlapMS: the longest time two members both held one role
	// (any role of the run), each from its Elected event to its Revoked
	// event, the killed member's holdings ending when it died, the open
	// ones at the end of the grace; all on this machine's clock.
	// OverlapRoles: the roles two members held at once at all;
	// LongestOverlap: which role, members and when.
	LongestOverlapMS float64  `json:"longest_overlap_ms"`
	OverlapRoles     int      `json:"overlap_roles"`
	LongestOverlap   *Overlap `json:"longest_overlap,omitempty"`
	// Traces: every member's events of the role of the longest overlap
	// and of the first few roles acquired twice (by name), to read why.
	Traces map[codec.Role][]TracedEvent `json:"traces,omitempty"`
	// Violations: AcquiredTwice + SurvivorsLost + OverlapRoles + the
	// roles not held again.
	Violations int              `json:"violations"`
	Members    []FailoverMember `json:"members"`
}

// TracedEvent is one member's Elected or Revoked event of a role.
type TracedEvent struct {
	Member codec.MemberID `json:"member"`
	Event  string         `json:"event"`
	AtUS   int64          `json:"at_us"`
	Reason string         `json:"reason,omitempty"`
}

// tracedRoles is how many roles acquired twice a result traces.
const tracedRoles = 5

// FailoverMember is one member's part in a failover-many run.
type FailoverMember struct {
	Member codec.MemberID `json:"member"`
	// HeldAtKill and HeldAtEnd: roles it held at the kill and at the
	// end of the grace (from its events; the killed member: at the kill
	// only).
	HeldAtKill int `json:"held_at_kill"`
	HeldAtEnd  int `json:"held_at_end"`
	// Acquired: the killed member's roles it was elected to after the
	// kill; Lost: holdings of roles it held at the kill that ended.
	Acquired int `json:"acquired"`
	Lost     int `json:"lost"`
	// AcquiredFirstS and AcquiredLastS: its first and last election of
	// one of them, from the kill (its clock, this machine's).
	AcquiredFirstS float64 `json:"acquired_first_s,omitempty"`
	AcquiredLastS  float64 `json:"acquired_last_s,omitempty"`
	// HeartbeatGapMaxMS: the longest time between two of its member
	// session's heartbeats as the bench's view saw them (polled every
	// 100 ms), from the kill until the roles showed held again; more
	// than two renew intervals, and the candidates behind it may take it
	// for gone (rule 7).
	HeartbeatGapMaxMS float64 `json:"heartbeat_gap_max_ms"`
	// RevokedBy: its revocations after the kill, of any role, by reason.
	RevokedBy map[string]int `json:"revoked_by,omitempty"`
}

// FailoverMany runs `krole bench failover-many`: o.Members member
// processes start one after the other; member i (from 0) campaigns for
// the roles of members 0..i-1, which they hold, so it only registers as
// their candidate, and for its own share (o.Roles / o.Members, or see
// o.KilledRoles), which nobody holds, so it takes them. Once each holds its share, member 0,
// which every other member is a candidate of, is SIGKILLed, and the bench
// measures until its roles show held again in the bench's view (c.View); then,
// after o.Grace, counts from the survivors' events the elections of each
// of the dead member's roles and the losses of their own.
func FailoverMany(ctx context.Context, c Cluster, o FailoverManyOptions) (*FailoverManyResult, error) {
	if o.Members < 2 || o.Roles < o.Members {
		return nil, fmt.Errorf("bench failover-many: %d roles over %d members: need 2 members and a role each", o.Roles, o.Members)
	}
	if o.KilledRoles > 0 && o.Roles-o.KilledRoles < o.Members-1 {
		return nil, fmt.Errorf("bench failover-many: %d roles, %d of them the killed member's: need a role for each of the %d others",
			o.Roles, o.KilledRoles, o.Members-1)
	}
	if o.Grace <= 0 {
		o.Grace = o.Settings.LeaseDuration
	}
	if o.Wait <= 0 {
		o.Wait = Wait
	}
	prefix := "bench-fm-" + o.Run + "-"
	procs := make([]*proc, 0, o.Members)
	defer func() {
		for _, p := range procs {
			if p != nil {
				p.leave(Wait)
			}
		}
	}()
	settle := o.Settings.LeaseDuration + 11*Wait
	for i := range o.Members {
		from, count := o.share(i)
		name := codec.MemberID(fmt.Sprintf("bench-fm-%s-m%d", o.Run, i))
		c.progress("failover-many: starting member %d/%d (%d roles of its own, a candidate of %d)", i+1, o.Members, count, from)
		spec := memberSpec{name: name, prefix: prefix, from: 0, count: from + count, own: count, s: o.Settings, events: true}
		if i == 1 {
			spec.cpuProfile = o.SurvivorCPUProfile
		}
		p, err := c.start(spec)
		if err != nil {
			return nil, err
		}
		procs = append(procs, p)
		if _, err := p.next(ctx, "steady", settle); err != nil {
			return nil, err
		}
	}
	// Who holds what at the kill, from the members' own events.
	heldBy := func(p *proc) map[codec.Role]bool {
		h := map[codec.Role]bool{}
		for _, e := range p.takeEvents() {
			if e.Event == "elected" {
				h[e.Role] = true
			} else {
				delete(h, e.Role)
			}
		}
		return h
	}
	victim := procs[0]
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	// One heartbeat interval, so that every survivor (the last started
	// just now) has seen each of the victim's leases renewed since it
	// joined (it counts a lease from its own first sight of it: one it
	// never saw renewed would fall due later for it), then a random
	// phase of the heartbeat interval, as a crash would have.
	if err := ctxcall.Sleep(ctx, o.Settings.HeartbeatInterval+rand.N(o.Settings.HeartbeatInterval)); err != nil {
		return nil, err
	}
	dead := heldBy(victim)
	own := make([]map[codec.Role]bool, len(procs))
	for i, p := range procs[1:] {
		own[i+1] = heldBy(p)
	}
	if len(dead) == 0 {
		return nil, fmt.Errorf("bench failover-many: %s holds no role to fail over", victim.name)
	}
	roles := make([]codec.Role, 0, len(dead))
	for r := range dead {
		roles = append(roles, r)
	}
	changes := c.View.Watch(wctx, roles...)
	// The victim's last lease of each role, and the survivors' first:
	// from a snapshot taken after the Watch began, then from the changes.
	// A lease naming the victim's member session falls due one span after
	// the later of its own grant and the session's last heartbeat (due,
	// below).
	deadLease := map[codec.Role]codec.Lease{}
	newLease := map[codec.Role]codec.Lease{}
	shown := map[codec.Role]time.Time{}
	seen := func(role codec.Role, l *codec.Lease, at time.Time) {
		switch {
		case !dead[role] || l == nil || l.Released():
		case l.Member == victim.name:
			deadLease[role] = *l
		default:
			if _, ok := shown[role]; !ok {
				shown[role], newLease[role] = at, *l
			}
		}
	}
	states, err := c.View.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	c.progress("failover-many: SIGKILL %s, which holds %d roles", victim.name, len(dead))
	killed := time.Now()
	for _, st := range states {
		seen(st.Role, st.Lease, killed) // a survivor's already: the victim lost it before the kill
	}
	if err := victim.kill(); err != nil {
		return nil, fmt.Errorf("SIGKILL %s: %w", victim.name, err)
	}
	// Its holdings end when it is gone; reaped is later than that, by
	// little, so an overlap with it is not missed.
	select {
	case <-victim.child.Done():
	case <-time.After(5 * time.Second):
	}
	diedUS := time.Now().UnixMicro()
	if o.SurvivorCPUProfile != "" {
		// A window profiles the member; its report line is not read.
		if err := procs[1].send("window " + (o.Settings.LeaseDuration + o.Wait).String()); err != nil {
			return nil, err
		}
	}
	bound := time.NewTimer(o.Settings.LeaseDuration + o.Wait)
	defer bound.Stop()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	beatPoll := time.NewTicker(100 * time.Millisecond)
	defer beatPoll.Stop()
	beatSeen := make([]time.Time, len(procs))
	beatGap := make([]time.Duration, len(procs))
watch:
	for len(shown) < len(dead) {
		select {
		case ch, ok := <-changes:
			if !ok {
				return nil, fmt.Errorf("bench failover-many: the bench's view stopped")
			}
			seen(ch.Role, ch.After.Lease, time.Now())
		case <-tick.C:
			c.progress("failover-many: %d of %d roles held again", len(shown), len(dead))
			for _, p := range procs[1:] {
				select {
				case <-p.child.Done():
					return nil, fmt.Errorf("%w: %s exited %s after the kill: %s", errMemberExit, p.name, supervise.ExitText(p.child.ExitCode()), p.stderr.last())
				default:
				}
			}
		case <-beatPoll.C:
			for i, p := range procs[1:] {
				se, ok, err := c.View.Session(ctx, p.name)
				if err != nil || !ok || !se.SeenAt.After(beatSeen[i+1]) {
					continue
				}
				if !beatSeen[i+1].IsZero() {
					beatGap[i+1] = max(beatGap[i+1], se.SeenAt.Sub(beatSeen[i+1]))
				}
				beatSeen[i+1] = se.SeenAt
			}
		case <-bound.C:
			break watch
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	stopWatch()
	c.progress("failover-many: %d of %d roles held again; watching for %v more", len(shown), len(dead), o.Grace)
	if err := ctxcall.Sleep(ctx, o.Grace); err != nil {
		return nil, err
	}
	res := &FailoverManyResult{Result: chart.Result{Kind: "failover-many", System: "krole"}, KilledRoles: len(dead), HeldAgain: len(shown)}
	var last time.Time
	first := time.Time{}
	for _, at := range shown {
		res.SamplesMS = append(res.SamplesMS, float64(at.Sub(killed).Microseconds())/1000)
		if at.After(last) {
			last = at
		}
		if first.IsZero() || at.Before(first) {
			first = at
		}
	}
	if !last.IsZero() {
		res.FailoverS = last.Sub(killed).Seconds()
		res.FirstS = first.Sub(killed).Seconds()
	}
	// The survivors' events after the kill: elections of the dead
	// member's roles (each should be taken once), and losses of their
	// own.
	elections := map[codec.Role]int{}
	electors := map[codec.Role]map[codec.MemberID]bool{}
	res.SurvivorsLostBy, res.RevokedBy = map[string]int{}, map[string]int{}
	var electedAt []int64
	killedUS := killed.UnixMicro()
	res.Members = append(res.Members, FailoverMember{Member: victim.name, HeldAtKill: len(dead)})
	endUS := time.Now().UnixMicro()
	holdings := Holdings(victim.name, victim.takeEvents(), diedUS)
	for _, p := range procs[1:] {
		holdings = append(holdings, Holdings(p.name, p.takeEvents(), endUS)...)
	}
	if ov, n := LongestOverlap(holdings); n > 0 {
		res.LongestOverlap, res.OverlapRoles, res.LongestOverlapMS = &ov, n, float64(ov.US)/1000
	}
	for i, p := range procs[1:] {
		f := FailoverMember{Member: p.name, HeldAtKill: len(own[i+1]), RevokedBy: map[string]int{},
			HeartbeatGapMaxMS: float64(beatGap[i+1].Microseconds()) / 1000}
		held := map[codec.Role]bool{}
		for r := range own[i+1] {
			held[r] = true
		}
		for _, e := range p.takeEvents() {
			if e.AtUS < killedUS {
				continue
			}
			switch e.Event {
			case "elected":
				held[e.Role] = true
				if dead[e.Role] {
					elections[e.Role]++
					if electors[e.Role] == nil {
						electors[e.Role] = map[codec.MemberID]bool{}
					}
					electors[e.Role][p.name] = true
					electedAt = append(electedAt, e.AtUS)
					f.Acquired++
					at := float64(e.AtUS-killedUS) / 1e6
					if f.Acquired == 1 || at < f.AcquiredFirstS {
						f.AcquiredFirstS = at
					}
					f.AcquiredLastS = max(f.AcquiredLastS, at)
				}
			case "revoked":
				delete(held, e.Role)
				res.RevokedBy[e.Reason]++
				f.RevokedBy[e.Reason]++
				if own[i+1][e.Role] {
					res.SurvivorsLostBy[e.Reason]++
					res.SurvivorsLost++
					f.Lost++
				}
			}
		}
		f.HeldAtEnd = len(held)
		res.Members = append(res.Members, f)
	}
	for _, m := range electors {
		if len(m) > 1 {
			res.ElectedByTwo++
		}
	}
	var twice []codec.Role
	for r, n := range elections {
		res.ElectionsMax = max(res.ElectionsMax, n)
		if n > 1 {
			res.AcquiredTwice++
			twice = append(twice, r)
		}
	}
	sort.Slice(twice, func(i, j int) bool { return twice[i] < twice[j] })
	traced := map[codec.Role]bool{}
	for _, r := range twice[:min(len(twice), tracedRoles)] {
		traced[r] = true
	}
	if res.LongestOverlap != nil {
		traced[res.LongestOverlap.Role] = true
	}
	if len(traced) > 0 {
		res.Traces = map[codec.Role][]TracedEvent{}
		for _, p := range procs {
			for _, e := range p.takeEvents() {
				if traced[e.Role] {
					res.Traces[e.Role] = append(res.Traces[e.Role], TracedEvent{Member: p.name, Event: e.Event, AtUS: e.AtUS, Reason: e.Reason})
				}
			}
		}
		for _, evs := range res.Traces {
			sort.SliceStable(evs, func(i, j int) bool { return evs[i].AtUS < evs[j].AtUS })
		}
	}
	sort.Slice(electedAt, func(i, j int) bool { return electedAt[i] < electedAt[j] })
	if n := len(electedAt); n > 1 && electedAt[n-1] > electedAt[0] {
		res.AcquisitionRate = float64(n-1) / (float64(electedAt[n-1]-electedAt[0]) / 1e6)
		res.BoundS = o.Settings.LeaseDuration.Seconds() + float64(len(dead))/res.AcquisitionRate
	}
	// The victim's last heartbeat: its leases that name that session
	// were live until its deadline.
	beat := LastBeat(ctx, c.View, victim.name)
	due := func(l codec.Lease) int64 { return LeaseDue(l, beat) }
	var past []float64
	var firstDue, lastDue int64
	for r, nl := range newLease {
		if dl, ok := deadLease[r]; ok {
			past = append(past, float64(nl.GrantedAt-due(dl)))
		}
	}
	for _, dl := range deadLease {
		if d := due(dl); firstDue == 0 || d < firstDue {
			firstDue = d
		}
		lastDue = max(lastDue, due(dl))
	}
	if len(past) > 0 {
		res.PastDeadline = chart.NewDist(past)
	}
	res.DueSpreadS = float64(lastDue-firstDue) / 1000
	res.Violations = res.AcquiredTwice + res.SurvivorsLost + res.OverlapRoles + (res.KilledRoles - res.HeldAgain)
	res.Stats = chart.Summarize(res.SamplesMS)
	res.Settings = map[string]any{
		"roles": o.Roles, "members": o.Members, "killed_roles": o.KilledRoles, "lease_duration": o.Settings.LeaseDuration.String(),
		"heartbeat_interval": o.Settings.HeartbeatInterval.String(), "stagger": o.Settings.Stagger.String(), "grace": o.Grace.String(), "wait": o.Wait.String(),
		"killed": string(victim.name), "signal": "SIGKILL",
		"samples": "per role of the killed member: from the SIGKILL to the bench's view showing a survivor's lease of it",
		"past_deadline": "per role: the survivor's lease's granted_at minus when the killed member's last lease fell due, the later of " +
			"its deadline and that of the killed session's last heartbeat (ms, this machine's clock)",
		"elections": "from the survivors' own Elected and Revoked events after the kill (their clocks: this machine's)",
		"overlap":   "from every member's Elected and Revoked events over the whole run, the killed member's holdings ending when it was reaped",
	}
	return res, nil
}

// share is member i's own roles, [from, from+count): its Roles / Members,
// or, with KilledRoles set, KilledRoles for member 0 and a share of the
// rest for the others.
func (o FailoverManyOptions) share(i int) (from, count int) {
	if o.KilledRoles <= 0 {
		return memberSplit(o.Roles, o.Members, i)
	}
	if i == 0 {
		return 0, o.KilledRoles
	}
	from, count = memberSplit(o.Roles-o.KilledRoles, o.Members-1, i-1)
	return o.KilledRoles + from, count
}

// LastBeat returns member's latest heartbeat as v shows it; nil when it
// has none, or its latest session record is a session end.
func LastBeat(ctx context.Context, v *view.View, member codec.MemberID) *codec.Heartbeat {
	if se, ok, err := v.Session(ctx, member); err == nil && ok && !se.Heartbeat.End {
		return &se.Heartbeat
	}
	return nil
}

// LeaseDue returns when the lease l of a member that died fell due (Unix
// ms, the writers' clocks): l's deadline, or that of the member's last
// heartbeat (beat, nil for none) when beat is of the session l names,
// whichever is later. A holder's lease is written at its election (and
// hourly); its session's heartbeats keep it alive after that.
func LeaseDue(l codec.Lease, beat *codec.Heartbeat) int64 {
	if beat != nil && l.Session != nil && l.Session.Nonce == beat.Session.Nonce {
		return max(l.Deadline, beat.Deadline)
	}
	return l.Deadline
}
