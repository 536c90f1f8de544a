package processor

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The limiter hands a freed slot to renewals before releases, and to
// releases before campaigns, whatever the order they came in.
func TestLimiterGrantsByPriority(t *testing.T) {
	l := newLimiter(1)
	hold, err := l.acquire(context.Background(), prioCampaign)
	require.NoError(t, err)
	order := make(chan priority, 3)
	started := make(chan struct{}, 3)
	for _, p := range []priority{prioCampaign, prioRelease, prioRenew} {
		go func() {
			started <- struct{}{}
			rel, err := l.acquire(context.Background(), p)
			if err != nil {
				return
			}
			order <- p
			rel()
		}()
		<-started
		waitQueued(t, l, p)
	}
	hold()
	assert.Equal(t, prioRenew, <-order)
	assert.Equal(t, prioRelease, <-order)
	assert.Equal(t, prioCampaign, <-order)
	l.mu.Lock()
	assert.Zero(t, l.busy, "every slot given back")
	l.mu.Unlock()
}

// A waiter whose context ends leaves the queue, and a slot granted to it
// at that moment is passed on, not lost.
func TestLimiterWaiterGivesUp(t *testing.T) {
	l := newLimiter(1)
	hold, err := l.acquire(context.Background(), prioRenew)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := l.acquire(ctx, prioRenew)
		errc <- err
	}()
	waitQueued(t, l, prioRenew)
	cancel()
	require.ErrorIs(t, <-errc, context.Canceled)
	hold()
	rel, err := l.acquire(context.Background(), prioCampaign)
	require.NoError(t, err, "the slot is free again")
	rel()
}

func waitQueued(t *testing.T, l *limiter, p priority) {
	t.Helper()
	for i := 0; ; i++ {
		l.mu.Lock()
		n := len(l.q[p])
		l.mu.Unlock()
		if n > 0 {
			return
		}
		require.Less(t, i, 10000, "the waiter never queued")
		time.Sleep(time.Millisecond)
	}
}

// writeAt records n lease writes of latency d, ending at at.
func writeAt(a *admission, at time.Time, d time.Duration, n int) {
	for range n {
		a.wrote(at.Add(-d), at)
	}
}

// The capacity estimate is headroom x width x renew period / write
// latency; a member at its capacity does not campaign (the role is
// queued), and one over it by more than an eighth sheds.
func TestAdmissionCapacity(t *testing.T) {
	// Renew interval 2s, deadline 8s: the pace cap is 2s + 3/8 x 6s = 4.25s.
	h := newHarness(t, "a", Settings{MaxInFlight: 4, LeaseDuration: 10 * time.Second})
	a := h.m.adm
	assert.Equal(t, unbounded, a.Capacity(), "unbounded until a write was measured")
	now := h.clk.Now()
	writeAt(a, now, 1500*time.Millisecond, 1)
	assert.Equal(t, 8, a.Capacity(), "0.75 x 4 x 4.25s / 1.5s")

	for range 7 {
		a.holding(+1)
	}
	require.True(t, a.claim("r1", now), "7 held + 0 campaigning < 8")
	assert.False(t, a.claim("r2", now), "7 held + 1 campaigning: at capacity")
	assert.Equal(t, 1.0, h.metric("krole_queued_roles", "member", "a"))
	a.unclaim()
	a.dequeue("r2")
	assert.Equal(t, 0.0, h.metric("krole_queued_roles", "member", "a"))
	assert.False(t, a.shed(now), "7 held, capacity 8")
	a.unclaim()
	for range 3 {
		a.holding(+1)
	}
	assert.True(t, a.shed(now), "10 held: over capacity + an eighth, at least one (9)")
	assert.False(t, a.shed(now), "the shed role no longer counts: 9 held")

	// A shed pauses every campaign for shedPause lease durations, even
	// below the capacity, while the writes stay as slow.
	a.holding(-4) // 5 held
	pause := shedPause * 10 * time.Second
	for at := now.Add(5 * time.Second); at.Before(now.Add(pause)); at = at.Add(5 * time.Second) {
		writeAt(a, at, 1500*time.Millisecond, 5)
		require.False(t, a.claim("r3", at), "paused after the shed, %v", at.Sub(now))
	}
	writeAt(a, now.Add(pause), 1500*time.Millisecond, 5)
	require.True(t, a.claim("r3", now.Add(pause)), "pause over")
	a.unclaim()
	// A shed soon after the pause ended (the member could not keep what
	// it took) doubles the pause.
	a.holding(+5) // 10 held
	later := now.Add(pause + time.Second)
	writeAt(a, later, 1500*time.Millisecond, 5)
	require.True(t, a.shed(later), "10 held")
	a.holding(-4) // 5 held
	for at := later.Add(5 * time.Second); at.Before(later.Add(2 * pause)); at = at.Add(5 * time.Second) {
		writeAt(a, at, 1500*time.Millisecond, 5)
		require.False(t, a.claim("r3", at), "paused twice as long, %v", at.Sub(later))
	}
	writeAt(a, later.Add(2*pause), 1500*time.Millisecond, 5)
	require.True(t, a.claim("r3", later.Add(2*pause)), "pause over")
	a.unclaim()

	// A challenge timeout pauses every campaign.
	now = later.Add(2 * pause)
	d := a.challengeTimedOut(now)
	assert.Positive(t, d)
	assert.False(t, a.claim("r3", now), "paused")
	assert.True(t, a.claim("r3", now.Add(d)), "pause over")
}

// stallSettings are the issue's: lease 2s, renew every 400ms, renew
// deadline 1.6s, 5 call slots.
func stallSettings() Settings {
	return Settings{LeaseDuration: 2 * time.Second, RenewInterval: 400 * time.Millisecond,
		RenewDeadline: 1600 * time.Millisecond, RetryBackoff: 50 * time.Millisecond,
		Stagger: 200 * time.Millisecond, TransactionTimeout: time.Second, MaxInFlight: 5}
}

// A stall moves the estimate not at all (issue 18, section 3): it delays
// the writes in flight during it, at most one per call slot, and the
// estimate is the latency all but the width slowest writes of the window
// stayed within. An overload, which slows every write, moves it within
// width+1 writes, and the estimate forgets by time: a window after the
// last write it is unknown again. (Before, a moving average rose by half
// of each slow write and fell by a sixteenth or a sixty-fourth of each
// fast one: the 5 writes of a 1s stall kept it above 600ms for dozens of
// writes, and a member that wrote nothing kept it for ever.)
func TestAdmissionStallMovesNothing(t *testing.T) {
	h := newHarness(t, "a", stallSettings())
	a := h.m.adm
	now := h.clk.Now()
	for range 12 {
		a.holding(+1)
	}
	// 12 roles renewed every 400ms at 5ms a write, for a lease.
	for i := range 5 {
		writeAt(a, now.Add(time.Duration(i)*400*time.Millisecond), 5*time.Millisecond, 12)
	}
	now = now.Add(2 * time.Second)
	fast := a.Capacity()
	require.Equal(t, 5*time.Millisecond, a.latency(now))
	// A 1s stall: the 5 writes in flight end together at its end.
	writeAt(a, now, time.Second, 5)
	assert.Equal(t, 5*time.Millisecond, a.latency(now), "the stall moves nothing")
	assert.Equal(t, fast, a.Capacity())
	assert.False(t, a.shed(now), "12 held: no shed")
	require.True(t, a.claim("r", now), "campaigns go on")
	a.unclaim()

	// An overload: every write slow. The width+1-th moves the estimate.
	writeAt(a, now.Add(time.Millisecond), 900*time.Millisecond, 1)
	assert.Equal(t, 900*time.Millisecond, a.latency(now.Add(time.Millisecond)))
	assert.Equal(t, 3, a.Capacity(), "0.75 x 5 x 0.85s / 0.9s")

	// A window (a lease) later, with no write since (the member holds nothing), the latency
	// is unknown again: nothing is left of the stall.
	a.holding(-12)
	h.clk.Set(now.Add(time.Millisecond + 2*time.Second))
	assert.Zero(t, a.latency(h.clk.Now()))
	assert.Equal(t, unbounded, a.Capacity())
	assert.True(t, a.claim("r", h.clk.Now()))
	a.unclaim()
}

// At start many roles are taken at once: a stall then delays the first
// writes, at most one per slot, and the estimate is that of the fastest
// of them only until one more write ends (issue 18, section 3).
func TestAdmissionStallAtStart(t *testing.T) {
	h := newHarness(t, "a", stallSettings())
	a := h.m.adm
	now := h.clk.Now()
	writeAt(a, now, time.Second, 4)
	writeAt(a, now, 1200*time.Millisecond, 1)
	assert.Equal(t, time.Second, a.latency(now), "only stalled writes: the fastest")
	writeAt(a, now.Add(10*time.Millisecond), 10*time.Millisecond, 1)
	assert.Equal(t, 10*time.Millisecond, a.latency(now.Add(10*time.Millisecond)), "one write after the stall: the stall is gone")
	assert.Equal(t, 318, a.Capacity())
}

// A pause after a shed ends once its cause has passed: the estimate says
// the member could renew twice the roles it held when it shed (issue 18,
// section 3: members paused campaigning for 8s after a 1s stall).
func TestAdmissionShedPauseEndsWithItsCause(t *testing.T) {
	h := newHarness(t, "a", stallSettings())
	a := h.m.adm
	now := h.clk.Now()
	for range 12 {
		a.holding(+1)
	}
	writeAt(a, now, 900*time.Millisecond, 6) // capacity 3
	require.True(t, a.shed(now), "12 held, capacity 3")
	a.holding(-11) // it kept one
	// The writes stay slow: paused (capacity 3 < 2 x 12).
	writeAt(a, now.Add(time.Second), 400*time.Millisecond, 6) // capacity 7
	assert.False(t, a.claim("r", now.Add(time.Second)), "paused: the overload goes on")
	// Fast again, and the slow writes out of the window (a lease): the
	// pause ends long before its 4 leases.
	at := now.Add(3 * time.Second)
	writeAt(a, at, 10*time.Millisecond, 6) // capacity 318
	assert.True(t, a.claim("r", at), "the cause has passed: campaigning again")
	a.unclaim()
}

// A loaded member's renewals go on a member-wide schedule: renewals due
// at the same instant begin pace/K apart instead of at random, an eighth
// of the pace early at the earliest, and never later than the pace cap.
// Unloaded, each renewal keeps its jitter before RenewInterval.
func TestAdmissionRenewSchedule(t *testing.T) {
	// Renew interval 2s, deadline 8s: the pace cap is 2s + 3/8 x 6s = 4.25s.
	h := newHarness(t, "a", Settings{MaxInFlight: 4, LeaseDuration: 10 * time.Second})
	a := h.m.adm
	s := h.m.s
	from := time.Now()

	for range 20 {
		every := a.renewEvery(from)
		assert.LessOrEqual(t, every, s.RenewInterval, "unmeasured: RenewInterval less jitter")
		assert.GreaterOrEqual(t, every, s.RenewInterval-max(s.RenewJitter, 0))
	}

	writeAt(a, from, 900*time.Millisecond, 1)
	a.holding(+1)
	for range 20 {
		assert.LessOrEqual(t, a.renewEvery(from), s.RenewInterval, "1 held: 0.3s pace, unloaded")
	}

	// 8 held at 0.9s: a renewal every 8 x 0.9s / (0.75 x 4) = 2.4s, so a
	// slot every 0.3s, the first an eighth early (2.1s).
	a.holding(+7)
	gap := 300 * time.Millisecond
	for i := range 8 {
		assert.Equal(t, 2100*time.Millisecond+time.Duration(i)*gap, a.renewEvery(from), "slot %d", i)
	}
	// The next free slot (4.5s) is beyond the pace cap: the cap.
	assert.Equal(t, paceCap(s), a.renewEvery(from))
	assert.Equal(t, 4250*time.Millisecond, paceCap(s))
	// A renewal due after the schedule's last slot goes when it is due.
	later := from.Add(10 * time.Second)
	writeAt(a, later, 900*time.Millisecond, 1) // the window is a lease: the first write is out of it
	assert.Equal(t, 2100*time.Millisecond, a.renewEvery(later))
	// One begun 0.15s earlier is due 0.15s before the next slot (2.4s
	// after later): the slot, 2.55s after its start.
	assert.Equal(t, 2550*time.Millisecond, a.renewEvery(later.Add(-gap/2)), "due before the next slot: the slot")
}

// The estimate is the latency 9 in 10 writes of the window stayed
// within, never counting the width slowest: the (width+1)-th slowest of
// fewer than 10 x width, the fastest of width or fewer.
func TestAdmissionEstimateOverTheWindow(t *testing.T) {
	h := newHarness(t, "a", stallSettings()) // window 2s, 5 slots
	a := h.m.adm
	now := h.clk.Now()
	rng := rand.New(rand.NewPCG(1, 2))
	var all []time.Duration
	for i := range 127 {
		at := now.Add(time.Duration(i) * 10 * time.Millisecond) // 1.27s: all in the window
		d := time.Duration(1+rng.IntN(1000)) * time.Millisecond
		writeAt(a, at, d, 1)
		all = append(all, d)
		sorted := slices.Sorted(slices.Values(all))
		want := sorted[0]
		switch n := len(all); {
		case n >= 60:
			want = sorted[n-1-n/10]
		case n > 5:
			want = sorted[n-6]
		}
		require.Equal(t, want, a.latency(at), "after %d writes", i+1)
	}
}
