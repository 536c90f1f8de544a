package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"syscall"
	"time"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/chart"
	"github.com/krabka/krole/internal/ctxcall"
	"github.com/krabka/krole/processor"
	"github.com/krabka/krole/rolestate"
)

// SuccessionOptions are a `krole bench failover` or `krole bench
// handover` run.
type SuccessionOptions struct {
	// Kind is "failover" (the holder's process is SIGKILLed) or
	// "handover" (SIGTERMed: it resigns).
	Kind string
	// Members: `krole run` processes that campaign for the role, at
	// least 2.
	Members int
	// Rounds: one signal to the holder, one sample, each.
	Rounds   int
	Settings processor.Settings
	// Lock: the members run no command ('krole run ROLE', held until
	// interrupted, as etcd's candidates run none) instead of 'krole run
	// ROLE -- sleep 3600'.
	Lock bool
	// Trace: the members log verbosely, and each round's member steps
	// are timed by when their lines reach the bench (phases "trace A ->
	// B"; each line's trip adds a little).
	Trace bool
	// Run tags the role and member names.
	Run string
}

// Succession runs `krole bench failover` or `krole bench handover`:
// o.Members `krole run` processes campaign for a role; each round, once
// the holder's renewal shows after the last join, the holder's process
// gets the signal at a random phase of the heartbeat interval, and the
// sample is the time from the signal to the new holder's lease showing
// in c.View. The holder then joins again, at the back of the queue,
// under the same name.
func Succession(ctx context.Context, c Cluster, o SuccessionOptions) (*chart.Result, error) {
	kind, s := o.Kind, o.Settings
	if kind != "failover" && kind != "handover" {
		return nil, fmt.Errorf("bench succession: kind %q: failover or handover", kind)
	}
	if o.Members < 2 || o.Rounds < 1 {
		return nil, fmt.Errorf("bench %s: %d members, %d rounds: need 2 members and a round", kind, o.Members, o.Rounds)
	}
	traced := map[string][]float64{}
	role := codec.Role("bench-" + kind + "-" + o.Run)
	f := c.follow(ctx, role)
	defer f.close() // every member leaves before the cluster stops
	join := func(name codec.MemberID) error {
		m, err := c.startRun(role, name, s, o.Lock, o.Trace)
		if err != nil {
			return err
		}
		f.members[name] = m
		f.asked[name] = false
		_, err = f.await(fmt.Sprintf("%s to join the queue", name), Wait, func(st rolestate.State) bool {
			return st.Rank(name) >= 0
		}, nil)
		return err
	}
	for i := range o.Members {
		if err := join(codec.MemberID(fmt.Sprintf("bench-%s-%d", o.Run, i+1))); err != nil {
			return nil, err
		}
	}
	var samples, past, release, successor, lastLag, newLag []float64
	var detail []map[string]float64
	for r := range o.Rounds {
		if err := f.awaitSettled("a holder", o.Members, s); err != nil {
			return nil, err
		}
		// A random phase of the heartbeat interval, as a crash or a shutdown
		// would have. (Right after a renewal shows, the holder may still
		// wait for its EndTxn's answer: a SIGTERM then cancels the
		// renewal, which retires the token, and there is no release.)
		if err := ctxcall.Sleep(ctx, rand.N(s.HeartbeatInterval)); err != nil {
			return nil, err
		}
		old := *f.state.Lease
		holder := f.members[old.Member]
		sig := syscall.SIGTERM
		if kind == "failover" {
			sig = syscall.SIGKILL
		}
		f.asked[holder.name] = true
		last := old // the dead holder's last lease the view showed
		var released time.Time
		lastSeen := f.state.LeaseSeenAt
		sent := time.Now()
		if err := syscall.Kill(holder.child.Pid(), sig); err != nil {
			return nil, fmt.Errorf("signalling %s (pid %d): %w", holder.name, holder.child.Pid(), err)
		}
		at, err := f.await("a new holder", s.LeaseDuration+Wait, func(st rolestate.State) bool {
			return unreleased(st) && st.Lease.Member != holder.name && st.Lease.Token.Newer(old.Token)
		}, func(st rolestate.State) {
			if st.Lease != nil && st.Lease.Member == holder.name && !st.Lease.Released() {
				last, lastSeen = *st.Lease, st.LeaseSeenAt
			}
			if st.Lease != nil && st.Lease.Member == holder.name && released.IsZero() &&
				(st.Lease.Released() || st.SessionVouch() == rolestate.Dropped) {
				released = time.Now() // a release, or the end of the session the lease names
			}
		})
		if err != nil {
			return nil, err
		}
		samples = append(samples, ms(at.Sub(sent)))
		if kind == "failover" {
			// Past the dead lease's due time: its deadline, or its
			// session's last heartbeat's, which kept it alive.
			past = append(past, float64(f.state.Lease.GrantedAt-LeaseDue(last, LastBeat(ctx, c.View, holder.name))))
			if !lastSeen.IsZero() {
				lastLag = append(lastLag, float64(lastSeen.UnixMilli()-last.GrantedAt))
			}
			newLag = append(newLag, float64(at.UnixMilli()-f.state.Lease.GrantedAt))
		}
		if !released.IsZero() {
			release = append(release, ms(released.Sub(sent)))
			successor = append(successor, ms(at.Sub(released)))
		}
		round := map[string]float64{"ms": samples[len(samples)-1]}
		if kind == "failover" {
			round["past_deadline_ms"] = past[len(past)-1]
			round["new_lease_write_to_view_ms"] = newLag[len(newLag)-1]
			if !lastSeen.IsZero() {
				round["last_lease_write_to_view_ms"] = lastLag[len(lastLag)-1]
			}
		}
		if !released.IsZero() {
			round["signal_to_release_shows_ms"] = release[len(release)-1]
		}
		succ := f.members[f.state.Lease.Member]
		detail = append(detail, round)
		c.progress("%s round %d/%d: %.2f ms", kind, r+1, o.Rounds, samples[len(samples)-1])
		select {
		case <-holder.child.Done():
		case <-time.After(Wait):
			return nil, fmt.Errorf("%s (pid %d) did not exit within %v of the signal", holder.name, holder.child.Pid(), Wait)
		}
		if o.Trace && succ != nil {
			// Now that the holder has exited, its lines of the round have
			// come; the successor's "elected" line may still be in its
			// pipe when the bench's view shows its lease, so wait for it,
			// and for its CMD's start, which comes later (bounded: a round
			// without one is traced without that step).
			succ.out.awaitLineAfter(sent, "info: elected", Wait)
			if !o.Lock {
				succ.out.awaitLineAfter(sent, ") with token", Wait) // its CMD's start
			}
			traceRound(round, traced, holder, succ, sent, released, at)
		}
		if kind == "handover" && released.IsZero() {
			c.logf("\nhandover round %d: %s wrote no release the view showed; it said: %s\n",
				r+1, holder.name, strings.ReplaceAll(strings.TrimSpace(holder.out.lastLines(6)), "\n", " | "))
		}
		delete(f.members, holder.name)
		// Back, at the back of the queue, under the same name.
		if _, err := f.await(fmt.Sprintf("%s to leave the queue", holder.name), s.LeaseDuration+Wait, func(st rolestate.State) bool {
			return st.Rank(holder.name) < 0
		}, nil); err != nil {
			return nil, err
		}
		if err := join(holder.name); err != nil {
			return nil, err
		}
	}
	c.endProgress()
	res := &chart.Result{Kind: kind, System: "krole", SamplesMS: samples, Settings: map[string]any{
		"members": o.Members, "rounds": o.Rounds, "lease_duration": s.LeaseDuration.String(),
		"heartbeat_interval": s.HeartbeatInterval.String(), "stagger": s.Stagger.String(),
		"signal":      map[bool]string{true: "SIGKILL", false: "SIGTERM"}[kind == "failover"],
		"members_run": map[bool]string{true: "no command (krole run ROLE)", false: "a command (krole run ROLE -- sleep 3600)"}[o.Lock],
	}}
	res.Stats = chart.Summarize(res.SamplesMS)
	res.Rounds = detail
	if kind == "failover" {
		res.PastDeadline = chart.NewDist(past)
		// Whole milliseconds (leases carry Unix ms): the bench's view saw
		// the dead holder's last lease this long after its write began, and
		// the new holder's likewise.
		res.Phases = map[string]*chart.Dist{"last_lease_write_to_view": chart.NewDist(lastLag),
			"new_lease_write_to_view": chart.NewDist(newLag)}
	}
	if len(release) > 0 {
		// signal -> the release shows in the bench's view (the holder stops
		// its command and writes the release), then -> the successor's
		// lease shows (it sees the release, confirms, takes the epoch and
		// writes its lease, and the bench's view reads it).
		res.Phases = map[string]*chart.Dist{"signal_to_release_shows": chart.NewDist(release),
			"release_to_new_lease_shows": chart.NewDist(successor)}
	}
	if len(traced) > 0 && res.Phases == nil {
		res.Phases = map[string]*chart.Dist{}
	}
	for k, v := range traced {
		res.Phases[k] = chart.NewDist(v)
	}
	return res, nil
}

// traceSteps are the member lines --trace times, in the order they come in
// a handover: the holder's (h) and the successor's (s). Each phase runs
// from the step before it that was found.
var traceSteps = []struct{ name, who, substr string }{
	{"h_interrupted", "h", "interrupted; leaving"},         // krole run got the signal
	{"h_cmd_stopped", "h", ") stopped with code"},          // CMD exited (command mode)
	{"h_revoked", "h", "info: revoked"},                    // the holding cancelled, work stopped: the release begins
	{"h_released", "h", "info: ended the member session"},  // the session end's EndTxn answered (a leaving member releases its roles with it)
	{"release_shows", "", ""},                              // the bench's view shows the release
	{"s_saw_vacancy", "s", "info: holder changed: vacant"}, // the successor's runner saw it
	{"s_confirmed", "s", "info: challenging"},              // the confirmation returned (from the view's answer, or a Fetch)
	{"s_epoch", "s", "info: acquired an epoch"},            // InitProducerId answered
	{"s_elected", "s", "info: elected"},                    // the lease transaction done
	{"new_lease_shows", "", ""},                            // the bench's view shows the new lease
	{"s_cmd_started", "s", ") with token"},                 // the successor's CMD started (command mode)
}

// traceRound times one handover round's member steps (traceSteps) by when
// their lines reached the bench, as phases from each step found to the
// next one found, into round (ms from the signal, per step) and traced
// (per phase).
func traceRound(round map[string]float64, traced map[string][]float64,
	holder, succ *runMember, sent, released, shown time.Time) {
	prev, prevName := sent, "signal"
	for _, st := range traceSteps {
		var at time.Time
		switch {
		case st.name == "release_shows":
			at = released
		case st.name == "new_lease_shows":
			at = shown
		case st.who == "h":
			at = holder.out.lineAfter(sent, st.substr)
		default:
			at = succ.out.lineAfter(sent, st.substr)
		}
		if at.IsZero() {
			continue
		}
		round[st.name+"_ms"] = ms(at.Sub(sent))
		k := "trace " + prevName + " -> " + st.name
		traced[k] = append(traced[k], ms(at.Sub(prev)))
		prev, prevName = at, st.name
	}
}
