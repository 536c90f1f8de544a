package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/supervise"
	"github.com/krabka/krole/processor"
	"github.com/krabka/krole/rolestate"
)

// runMember is one `krole run` process of failover, handover or steady.
type runMember struct {
	name  codec.MemberID
	child *supervise.Child
	out   *tail
}

// startRun starts `krole run role --member name -- sleep 3600` with s;
// lock: `krole run role --member name`, which holds the role without a
// command until interrupted (as etcd's candidates do); trace: with
// --verbose, its lines stamped as they come.
func (c Cluster) startRun(role codec.Role, name codec.MemberID, s processor.Settings, lock, trace bool) (*runMember, error) {
	out := &tail{stamp: trace}
	args := []string{"run", string(role), "--member", string(name),
		"--brokers", c.Brokers, "--topic", c.Topic, "--txn-prefix", c.TxnPrefix, "--pipeline", c.pipelineFlag(),
		"--lease-duration", s.LeaseDuration.String(), "--heartbeat-interval", s.HeartbeatInterval.String()}
	if trace {
		args = append(args, "--verbose")
	}
	if !lock {
		args = append(args, "--", "sleep", "3600")
	}
	child, err := supervise.Start(supervise.Spec{Path: c.Exe, Args: args, Env: c.Env, Stdout: out, Stderr: out})
	if err != nil {
		return nil, fmt.Errorf("starting member %s: %w", name, err)
	}
	return &runMember{name: name, child: child, out: out}, nil
}

// follower tracks a role's state as the bench's view follows it, and the
// `krole run` members that campaign for it.
type follower struct {
	c Cluster
	// ctx is the run's: its end ends every wait.
	ctx    context.Context
	stop   context.CancelFunc
	states <-chan rolestate.State
	state  rolestate.State
	// members are the live member processes, to fail fast when one exits
	// unasked.
	members map[codec.MemberID]*runMember
	asked   map[codec.MemberID]bool
}

// follow follows role in c.View until close; ctx ending ends the waits,
// not the following.
func (c Cluster) follow(ctx context.Context, role codec.Role) *follower {
	fctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	return &follower{c: c, ctx: ctx, stop: stop, states: c.View.Follow(fctx, role), state: rolestate.State{Role: role, LeaseOffset: -1},
		members: map[codec.MemberID]*runMember{}, asked: map[codec.MemberID]bool{}}
}

// close stops the members still running, so that every member leaves
// before the cluster stops, and then the following.
func (f *follower) close() {
	for _, m := range f.members {
		f.asked[m.name] = true
		if !m.child.Gone() {
			_, _ = m.child.Stop(context.Background(), 5*time.Second)
		}
	}
	f.stop()
}

// awaitSettled waits until one of the bench's members holds the role with
// n candidates queued (what names that wait in a timeout's error), and
// then for a renewal written after that. A member that has just joined
// judges the lease it first sees from that moment, not from its write (it
// never saw it written): a failover right after a join would measure that
// wait, up to a heartbeat interval. So wait until every member has seen a
// lease written after it joined: a renewal that shows after the joins.
func (f *follower) awaitSettled(what string, n int, s processor.Settings) error {
	if _, err := f.await(what, s.LeaseDuration+Wait, func(st rolestate.State) bool {
		return unreleased(st) && f.members[st.Lease.Member] != nil && len(st.Candidates) >= n
	}, nil); err != nil {
		return err
	}
	if l := f.state.Lease; l.Session != nil {
		// Renewed by its member session's heartbeats, which the view
		// does not publish: ask it for the holder's latest.
		return f.awaitHeartbeat(l.Member, s.LeaseDuration+Wait)
	}
	joined := f.state.LeaseOffset
	_, err := f.await("a renewal after the joins", s.LeaseDuration+Wait, func(st rolestate.State) bool {
		return unreleased(st) && st.LeaseOffset > joined
	}, nil)
	return err
}

// awaitHeartbeat waits, at most timeout, for a heartbeat of member's
// session written after the call.
func (f *follower) awaitHeartbeat(member codec.MemberID, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(f.ctx, timeout)
	defer cancel()
	first, _, err := f.c.View.Session(ctx, member)
	if err != nil {
		return fmt.Errorf("waiting for a renewal after the joins: %w", err)
	}
	for {
		se, ok, err := f.c.View.Session(ctx, member)
		switch {
		case err != nil:
			return fmt.Errorf("waiting for a renewal after the joins: %w", err)
		case ok && !se.Heartbeat.End && se.Offset > first.Offset:
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waited %v for a renewal after the joins in vain", timeout)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// await waits until ok holds for the role's state, and returns the time
// the view showed it. seen, when set, sees every state on the way.
func (f *follower) await(what string, timeout time.Duration, ok func(rolestate.State) bool, seen func(rolestate.State)) (time.Time, error) {
	if ok(f.state) {
		return time.Now(), nil
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case st, open := <-f.states:
			if !open {
				if err := f.ctx.Err(); err != nil {
					return time.Time{}, err
				}
				return time.Time{}, fmt.Errorf("waiting for %s: the view of the role topic stopped", what)
			}
			at := time.Now()
			f.state = st
			if seen != nil {
				seen(st)
			}
			if ok(st) {
				return at, nil
			}
		case <-tick.C:
			for name, m := range f.members {
				if !f.asked[name] && m.child.Gone() {
					return time.Time{}, fmt.Errorf("%w: %s exited %s while waiting for %s: %s",
						errMemberExit, name, supervise.ExitText(m.child.ExitCode()), what, m.out.last())
				}
			}
		case <-f.ctx.Done():
			return time.Time{}, f.ctx.Err()
		case <-t.C:
			return time.Time{}, fmt.Errorf("waited %v for %s in vain", timeout, what)
		}
	}
}

// unreleased says whether st has a lease that is not a release.
func unreleased(st rolestate.State) bool { return st.Lease != nil && !st.Lease.Released() }
