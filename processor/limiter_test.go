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
	for _, p := range []priority{prioCampaign, prioRelease, prioRewrite} {
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
	assert.Equal(t, prioRewrite, <-order)
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
	hold, err := l.acquire(context.Background(), prioRewrite)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := l.acquire(ctx, prioRewrite)
		errc <- err
	}()
	waitQueued(t, l, prioRewrite)
	cancel()
	require.ErrorIs(t, <-errc, context.Canceled)
	hold()
	rel, err := l.acquire(context.Background(), prioCampaign)
	require.NoError(t, err, "the slot is free again")
	rel()
}

// waitQueued waits until a waiter of priority p is queued in l.
func waitQueued(t *testing.T, l *limiter, p priority) {
	t.Helper()
	require.Eventually(t, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.q[p]) > 0
	}, failsafe, time.Millisecond, "the waiter never queued")
}

// A challenge that timed out pauses every campaign of the member (the
// role is queued meanwhile, and counted), for about RetryBackoff the
// first time, doubling with each consecutive timeout; a challenge that
// completes ends the run.
func TestAdmissionPausesAfterAChallengeTimedOut(t *testing.T) {
	h := newHarness(t, "a", Settings{})
	a := h.m.adm
	now := h.clk.Now()
	require.False(t, now.Before(a.pausedUntil()), "campaigns are not paused at first")
	d := a.challengeTimedOut(now)
	assert.GreaterOrEqual(t, d, h.m.s.RetryBackoff/2)
	assert.LessOrEqual(t, d, h.m.s.RetryBackoff)
	assert.Equal(t, now.Add(d), a.pausedUntil(), "paused")
	a.queue("r2", true)
	assert.Len(t, a.queued, 1, "a role waiting on the pause is queued")
	a.queue("r2", false)
	assert.Empty(t, a.queued)
	d2 := a.challengeTimedOut(now.Add(d))
	assert.GreaterOrEqual(t, d2, h.m.s.RetryBackoff, "a second timeout in a row doubles the pause")
	a.challengeDone()
	assert.Equal(t, 0, a.timeouts)
}

// A served or departed waiter leaves nothing behind in the queue's
// backing array, and an empty queue keeps no array.
func TestLimiterQueueKeepsNoServedWaiter(t *testing.T) {
	l := newLimiter(1)
	hold, err := l.acquire(context.Background(), prioCampaign)
	require.NoError(t, err)
	const n = 3
	got := make(chan func(), n)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gaveUp := make(chan error, 1)
	for i := range n + 1 {
		wctx := context.Background()
		if i == n {
			wctx = ctx // the last one gives up
		}
		go func() {
			rel, err := l.acquire(wctx, prioCampaign)
			if err != nil {
				gaveUp <- err
				return
			}
			got <- rel
		}()
		require.Eventually(t, func() bool {
			l.mu.Lock()
			defer l.mu.Unlock()
			return len(l.q[prioCampaign]) == i+1
		}, failsafe, time.Millisecond, "the waiter never queued")
	}
	l.mu.Lock()
	backing := l.q[prioCampaign][:n+1]
	l.mu.Unlock()
	cancel()
	require.ErrorIs(t, <-gaveUp, context.Canceled)
	hold()
	for range n {
		rel := <-got
		rel()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, w := range backing {
		assert.Nil(t, w, "slot %d of the queue's array still keeps a waiter", i)
	}
	assert.Nil(t, l.q[prioCampaign], "an empty queue keeps no array")
	assert.Zero(t, l.busy)
}
