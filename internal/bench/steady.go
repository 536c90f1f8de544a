package bench

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/chart"
	"github.com/krabka/krole/internal/supervise"
	"github.com/krabka/krole/processor"
)

// SteadyOptions are a `krole bench steady` run.
type SteadyOptions struct {
	// Members: `krole run ROLE -- sleep 3600` processes that campaign
	// for the role.
	Members  int
	Settings processor.Settings
	// Duration is the window watched once the role is held.
	Duration time.Duration
	// Run tags the role and member names.
	Run string
}

// SteadyResult is the -o json object of `krole bench steady`: the common
// fields (the samples are the gaps between consecutive renewals and
// elections of the window, by their granted_at, in ms) and the counts of
// the window, from the role topic.
type SteadyResult struct {
	chart.Result
	// Renewals are the heartbeats of the holder's member session that
	// vouched for the role in the window, and its lease rewrites under
	// its token.
	Renewals int `json:"renewals"`
	// Elections are the leases of the window written under a new token:
	// each one is a member taking the role. None was asked for.
	Elections int `json:"elections"`
	// Handovers are the elections that moved the role to another member.
	Handovers int `json:"handovers"`
	// Releases are released leases in the window (a member resigning).
	Releases int `json:"releases"`
	// EpochsWithoutLease are epochs of the role's producer id that no
	// lease of the window carries: a challenge that fenced the holder and
	// then wrote no lease.
	EpochsWithoutLease int `json:"epochs_without_lease"`
	// (Rounds, in the common fields, has one object per election: its
	// offset, the gap since the renewal or election before it, its epoch
	// step and whether it was a handover, 1 or 0.)

	// Needless is Elections + Releases + EpochsWithoutLease: every change
	// of holder or epoch, none of which anyone asked for. The command
	// exits 1 when it is not 0.
	Needless int `json:"needless"`
	// MaxRenewGapMS is the longest gap between consecutive renewals or
	// elections (granted_at), against the lease duration.
	MaxRenewGapMS float64 `json:"max_renew_gap_ms"`
	// LoadAvg is /proc/loadavg at the start and at the end.
	LoadAvg []string `json:"loadavg,omitempty"`
	// Said is each member's last lines at the end of the window (they
	// run without --verbose, so these are its transitions), for the
	// person reading why a change was needless; not in the JSON.
	Said map[codec.MemberID]string `json:"-"`
}

// loadAvg is /proc/loadavg's first three figures, "" where there is none.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// Steady runs `krole bench steady`: o.Members members campaign for a
// role; once one holds it with all of them queued and its renewal shows
// after the joins, the window of o.Duration begins, in which nobody
// resigns or dies. Then it reads the role's records and its holders'
// member sessions from the topic (read_committed) and counts the window
// (countSteady). A member that exits in the window ends the run with an
// error.
func Steady(ctx context.Context, c Cluster, o SteadyOptions) (*SteadyResult, error) {
	s, d, n := o.Settings, o.Duration, o.Members
	if n < 1 || d <= 0 {
		return nil, fmt.Errorf("bench steady: %d members for %v: need a member and a duration", n, d)
	}
	role := codec.Role("bench-steady-" + o.Run)
	f := c.follow(ctx, role)
	defer f.close() // every member leaves before the cluster stops
	for i := range n {
		name := codec.MemberID(fmt.Sprintf("bench-%s-%d", o.Run, i+1))
		m, err := c.startRun(role, name, s, false, false)
		if err != nil {
			return nil, err
		}
		f.members[name] = m
	}
	// The window starts at the holder's first renewal that every member
	// saw written (as failover's rounds do).
	if err := f.awaitSettled("a holder and every member in the queue", n, s); err != nil {
		return nil, err
	}
	start, first := f.state.LeaseOffset, *f.state.Lease
	loads := []string{loadAvg()}
	began := time.Now()
	end := time.NewTimer(d)
	defer end.Stop()
	progress := time.NewTicker(time.Second)
	defer progress.Stop()
	seenElections := 0
	last := first.Token
watch:
	for {
		select {
		case st, open := <-f.states:
			if !open {
				if err := ctx.Err(); err != nil {
					return nil, err
				}
				return nil, fmt.Errorf("the view of the role topic stopped")
			}
			f.state = st
			if st.Lease != nil && st.Lease.Token != last {
				last = st.Lease.Token
				seenElections++
			}
		case <-progress.C:
			for name, m := range f.members {
				if m.child.Gone() {
					return nil, fmt.Errorf("%w: %s exited %s: %s", errMemberExit, name, supervise.ExitText(m.child.ExitCode()), m.out.last())
				}
			}
			c.progress("steady: %v of %v, holder changes seen so far %d", time.Since(began).Truncate(time.Second), d, seenElections)
		case <-end.C:
			break watch
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	loads = append(loads, loadAvg())
	c.endProgress()

	bt, err := c.Connect("krole-bench-steady", 0)
	if err != nil {
		return nil, err
	}
	defer bt.Close()
	recs, err := bt.ReadRoleRecords(ctx, role)
	if err != nil {
		return nil, fmt.Errorf("reading the role's records: %w", err)
	}
	beats := map[codec.MemberID][]fencing.RoleRecord{}
	for _, r := range append(recs, fencing.RoleRecord{Offset: start + 1, Record: codec.Record{Lease: &first}}) {
		if l := r.Record.Lease; r.Offset > start && l != nil && l.Session != nil && beats[l.Member] == nil {
			if beats[l.Member], err = bt.ReadSession(ctx, l.Member); err != nil {
				return nil, fmt.Errorf("reading %s's member session: %w", l.Member, err)
			}
		}
	}
	res := countSteady(role, recs, beats, start, first)
	res.Kind, res.System = "steady", "krole"
	res.Settings = map[string]any{
		"members": n, "duration": d.String(), "lease_duration": s.LeaseDuration.String(),
		"heartbeat_interval": s.HeartbeatInterval.String(), "stagger": s.Stagger.String(),
	}
	res.Stats = chart.Summarize(res.SamplesMS)
	res.LoadAvg = loads
	res.Said = map[codec.MemberID]string{}
	for name, m := range f.members {
		res.Said[name] = m.out.lastLines(8)
	}
	return &res, nil
}

// countSteady counts the window's lease records, those at offset start
// (first, the holder's lease that opens the window) and after, and the
// renewals of its holdings: a lease rewritten under its token, or a
// heartbeat of the member session a lease names (beats holds each
// holder's session records) that vouches for role, granted after that
// lease and before the next lease record. The samples are the gaps
// between consecutive renewals and elections, by granted_at; an
// election's gap_ms is its gap to the renewal or election before it.
func countSteady(role codec.Role, recs []fencing.RoleRecord, beats map[codec.MemberID][]fencing.RoleRecord, start int64, first codec.Lease) SteadyResult {
	type lease struct {
		off int64
		l   codec.Lease
	}
	window := []lease{{start, first}}
	for _, r := range recs {
		if l := r.Record.Lease; r.Offset > start && l != nil {
			window = append(window, lease{r.Offset, *l})
		}
	}
	type event struct {
		at    int64
		round int // index in Rounds for an election, else -1
	}
	var res SteadyResult
	var events []event
	prev := first
	epochs := map[int16]bool{first.Token.Epoch: true}
	for i, w := range window {
		l := w.l
		if i > 0 {
			switch {
			case l.Released():
				res.Releases++
			case l.Token == prev.Token:
				res.Renewals++
				events = append(events, event{at: l.GrantedAt, round: -1})
			default:
				res.Elections++
				events = append(events, event{at: l.GrantedAt, round: len(res.Rounds)})
				ev := map[string]float64{"offset": float64(w.off), "epoch_step": float64(l.Token.Epoch - prev.Token.Epoch), "handover": 0}
				if l.Member != prev.Member {
					res.Handovers++
					ev["handover"] = 1
				}
				res.Rounds = append(res.Rounds, ev)
			}
			if l.Released() {
				continue
			}
			if l.Token.ProducerID == first.Token.ProducerID {
				epochs[l.Token.Epoch] = true
			}
			prev = l
		}
		// The heartbeats that renewed l while it was the latest lease.
		if l.Session == nil {
			continue
		}
		until := int64(math.MaxInt64)
		if i+1 < len(window) {
			until = window[i+1].l.GrantedAt
		}
		for _, b := range beats[l.Member] {
			hb := b.Record.Heartbeat
			if hb == nil || hb.End || hb.GrantedAt <= l.GrantedAt || hb.GrantedAt >= until ||
				!hb.Session.Keeps(*l.Session) || slices.Contains(hb.Excluded, role) {
				continue
			}
			res.Renewals++
			events = append(events, event{at: hb.GrantedAt, round: -1})
		}
	}
	slices.SortStableFunc(events, func(a, b event) int { return cmp.Compare(a.at, b.at) })
	at := first.GrantedAt
	for _, e := range events {
		gap := float64(e.at - at)
		res.SamplesMS = append(res.SamplesMS, gap)
		if e.round >= 0 {
			res.Rounds[e.round]["gap_ms"] = gap
		}
		at = e.at
	}
	// Epochs of the producer id between the first and the last that no
	// lease carries. (A new producer id, after an epoch overflow, counts
	// as an election above.)
	var es []int
	for e := range epochs {
		es = append(es, int(e))
	}
	sort.Ints(es)
	if len(es) > 0 {
		res.EpochsWithoutLease = es[len(es)-1] - es[0] + 1 - len(es)
	}
	res.Needless = res.Elections + res.Releases + res.EpochsWithoutLease
	for _, g := range res.SamplesMS {
		res.MaxRenewGapMS = max(res.MaxRenewGapMS, g)
	}
	return res
}
