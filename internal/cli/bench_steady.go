package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/chart"
)

// steadyResult is the -o json object of `krole bench steady`: the common
// fields (the samples are the gaps between consecutive renewals and
// elections of the window, by their granted_at, in ms) and the counts of
// the window, from the role topic.
type steadyResult struct {
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
}

func benchSteadyCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "steady",
		Usage: "N member processes hold a role for T: count elections and handovers (any is needless); exit 1 if any",
		UsageText: "krole bench steady [--members N] [--lease-duration D] [--renew-interval D] [--duration T]\n" +
			"   (to find the smallest safe lease on a loaded machine)",
		Description: "Starts N 'krole run ROLE -- sleep 3600' members, waits until one holds the role\n" +
			"and all N are candidates, then lets them be for T. Nobody resigns or dies, so\n" +
			"every change of holder or epoch in that window is needless: a lease that ran\n" +
			"out because a renewal, or a candidate's view of it, came too late. At the end\n" +
			"it reads the role's records and its holders' member sessions from the topic\n" +
			"(read_committed) and counts, over the window: renewals (the holder's\n" +
			"heartbeats that vouched for the role), elections (leases under a new token), handovers\n" +
			"(elections that moved the role to another member), releases, and epochs that\n" +
			"no lease carries (a challenge that fenced the holder and wrote nothing). The\n" +
			"samples are the gaps between consecutive renewals and elections (their\n" +
			"granted_at). It\n" +
			"exits 1 when any needless change happened (after the members' last lines on\n" +
			"stderr), or when a member exited.",
		Flags: []ucli.Flag{
			&ucli.IntFlag{Name: "members", Value: benchMembers, Usage: "`N` member processes campaign for the role"},
			&ucli.DurationFlag{Name: "lease-duration", Value: benchLease, Usage: "the members' lease, `D`"},
			&ucli.DurationFlag{Name: "renew-interval", DefaultText: "lease duration / 5", Usage: "the members' renew interval, `D`"},
			&ucli.DurationFlag{Name: "duration", Value: time.Minute, Usage: "watch the role for `T` once it is held"},
			&ucli.StringFlag{Name: "label", Hidden: true, Usage: "the run's label"},
		},
		Action: runBenchSteady,
	}
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

// runBenchSteady runs `krole bench steady`.
func runBenchSteady(c *ucli.Context) error {
	var n int
	d := c.Duration("duration")
	s, e, err := startBench(c, func() (err error) {
		if n, err = positive(c, "members"); err != nil {
			return err
		}
		if d <= 0 {
			return Usagef(c, "--duration %v: must be positive", d)
		}
		return nil
	})
	if err != nil {
		return err
	}
	defer e.close()
	ctx, cancel := context.WithCancel(context.WithoutCancel(c.Context))
	defer cancel()
	role := codec.Role("bench-steady-" + e.run)
	f := e.follow(ctx, role)
	defer func() { // every member leaves before the cluster stops
		for _, m := range f.members {
			f.asked[m.name] = true
			if !exitedChild(m.child) {
				_, _ = m.child.Stop(context.Background(), 5*time.Second)
			}
		}
	}()
	for i := range n {
		name := codec.MemberID(fmt.Sprintf("bench-%s-%d", e.run, i+1))
		m, err := e.startMember(role, name, s, false)
		if err != nil {
			return err
		}
		f.members[name] = m
	}
	// The window starts at the holder's first renewal that every member
	// saw written (as failover's rounds do).
	if err := f.awaitSettled("a holder and every member in the queue", n, s); err != nil {
		return err
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
				if err := e.ctx.Err(); err != nil {
					return err
				}
				return fmt.Errorf("the view of the role topic stopped")
			}
			f.state = st
			if st.Lease != nil && st.Lease.Token != last {
				last = st.Lease.Token
				seenElections++
			}
		case <-progress.C:
			for name, m := range f.members {
				if exitedChild(m.child) {
					return fmt.Errorf("%w: %s exited %s: %s", errBenchMemberExit, name, exitText(m.child.ExitCode()), m.out.last())
				}
			}
			e.progress("steady: %v of %v, holder changes seen so far %d", time.Since(began).Truncate(time.Second), d, seenElections)
		case <-end.C:
			break watch
		case <-e.ctx.Done():
			return e.ctx.Err()
		}
	}
	loads = append(loads, loadAvg())
	fmt.Fprintln(e.errOut)

	cfg := e.cfg
	cfg.ClientID = "krole-bench-steady"
	bt, err := fencing.NewBrokerTransport(cfg)
	if err != nil {
		return explainRunError(cfg, err)
	}
	defer bt.Close()
	recs, err := bt.ReadRoleRecords(c.Context, role)
	if err != nil {
		return fmt.Errorf("reading the role's records: %w", err)
	}
	beats := map[codec.MemberID][]fencing.RoleRecord{}
	for _, r := range append(recs, fencing.RoleRecord{Offset: start + 1, Record: codec.Record{Lease: &first}}) {
		if l := r.Record.Lease; r.Offset > start && l != nil && l.Session != nil && beats[l.Member] == nil {
			if beats[l.Member], err = bt.ReadSession(c.Context, l.Member); err != nil {
				return fmt.Errorf("reading %s's member session: %w", l.Member, err)
			}
		}
	}
	res := countSteady(role, recs, beats, start, first)
	res.Kind, res.System, res.Label = "steady", "krole", c.String("label")
	res.Settings = map[string]any{
		"members": n, "duration": d.String(), "lease_duration": s.LeaseDuration.String(),
		"renew_interval": s.RenewInterval.String(), "stagger": s.Stagger.String(), "cluster": e.clusterName(),
	}
	res.Stats = chart.Summarize(res.SamplesMS)
	res.LoadAvg = loads
	if outputFormat(c) == FormatJSON {
		if err := json.NewEncoder(stdout(c)).Encode(res); err != nil {
			return err
		}
	} else {
		chart.WriteText(stdout(c), res.Result)
		fmt.Fprintf(stdout(c), "%-16s renewals %d  elections %d  handovers %d  releases %d  epochs without lease %d  needless %d  "+
			"max renew gap %.0f ms of a %v lease\n", "", res.Renewals, res.Elections, res.Handovers, res.Releases,
			res.EpochsWithoutLease, res.Needless, res.MaxRenewGapMS, s.LeaseDuration)
		for _, ev := range res.Rounds {
			fmt.Fprintf(stdout(c), "%-16s election at offset %.0f, %.0f ms after the renewal before it, epoch +%.0f, handover %v\n",
				"", ev["offset"], ev["gap_ms"], ev["epoch_step"], ev["handover"] == 1)
		}
	}
	if res.Needless > 0 {
		// What the members said (transitions only: they run without
		// --verbose, so their last lines are the changes).
		for _, m := range f.members {
			fmt.Fprintf(e.errOut, "%s said: %s\n", m.name, strings.ReplaceAll(strings.TrimSpace(m.out.tail(8)), "\n", " | "))
		}
		return ucli.Exit(fmt.Sprintf("bench steady: %d needless change(s) of holder or epoch in %v at lease %v",
			res.Needless, d, s.LeaseDuration), 1)
	}
	return nil
}

// countSteady counts the window's lease records, those at offset start
// (first, the holder's lease that opens the window) and after, and the
// renewals of its holdings: a lease rewritten under its token, or a
// heartbeat of the member session a lease names (beats holds each
// holder's session records) that vouches for role, granted after that
// lease and before the next lease record. The samples are the gaps
// between consecutive renewals and elections, by granted_at; an
// election's gap_ms is its gap to the renewal or election before it.
func countSteady(role codec.Role, recs []fencing.RoleRecord, beats map[codec.MemberID][]fencing.RoleRecord, start int64, first codec.Lease) steadyResult {
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
	var res steadyResult
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
