package processor

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/krabka/krole/codec"
)

// priority orders the calls waiting for a slot of the limiter.
type priority int

const (
	// prioRewrite: lease rewrites, first: the role's goroutine takes no
	// vouch from the session while it waits, so a long wait would lose
	// the role at its local deadline.
	prioRewrite priority = iota
	// prioRelease: releases, which hand roles over at once (one that gets
	// no slot in time leaves its lease to expire).
	prioRelease
	// prioCampaign: registrations, challenges, deregistrations, prunes.
	prioCampaign
	nprio
)

// limiter bounds the transport calls a Member has in flight, over all its
// roles, granting slots in priority order, first come first served within
// one. The wait comes before a call begins, so no transaction is open
// while it waits (docs/DESIGN.md, "Many roles under overload").
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
	for i := prioRewrite; i <= p; i++ {
		if len(l.q[i]) > 0 {
			return true
		}
	}
	return false
}

func remove(q *[]chan struct{}, w chan struct{}) bool {
	for i, x := range *q {
		if x == w {
			n := len(*q) - 1
			copy((*q)[i:], (*q)[i+1:])
			(*q)[n] = nil
			if *q = (*q)[:n]; n == 0 {
				*q = nil
			}
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
		if w, ok := popFront(&l.q[p]); ok {
			w <- struct{}{} // the slot passes on; busy stays
			return
		}
	}
	l.busy--
}

// popFront removes and returns the first of *q. The served slot is
// cleared, and an empty queue dropped, so that the backing array keeps no
// served element alive.
func popFront[T any](q *[]T) (T, bool) {
	var zero T
	if len(*q) == 0 {
		return zero, false
	}
	x := (*q)[0]
	(*q)[0] = zero
	if *q = (*q)[1:]; len(*q) == 0 {
		*q = nil
	}
	return x, true
}

// admission pauses a member's campaigns after a challenge timed out, a
// sign of overload, and counts the roles refused meanwhile
// (krole_queued_roles). Shared by all the member's role goroutines.
type admission struct {
	m *Member

	// pauseUntil: no challenge before this (a challenge timed out); read
	// without mu by every role's step, written under it.
	pauseUntil atomic.Pointer[time.Time]

	mu       sync.Mutex
	queued   map[codec.Role]struct{}
	timeouts int // consecutive challenge timeouts
}

func newAdmission(m *Member) *admission {
	return &admission{m: m, queued: map[codec.Role]struct{}{}}
}

// pausedUntil returns when the member's paused campaigns resume (zero
// or past: they are not paused).
func (a *admission) pausedUntil() time.Time {
	if p := a.pauseUntil.Load(); p != nil {
		return *p
	}
	return time.Time{}
}

// queue records whether role waits for the member's campaigns to resume.
func (a *admission) queue(role codec.Role, waiting bool) {
	if !waiting {
		a.dequeue(role)
		return
	}
	a.mu.Lock()
	a.queued[role] = struct{}{}
	n := len(a.queued)
	a.mu.Unlock()
	a.m.met.queued(a.m.me, n)
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

// challengeTimedOut pauses every campaign of the member, RetryBackoff
// doubling with each consecutive timeout up to LeaseDuration, with jitter.
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
	if until := now.Add(d); until.After(a.pausedUntil()) {
		a.pauseUntil.Store(&until)
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

// roundJitter returns how much earlier than HeartbeatInterval after the
// last round the next one goes (see Settings.HeartbeatJitter).
func roundJitter(s Settings) time.Duration {
	j := min(s.HeartbeatJitter, s.HeartbeatInterval-s.RetryBackoff)
	if j <= 0 {
		return 0
	}
	return rand.N(j)
}
