package processor_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/processor"
)

// An operator's step-down (what `krole resign --member` writes: a
// tombstone on the holder's registration, here through the transport's
// Deregister) of a holder whose work drains for longer than a lease after
// its ctx ends (3s, lease 2s, local deadline 1.6s): the holder renews its
// lease under its token while work stops, releases only once work has
// returned, and the next candidate's work starts after that, never beside
// it. Before the fix the holder waited for work only until its local
// deadline, without renewing, then released: node-b's work started while
// node-a's still ran.
func TestIntegrationDeregisteredHolderRenewsUntilItsWorkHasStopped(t *testing.T) {
	e := newEnv(t, itTxnTimeout)
	role := codec.Role("drain")
	s := itSettings()
	const drain = 3 * time.Second

	var mu sync.Mutex
	var aCancelled, aStopped, bStarted time.Time // a's work told to stop, returned; b's work began
	aWork := func(ctx context.Context, _ processor.Held) error {
		<-ctx.Done()
		mu.Lock()
		aCancelled = time.Now()
		mu.Unlock()
		time.Sleep(drain) // drains, whatever its ctx says
		mu.Lock()
		aStopped = time.Now()
		mu.Unlock()
		return nil
	}
	bWork := func(ctx context.Context, _ processor.Held) error {
		mu.Lock()
		if bStarted.IsZero() {
			bStarted = time.Now()
		}
		mu.Unlock()
		<-ctx.Done()
		return nil
	}
	a := e.start("node-a", []codec.Role{role}, s, aWork)
	holder, _ := e.soleHolder(role, 10*time.Second)
	require.Equal(t, a.id, holder)
	b := e.start("node-b", []codec.Role{role}, s, bWork)
	e.awaitCandidate(role, b.id)
	time.Sleep(viewWarmup)

	sent := time.Now()
	require.NoError(t, e.probe.Deregister(e.ctx(10*time.Second), role, a.id))
	el := awaitElected(t, e.rec, role, b.id, sent, drain+s.LeaseDuration+10*time.Second)
	await(t, 10*time.Second, "node-b's work starts", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return !bStarted.IsZero()
	})

	mu.Lock()
	cancelled, stopped, started := aCancelled, aStopped, bStarted
	mu.Unlock()
	require.False(t, stopped.IsZero(), "node-b's work started while node-a's work still ran")
	assert.True(t, started.After(stopped), "node-b's work started at %s, before node-a's returned at %s",
		started.Format("15:04:05.000"), stopped.Format("15:04:05.000"))
	assert.True(t, el.Got.After(stopped), "node-b was elected before node-a's work returned")

	rev := e.rec.find(processor.Revoked, role, func(ev stamped) bool { return ev.Member == a.id })
	require.Len(t, rev, 1)
	assert.Equal(t, processor.ReasonDeregistered, rev[0].Reason)

	// node-a renewed while its work drained, and released after it.
	e.rec.mu.Lock()
	var renewals int
	var release *write
	for i := range e.rec.writes {
		w := e.rec.writes[i]
		if w.Role == role && w.Member == a.id && !w.Start.Before(cancelled) && w.Lease.Released() {
			release = &w
		}
	}
	for _, b := range e.rec.beats { // the member session's heartbeats, vouching for the role
		if b.hb.Member == a.id && !b.hb.End && !b.start.Before(cancelled) && b.end.Before(stopped) && !slices.Contains(b.hb.Excluded, role) {
			renewals++
		}
	}
	e.rec.mu.Unlock()
	assert.GreaterOrEqual(t, renewals, 2, "node-a's heartbeats renewed its lease while its work drained")
	require.NotNil(t, release, "node-a released the role")
	assert.True(t, release.Start.After(stopped), "node-a released the role before its work returned")
	e.agree(role, b.id, el.Token)
	e.rec.checkFence(t)
}

// TestIntegrationHolderWhoseRunEndsRenewsUntilItsWorkHasStopped: the
// same when the holder's Run context ends (a library user shutting down,
// election.Session.Close): its work drains for longer than a lease, and
// its member session goes on vouching for the role meanwhile; the
// successor is elected, and its work starts, only after node-a's work
// returned and node-a's session end (written once its runners are done)
// released the role.
func TestIntegrationHolderWhoseRunEndsRenewsUntilItsWorkHasStopped(t *testing.T) {
	e := newEnv(t, itTxnTimeout)
	role := codec.Role("drain-run")
	s := itSettings()
	const drain = 3 * time.Second

	var mu sync.Mutex
	var aCancelled, aStopped, bStarted time.Time
	aWork := func(ctx context.Context, _ processor.Held) error {
		<-ctx.Done()
		mu.Lock()
		aCancelled = time.Now()
		mu.Unlock()
		time.Sleep(drain) // drains, whatever its ctx says
		mu.Lock()
		aStopped = time.Now()
		mu.Unlock()
		return nil
	}
	bWork := func(ctx context.Context, _ processor.Held) error {
		mu.Lock()
		if bStarted.IsZero() {
			bStarted = time.Now()
		}
		mu.Unlock()
		<-ctx.Done()
		return nil
	}
	a := e.start("node-a", []codec.Role{role}, s, aWork)
	holder, _ := e.soleHolder(role, 10*time.Second)
	require.Equal(t, a.id, holder)
	b := e.start("node-b", []codec.Role{role}, s, bWork)
	e.awaitCandidate(role, b.id)
	time.Sleep(viewWarmup)

	sent := time.Now()
	a.cancel()
	el := awaitElected(t, e.rec, role, b.id, sent, drain+s.LeaseDuration+10*time.Second)
	await(t, 10*time.Second, "node-b's work starts", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return !bStarted.IsZero()
	})
	mu.Lock()
	cancelled, stopped, started := aCancelled, aStopped, bStarted
	mu.Unlock()
	require.False(t, stopped.IsZero(), "node-b's work started while node-a's work still ran")
	assert.True(t, started.After(stopped), "node-b's work started at %s, before node-a's returned at %s",
		started.Format("15:04:05.000"), stopped.Format("15:04:05.000"))
	assert.True(t, el.Got.After(stopped), "node-b was elected before node-a's work returned")

	e.rec.mu.Lock()
	var renewals int
	var end *beat
	for i := range e.rec.beats {
		b := e.rec.beats[i]
		if b.hb.Member != a.id || b.start.Before(cancelled) {
			continue
		}
		switch {
		case b.hb.End:
			end = &b
		case b.end.Before(stopped) && !slices.Contains(b.hb.Excluded, role):
			renewals++
		}
	}
	e.rec.mu.Unlock()
	assert.GreaterOrEqual(t, renewals, 2, "node-a's heartbeats renewed its lease while its work drained")
	require.NotNil(t, end, "node-a ended its session")
	assert.True(t, end.start.After(stopped), "node-a ended its session before its work returned")
	e.agree(role, b.id, el.Token)
	e.rec.checkFence(t)
}
