package processor

import (
	"context"
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

// The capacity estimate is headroom x width x renew period / write
// latency; a member at its capacity does not campaign (the role is
// queued), and one over it by more than an eighth sheds.
func TestAdmissionCapacity(t *testing.T) {
	// Renew interval 2s, deadline 8s: the pace cap is 2s + 3/8 x 6s = 4.25s.
	h := newHarness(t, "a", Settings{MaxInFlight: 4, LeaseDuration: 10 * time.Second})
	a := h.m.adm
	assert.Equal(t, unbounded, a.Capacity(), "unbounded until a write was measured")
	a.wrote(time.Second, true)
	assert.Equal(t, 12, a.Capacity(), "0.75 x 4 x 4.25s / 1s")
	a.wrote(2*time.Second, false) // rises by half the difference at once: 1.5s
	assert.Equal(t, 8, a.Capacity())
	a.wrote(time.Second, true) // falls by a sixteenth: 1.46875s
	assert.Equal(t, 8, a.Capacity())
	assert.Equal(t, 1468750*time.Microsecond, a.latency())
	// With fewer than every slot busy a lower latency says little: it
	// falls by a sixty-fourth only.
	a.wrote(468750*time.Microsecond, false)
	assert.Equal(t, 1453125*time.Microsecond, a.latency())

	now := time.Now()
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
	// below the capacity.
	a.holding(-4) // 5 held
	pause := shedPause * 10 * time.Second
	assert.False(t, a.claim("r3", now.Add(pause-time.Millisecond)), "paused after the shed")
	require.True(t, a.claim("r3", now.Add(pause)), "pause over")
	a.unclaim()
	// A shed soon after the pause ended (the member could not keep what
	// it took) doubles the pause.
	a.holding(+5) // 10 held
	later := now.Add(pause + time.Second)
	require.True(t, a.shed(later), "10 held")
	assert.False(t, a.claim("r3", later.Add(2*pause-time.Millisecond)), "paused twice as long")
	a.holding(-4) // 5 held
	require.True(t, a.claim("r3", later.Add(2*pause)), "pause over")
	a.unclaim()

	// A challenge timeout pauses every campaign.
	now = later.Add(2 * pause)
	d := a.challengeTimedOut(now)
	assert.Positive(t, d)
	assert.False(t, a.claim("r3", now), "paused")
	assert.True(t, a.claim("r3", now.Add(d)), "pause over")
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

	a.wrote(900*time.Millisecond, true)
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
	assert.Equal(t, 2100*time.Millisecond, a.renewEvery(later))
	// One begun 0.15s earlier is due 0.15s before the next slot (2.4s
	// after later): the slot, 2.55s after its start.
	assert.Equal(t, 2550*time.Millisecond, a.renewEvery(later.Add(-gap/2)), "due before the next slot: the slot")
}
