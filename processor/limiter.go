package processor

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/krabka/krole/codec"
)

// priority orders the calls waiting for a slot of the limiter.
type priority int

const (
	// prioRenew: lease rewrites (the member session's heartbeats take no
	// slot). Not for the rewrite's own sake, which has hours to spare: it
	// waits on the role's goroutine, which meanwhile takes no vouch from
	// the session, so a wait behind the member's queued campaigns would
	// run into the local deadline and lose a role the heartbeats keep.
	prioRenew priority = iota
	// prioRelease: releases of resigned roles, which hand them over at
	// once; one that cannot get a slot in time leaves its lease to
	// expire, as a crash would.
	prioRelease
	// prioCampaign: registrations, challenges, deregistrations, prunes.
	prioCampaign
	nprio
)

// limiter bounds the transport calls a Member has in flight, shared by all
// its role goroutines, in three priorities: lease rewrites first, then
// releases, then everything else (registrations, challenges,
// deregistrations, prunes). A waiter is granted a slot in priority order,
// first come first served within a priority. The wait happens before a
// call begins, so no transaction is open while a call waits: a call that
// waits too long fails before it has written anything, instead of queueing
// inside the client (sarama sends at most Net.MaxOpenRequests requests per
// connection at once and queues the rest, past their context) and
// abandoning a transaction that holds back every read_committed reader of
// its partition.
type limiter struct {
	mu    sync.Mutex
	width int
	busy  int
	q     [nprio][]chan struct{} // waiters; a granted waiter's channel holds a value
}

func newLimiter(width int) *limiter { return &limiter{width: width} }

// acquire waits for a slot until ctx ends. It returns the function that
// gives the slot back, or ctx's error.
func (l *limiter) acquire(ctx context.Context, p priority) (func(), error) {
	release, _, err := l.acquireQueued(ctx, p)
	return release, err
}

// acquireQueued is acquire, and also reports whether the call queued for
// its slot (every slot was busy, or a call of higher or equal priority
// waited).
func (l *limiter) acquireQueued(ctx context.Context, p priority) (func(), bool, error) {
	l.mu.Lock()
	if l.busy < l.width && !l.waiting(p) {
		l.busy++
		l.mu.Unlock()
		return l.release, false, nil
	}
	w := make(chan struct{}, 1)
	l.q[p] = append(l.q[p], w)
	l.mu.Unlock()
	select {
	case <-w:
		return l.release, true, nil
	case <-ctx.Done():
	}
	l.mu.Lock()
	removed := remove(&l.q[p], w)
	l.mu.Unlock()
	if !removed { // granted meanwhile: hand the slot on
		<-w
		l.release()
	}
	return nil, true, ctx.Err()
}

// waiting reports whether a call of priority p or higher waits; l.mu must
// be held.
func (l *limiter) waiting(p priority) bool {
	for i := prioRenew; i <= p; i++ {
		if len(l.q[i]) > 0 {
			return true
		}
	}
	return false
}

func remove(q *[]chan struct{}, w chan struct{}) bool {
	for i, x := range *q {
		if x == w {
			*q = append((*q)[:i], (*q)[i+1:]...)
			return true
		}
	}
	return false
}

// release gives a slot back, to the first waiter of the highest priority.
func (l *limiter) release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for p := range l.q {
		if len(l.q[p]) > 0 {
			w := l.q[p][0]
			l.q[p] = l.q[p][1:]
			w <- struct{}{} // the slot passes on; busy stays
			return
		}
	}
	l.busy--
}

// admission decides whether a member may campaign for one more role now.
// Holding a role costs the member nothing per renew interval (the member
// session's one heartbeat renews every role it holds), so what a member
// holds is not bounded by a renew capacity; what admission bounds is
// acquisition: campaigns pause after a challenge timed out (a sign that
// the member or the cluster is overloaded, where more challenges would
// add to it), and every call waits for one of the limiter's slots. A role
// refused meanwhile stays registered and is counted as queued
// (krole_queued_roles). Shared by all the member's role goroutines.
type admission struct {
	m *Member

	mu         sync.Mutex
	queued     map[codec.Role]struct{}
	pauseUntil time.Time // no challenge before this (a challenge timed out)
	timeouts   int       // consecutive challenge timeouts
}

func newAdmission(m *Member) *admission {
	return &admission{m: m, queued: map[codec.Role]struct{}{}}
}

// claim reports whether role may campaign now (confirm and challenge):
// challenges are not paused (see challengeTimedOut). On false the role is
// counted as queued; on true it no longer is.
func (a *admission) claim(role codec.Role, now time.Time) bool {
	a.mu.Lock()
	ok := !now.Before(a.pauseUntil)
	if ok {
		delete(a.queued, role)
	} else {
		a.queued[role] = struct{}{}
	}
	queued := len(a.queued)
	a.mu.Unlock()
	a.m.met.queued(a.m.me, queued)
	return ok
}

// dequeue forgets that role waits to campaign (it holds it, left, or is
// not campaigning).
func (a *admission) dequeue(role codec.Role) {
	a.mu.Lock()
	_, was := a.queued[role]
	delete(a.queued, role)
	n := len(a.queued)
	a.mu.Unlock()
	if was {
		a.m.met.queued(a.m.me, n)
	}
}

// challengeTimedOut pauses every campaign of the member: a challenge that
// timed out says the member or the cluster is overloaded, and more
// challenges would add to it. The pause doubles from RetryBackoff with
// each consecutive timeout, up to LeaseDuration, with jitter.
func (a *admission) challengeTimedOut(now time.Time) time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.timeouts++
	d := a.m.s.RetryBackoff
	for i := 1; i < a.timeouts && d < a.m.s.LeaseDuration; i++ {
		d *= 2
	}
	d = min(d, a.m.s.LeaseDuration)
	d = d/2 + rand.N(d/2+1)
	if until := now.Add(d); until.After(a.pauseUntil) {
		a.pauseUntil = until
	}
	if a.timeouts == 1 || a.timeouts%10 == 0 {
		a.m.log.Warn("a challenge timed out; pausing campaigns", "consecutive_timeouts", a.timeouts, "pause", d)
	}
	return d
}

// challengeDone ends a run of challenge timeouts.
func (a *admission) challengeDone() {
	a.mu.Lock()
	a.timeouts = 0
	a.mu.Unlock()
}

// renewJitter returns how much earlier than RenewInterval after the last
// round the member session's next heartbeat round goes: uniform in [0,
// RenewJitter), at most RenewInterval - RetryBackoff, so that members
// started together spread their heartbeats across the interval.
func renewJitter(s Settings) time.Duration {
	j := min(s.RenewJitter, s.RenewInterval-s.RetryBackoff)
	if j <= 0 {
		return 0
	}
	return rand.N(j)
}
