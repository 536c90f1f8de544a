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
// it. A holder that waited for work only until its local deadline, without
// renewing, and then released would let node-b's work start while node-a's
// still ran.
func TestIntegrationDeregisteredHolderRenewsUntilItsWorkHasStopped(t *testing.T) {
	d := drainingHandover(t, "drain", func(e *env, a *node) {
		require.NoError(t, e.probe.Deregister(e.ctx(10*time.Second), "drain", a.id))
	})
	rev := d.e.rec.find(processor.Revoked, "drain", func(ev stamped) bool { return ev.Member == d.a.id })
	require.Len(t, rev, 1)
	assert.Equal(t, processor.ReasonDeregistered, rev[0].Reason)

	// node-a renewed while its work drained, and released after it. The
	// release is recorded once node-a's call returns, which may be after
	// node-b saw it committed and was elected.
	var release *write
	await(t, 10*time.Second, "node-a's release", func() bool {
		d.e.rec.mu.Lock()
		defer d.e.rec.mu.Unlock()
		for i := range d.e.rec.writes {
			w := d.e.rec.writes[i]
			if w.Role == "drain" && w.Member == d.a.id && !w.Start.Before(d.cancelled) && w.Lease.Released() {
				release = &w
			}
		}
		return release != nil
	})
	assert.GreaterOrEqual(t, d.renewals("drain"), 2, "node-a's heartbeats renewed its lease while its work drained")
	require.NotNil(t, release, "node-a released the role")
	assert.True(t, release.Start.After(d.stopped), "node-a released the role before its work returned")
	d.e.agree("drain", d.b.id, d.el.Token)
	d.e.rec.checkFence(t)
}

// TestIntegrationHolderWhoseRunEndsRenewsUntilItsWorkHasStopped: the
// same when the holder's Run context ends (a library user shutting down,
// election.Session.Close): its work drains for longer than a lease, and
// its member session goes on vouching for the role meanwhile; the
// successor is elected, and its work starts, only after node-a's work
// returned and node-a's session end (written once its runners are done)
// released the role.
func TestIntegrationHolderWhoseRunEndsRenewsUntilItsWorkHasStopped(t *testing.T) {
	d := drainingHandover(t, "drain-run", func(_ *env, a *node) { a.cancel() })

	// The session end is recorded once node-a's call returns, which may
	// be after node-b saw it committed and was elected.
	var end *beat
	await(t, 10*time.Second, "node-a's session end", func() bool {
		d.e.rec.mu.Lock()
		defer d.e.rec.mu.Unlock()
		for i := range d.e.rec.beats {
			if b := d.e.rec.beats[i]; b.hb.Member == d.a.id && b.hb.End && !b.start.Before(d.cancelled) {
				end = &b
			}
		}
		return end != nil
	})
	assert.GreaterOrEqual(t, d.renewals("drain-run"), 2, "node-a's heartbeats renewed its lease while its work drained")
	require.NotNil(t, end, "node-a ended its session")
	assert.True(t, end.start.After(d.stopped), "node-a ended its session before its work returned")
	d.e.agree("drain-run", d.b.id, d.el.Token)
	d.e.rec.checkFence(t)
}

// drained is what drainingHandover saw.
type drained struct {
	e                  *env
	a, b               *node
	el                 stamped   // node-b's election
	cancelled, stopped time.Time // node-a's work told to stop, returned
}

// drainingHandover makes node-a hold role with work that drains for 3s
// (longer than a lease of 2s) once its ctx ends, queues node-b, then calls
// stepDown, and waits until node-b is elected and its work starts. It
// asserts that node-b was elected, and its work started, only after
// node-a's work returned.
func drainingHandover(t *testing.T, role codec.Role, stepDown func(e *env, a *node)) drained {
	t.Helper()
	e := newEnv(t, itTxnTimeout)
	s := itSettings()
	const drain = 3 * time.Second

	var mu sync.Mutex
	var aCancelled, aStopped, bStarted time.Time // a's work told to stop, returned; b's work began
	aWork := func(ctx context.Context, _ processor.Held) error {
		<-ctx.Done()
		mu.Lock()
		aCancelled = time.Now()
		mu.Unlock()
		time.Sleep(drain) // on purpose: drains, whatever its ctx says
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
	a, _ := e.holder("node-a", role, s, aWork)
	b := e.candidate("node-b", role, s, bWork)
	e.awaitLive(role, a, b)

	sent := time.Now()
	stepDown(e, a)
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
	return drained{e: e, a: a, b: b, el: el, cancelled: cancelled, stopped: stopped}
}

// renewals counts node-a's heartbeats that vouched for role, begun after
// its work was told to stop and answered before it returned.
func (d drained) renewals(role codec.Role) int {
	d.e.rec.mu.Lock()
	defer d.e.rec.mu.Unlock()
	n := 0
	for _, b := range d.e.rec.beats {
		if b.hb.Member == d.a.id && !b.hb.End && !b.start.Before(d.cancelled) && b.end.Before(d.stopped) && !slices.Contains(b.hb.Excluded, role) {
			n++
		}
	}
	return n
}
