package processor

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/krabka/krole/codec"
)

// priority orders the calls waiting for a slot of the limiter.
type priority int

const (
	// prioRenew: renewals, which keep the roles the member holds.
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
// its role goroutines, in three priorities: renewals first, then
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

// renewPeriod P is how long after the last successful write a renewal is
// late (begun or granted its slot): halfway from RenewInterval to
// RenewDeadline, so that a renewal that late still has half the margin
// before the holder stops on its own. A loaded member paces its renewals
// an eighth of that margin short of it (paceCap).
func renewPeriod(s Settings) time.Duration {
	return s.RenewInterval + (s.RenewDeadline-s.RenewInterval)/2
}

// capacityHeadroom is the share of the limiter's time the renewals of the
// roles a member campaigns for may take: the rest absorbs latency spikes,
// the renewals jitter brings forward, and the member's other calls.
const capacityHeadroom = 0.75

// The write latency estimate L is taken over the lease writes that ended
// in the last latencyWindow: it is the latency that 9 in 10 of them
// stayed within, never counting the width slowest (the (width+1)-th
// slowest while the window holds fewer than 10 x width writes; the
// fastest when it holds width or fewer). A stall of the cluster or the
// network delays at most the width writes in flight during it (the others
// wait for a slot, before their clock starts), so one stall moves the
// estimate not at all, nor do stalls that delay fewer than a tenth of the
// writes; an overload, which slows every write, moves it within a tenth
// of a window's writes (and width+1 at least). The estimate forgets by
// time, not by count: a member that writes little (it holds few roles or
// none) keeps no latency from a stall long gone. With no write in the
// window the estimate is unknown again, as before the first write: the
// capacity is unbounded (the limiter still bounds the calls in flight).
//
// latencyWindow is a lease: longer than the renew deadline, so that at
// the end of a stall shorter than the renew deadline the window still
// holds writes from before it (those of the last RenewInterval before it,
// at the defaults, in which every held role renewed), and so that the
// estimate is steady over a renewal cycle.
func latencyWindow(s Settings) time.Duration { return s.LeaseDuration }

// sample is a lease write's latency (from the slot's grant to the answer)
// and when it ended.
type sample struct {
	at time.Time
	d  time.Duration
}

// admission decides whether a member may campaign for one more role: it
// counts the roles held and the campaigns under way, estimates how many
// roles the member can renew in time, and pauses campaigns after a
// challenge timed out or a role was shed. Shared by all the member's role
// goroutines.
//
// The estimate: a lease write (the call a renewal is) holds one of the
// limiter's width slots for L, the write latency estimate (see
// latencyWindow), so the member writes at most width/L leases a second.
// Unloaded it renews each role every RenewInterval; loaded, it spaces
// renewals out and they wait for slots, which is safe as long as each
// comes well before RenewDeadline. It plans for at most C = RenewInterval
// + 3/8 (RenewDeadline - RenewInterval) between renewals (paceCap), and
// keeps a quarter of the slots' time for spikes and its other calls:
//
//	capacity = floor(0.75 * width * C / L)
//
// roles. While L is unknown the capacity is unbounded (the limiter still
// bounds the calls). A member holding more roles than its capacity (and
// an eighth) resigns the excess ([ReasonOverloaded]) at their next
// renewal that is late (more than P, renewPeriod, after the last), so
// that other candidates take them at once instead of after an expiry;
// one holding its capacity or more (counting the campaigns under way)
// does not campaign, and its other roles stay registered, not
// challenging.
type admission struct {
	m      *Member
	width  int
	period time.Duration // paceCap of the settings
	window time.Duration // latencyWindow of the settings

	mu         sync.Mutex
	samples    []sample      // the lease writes that ended in the last window, oldest first
	lat        time.Duration // the estimate L over them; 0: unknown
	stale      int           // writes come or gone since lat was computed
	held       int
	claims     int
	queued     map[codec.Role]struct{}
	refusing   bool
	pauseUntil time.Time // no challenge before this (a challenge timed out)
	shedUntil  time.Time // no challenge before this either (a role was shed), unless lifted early (see pause)
	shedFor    time.Duration
	shedHeld   int       // the most roles held at a shed of the current pause
	timeouts   int       // consecutive challenge timeouts
	nextSlot   time.Time // the earliest start of the next paced renewal (see renewEvery)
}

func newAdmission(m *Member) *admission {
	return &admission{m: m, width: m.s.MaxInFlight, period: paceCap(m.s), window: latencyWindow(m.s), queued: map[codec.Role]struct{}{}}
}

// paceCap is the longest a loaded member spaces two renewals of a role
// (see renewEvery), and the period the renew capacity plans for: three
// eighths of the way from RenewInterval to RenewDeadline, an eighth of
// that margin before the renew period (renewPeriod), after which a
// renewal is late. At the capacity the pace reaches paceCap with the
// call slots busy three quarters of the time.
func paceCap(s Settings) time.Duration {
	return s.RenewInterval + 3*(s.RenewDeadline-s.RenewInterval)/8
}

// capacity returns the estimate above at now; a.mu must be held.
func (a *admission) capacity(now time.Time) int {
	a.expire(now)
	if a.lat <= 0 {
		return unbounded
	}
	c := capacityHeadroom * float64(a.width) * float64(a.period) / float64(a.lat)
	if c >= unbounded {
		return unbounded
	}
	return max(1, int(c))
}

// unbounded is the capacity while the write latency is unknown.
const unbounded = math.MaxInt32

// expire drops the writes that left the window at now; a.mu must be
// held.
func (a *admission) expire(now time.Time) {
	cut := now.Add(-a.window)
	n := 0
	for n < len(a.samples) && !a.samples[n].at.After(cut) {
		n++
	}
	if n > 0 {
		a.samples = a.samples[n:] // append copies only these when it grows
		a.changed(n)
	}
}

// changed counts k writes come into or gone from the window, and computes
// the estimate again once they are a sixty-fourth of those in it (at
// once for a window of fewer than 128 writes, and when it is empty), so
// that a member writing thousands of leases a lease does not sort them
// all at every write; a.mu must be held.
func (a *admission) changed(k int) {
	a.stale += k
	if a.stale >= len(a.samples)/64 {
		a.estimate()
		a.stale = 0
	}
}

// estimate sets lat from the writes in the window (see latencyWindow); a.mu
// must be held.
func (a *admission) estimate() {
	n := len(a.samples)
	if n == 0 {
		a.lat = 0
		return
	}
	ds := make([]time.Duration, n)
	for i, s := range a.samples {
		ds[i] = s.d
	}
	slices.Sort(ds)
	a.lat = ds[max(0, n-1-max(a.width, n/10))]
}

// latency returns the write latency estimate at now (0: unknown).
func (a *admission) latency(now time.Time) time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.expire(now)
	return a.lat
}

// Capacity is the member's current estimate of how many roles it can renew
// in time (see admission); unbounded while the write latency is unknown.
func (a *admission) Capacity() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.capacity(a.m.clk.Now())
}

// wrote records a lease write that got its slot at from and ended at now.
func (a *admission) wrote(from, now time.Time) {
	a.mu.Lock()
	a.expire(now)
	a.samples = append(a.samples, sample{at: now, d: now.Sub(from)})
	a.changed(1)
	c := a.capacity(now)
	a.mu.Unlock()
	a.m.met.capacity(a.m.me, c)
}

// claim reports whether role may campaign now (confirm and challenge):
// the member holds and campaigns for fewer roles than its capacity, and
// challenges are not paused (see pause, lift and challengeTimedOut). On
// true the caller must call unclaim once the campaign step is over. On
// false the role is counted as queued.
func (a *admission) claim(role codec.Role, now time.Time) bool {
	a.mu.Lock()
	c := a.capacity(now)
	lifted := a.lift(now, c)
	ok := a.held+a.claims < c && !now.Before(a.pauseUntil) && !now.Before(a.shedUntil)
	var logRefusal bool
	if ok {
		a.claims++
		delete(a.queued, role)
		if a.refusing && a.held+a.claims < c {
			a.refusing = false
			a.m.log.Info("campaigning again: below the renewal capacity", "held", a.held, "capacity", c)
		}
	} else {
		a.queued[role] = struct{}{}
		if !a.refusing && a.held+a.claims >= c {
			a.refusing, logRefusal = true, true
		}
	}
	held, lat, queued := a.held, a.lat, len(a.queued)
	a.mu.Unlock()
	if lifted {
		a.m.log.Info("campaigning again: the write latency that made the member shed roles has passed", "capacity", c, "write_latency", lat)
	}
	if logRefusal {
		a.m.log.Warn("not campaigning for more roles: the member cannot renew more in time; the others stay registered and wait",
			"held", held, "capacity", c, "write_latency", lat, "max_in_flight", a.width, "pace_cap", a.period)
	}
	a.m.met.queued(a.m.me, queued)
	return ok
}

func (a *admission) unclaim() {
	a.mu.Lock()
	a.claims--
	a.mu.Unlock()
}

// dequeue forgets that role waits for capacity (it holds it, left, or is
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

// holding counts a role taken (+1) or given up (-1).
func (a *admission) holding(delta int) {
	a.mu.Lock()
	a.held += delta
	a.mu.Unlock()
}

// shed reports whether a held role should be resigned at now because the
// member holds more than its capacity; on true the role no longer counts
// as held (the caller resigns it), and campaigns pause for shedPause
// after it.
func (a *admission) shed(now time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	c := a.capacity(now)
	if a.held <= c+max(1, c/8) { // a margin, so that noise in the estimate sheds nothing
		return false
	}
	a.held--
	a.pause(now)
	return true
}

// shedAt pauses campaigns after a role was let go at now (see shed and
// shedPause).
func (a *admission) shedAt(now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.pause(now)
}

// pause pauses campaigns after a shed at now; a.mu must be held. a.held
// no longer counts the role shed.
func (a *admission) pause(now time.Time) {
	if now.Before(a.shedUntil) {
		a.shedHeld = max(a.shedHeld, a.held+1)
	} else {
		a.shedHeld = a.held + 1
		// The first shed since the last pause ended. Soon after it (the
		// member campaigned again and could not keep what it took), the
		// pause doubles; later, a new run starts.
		base := shedPause * a.m.s.LeaseDuration
		if a.shedFor > 0 && now.Before(a.shedUntil.Add(a.shedFor)) {
			a.shedFor = min(2*a.shedFor, maxShedPause*a.m.s.LeaseDuration)
		} else {
			a.shedFor = base
		}
		a.shedUntil = now.Add(a.shedFor)
	}
}

// lift ends the pause after a shed early, at now, once the cause has
// passed: the capacity c says the member could renew twice the roles it
// held when it shed (the write latency is less than half of any that
// could have made it shed). It reports whether it lifted the pause; a.mu
// must be held.
//
// A pause must not outlast its cause: after a stall longer than the
// renew deadline the estimate is that of the fast writes again as soon
// as they outnumber the stall's in the window (see latencyWindow), and
// the member campaigns again, instead of leaving roles it could hold
// unheld for 4 leases or more. An overload that goes on keeps the pause
// as long as the member's writes stay more than half as slow as those
// that made it shed: on a cluster that serves them one at a time
// (TestIntegrationOverloadAloneKeepsAStableSet), a member that shed down
// to its capacity has fewer in flight and measures them faster, but not
// that much faster, and without the pause it would take released roles
// back and shed them again. The factor 2 is a judgment, not a law: a
// cluster that serves MaxInFlight writes one at a time can make one
// write in flight up to MaxInFlight times faster than MaxInFlight, and
// then the doubling pause (shedPause) bounds the churn.
func (a *admission) lift(now time.Time, c int) bool {
	if !now.Before(a.shedUntil) || c < 2*a.shedHeld {
		return false
	}
	a.shedUntil = now
	return true
}

// shedPause and maxShedPause, in lease durations, bound how long a member
// that shed a role does not campaign: a late renewal showed that the
// member holds more than it can renew, whatever the estimate says now,
// and the estimate moves with the load. Without the pause a member with
// nobody to shed to takes a released role back as soon as the estimate
// rises, and sheds again: it churns. The pause doubles while each
// campaign after it ends in a shed again. It ends early once the
// estimate says the cause has passed (see lift).
const (
	shedPause    = 4
	maxShedPause = 64
)

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

// renewEvery returns when, after a successful write begun at from, a
// role's next renewal goes: RenewInterval less jitter (see renewJitter),
// stretched when the member is loaded so that its renewals take at most
// capacityHeadroom of its call slots' time, leaving the rest to the other
// calls (campaigns, releases) and keeping the wait for a slot short: with
// K held and write latency L, a renewal every K x L / (headroom x width),
// never beyond paceCap, which it reaches at the renew capacity (the
// capacity plans for it). (When the capacity planned for the renew period
// P and the pace stopped short of it, the slots saturated below the
// capacity, and a renewal waited for more than half its period.)
//
// Loaded, the renewals go on a member-wide schedule rather than at random
// times: each takes the next free start slot, the later of its own due
// time (an eighth of the pace early) and the last slot taken plus
// pace / K (L / (headroom x width)), so that they begin evenly spaced and
// do not bunch and queue for the call slots (at random times, with the
// slots busy 80-95% of the time, they queued for hundreds of
// milliseconds). A slot is never later than paceCap after from: a renewal
// the schedule would push beyond it goes at paceCap. Unloaded the jitter
// stays: it spreads the renewals of many members, which share no
// schedule.
func (a *admission) renewEvery(from time.Time) time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.m.s
	every := s.RenewInterval - renewJitter(s)
	a.expire(from)
	if a.lat <= 0 || a.held <= 0 {
		return every
	}
	paced := time.Duration(float64(a.held) * float64(a.lat) / (capacityHeadroom * float64(a.width)))
	if paced <= every {
		return every
	}
	at := from.Add(min(paced-paced/8, a.period))
	if at.Before(a.nextSlot) {
		at = a.nextSlot
	}
	if last := from.Add(a.period); at.After(last) {
		at = last
	}
	a.nextSlot = at.Add(paced / time.Duration(a.held))
	return at.Sub(from)
}

// renewJitter returns how much earlier than RenewInterval after the last
// write the next renewal goes: uniform in [0, RenewJitter), at most
// RenewInterval - RetryBackoff, so that roles elected together (at start,
// after a failover) spread their renewals across the interval instead of
// renewing in bursts.
func renewJitter(s Settings) time.Duration {
	j := min(s.RenewJitter, s.RenewInterval-s.RetryBackoff)
	if j <= 0 {
		return 0
	}
	return rand.N(j)
}
