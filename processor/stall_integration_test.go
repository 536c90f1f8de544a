package processor_test

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/faultnet"
	"github.com/krabka/krole/processor"
)

// A short stall must not become an outage. Every Produce of every client
// is held back once, for stallFor: a member loses no role to it, and every
// role has a holder again within a lease plus the stagger.

// stalls is how many stalls each test makes, a lease or more apart: where
// a stall falls in the renewal cycle decides how many renewals queue
// behind it.
const stalls = 3

// stallFor is how long each stall holds every Produce. A heartbeat held
// by it must still commit within its transaction's timeout (1s here, which
// kfake enforces to the millisecond from the transaction's first
// AddPartitionsToTxn: a longer stall aborts the session's heartbeat and
// ends the session) and within the renew margin (HeartbeatDeadline less
// HeartbeatInterval, 1.2s), with room left for the held request's round trip
// on a loaded machine under the race detector.
const stallFor = 600 * time.Millisecond

// stallProduce holds every Produce of every client from the first one on
// for d, then releases them; it returns when they are released.
func stallProduce(t *testing.T, e *env, d time.Duration) time.Time {
	t.Helper()
	held := e.fn.Hold(faultnet.Rule{APIKey: int16(kmsg.Produce), Node: faultnet.AnyNode})
	t.Cleanup(held.Release)
	require.NoError(t, held.Wait(e.ctx(10*time.Second), 1), "a Produce was held")
	time.Sleep(d) // the stall's length, on purpose
	held.Release()
	t.Logf("held %d Produce requests for %v", held.Count(), d)
	return time.Now()
}

// revocationsSince counts member's Revoked events from the event at index
// from on, by reason.
func revocationsSince(r *recorder, member codec.MemberID, from int) map[processor.Reason]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[processor.Reason]int{}
	for _, ev := range r.events[from:] {
		if ev.Kind == processor.Revoked && ev.Member == member {
			out[ev.Reason]++
		}
	}
	return out
}

// revocationCauses returns the distinct causes (Event.Err) of member's
// Revoked events from the event at index from on, for a failure's log.
func revocationCauses(r *recorder, member codec.MemberID, from int) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, ev := range r.events[from:] {
		if ev.Kind == processor.Revoked && ev.Member == member && ev.Err != nil {
			if c := ev.Err.Error(); !slices.Contains(out, c) {
				out = append(out, c)
			}
		}
	}
	return out
}

// unheldGaps returns, for each role, the longest time after the event at
// index from during which no member held it by the events (up to until
// for a gap still open).
func unheldGaps(r *recorder, roles []codec.Role, from int, until time.Time) map[codec.Role]time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[codec.Role]time.Duration{}
	for _, role := range roles {
		holders := holdersOf(r.events[:from], role)
		var since time.Time // when the role became unheld; zero while held
		if len(holders) == 0 {
			since = r.events[from].Got
		}
		for _, ev := range r.events[from:] {
			if ev.Role != role {
				continue
			}
			switch ev.Kind {
			case processor.Elected:
				if len(holders) == 0 && !since.IsZero() {
					out[role] = max(out[role], ev.Got.Sub(since))
				}
				holders[ev.Member] = ev.Token
				since = time.Time{}
			case processor.Revoked:
				delete(holders, ev.Member)
				if len(holders) == 0 {
					since = ev.Got
				}
			}
		}
		if len(holders) == 0 && !since.IsZero() {
			out[role] = max(out[role], until.Sub(since))
		}
	}
	return out
}

func eventCount(r *recorder) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.events)
}

func TestIntegrationShortStallShedsNothing(t *testing.T) {
	e := newEnv(t, itTxnTimeout, withFaults())
	roles := roleNames("stall-%02d", 24)
	s := itSettings()
	a := e.start("node-a", roles, s, nil)
	b := e.start("node-b", roles, s, nil)
	await(t, 30*time.Second, "every role held", func() bool { return allHeld(e.rec, roles) })
	e.awaitSeenBy(a, roles, 30*time.Second, a.id, b.id)
	// A lease of steady renewals before each stall, on purpose: the stall
	// comes at a different moment of the renewal cycle each time.
	time.Sleep(s.LeaseDuration)
	onset := eventCount(e.rec)
	var released time.Time
	for range stalls {
		released = stallProduce(t, e, stallFor)
		// The bound is the promise: within a lease plus the stagger of
		// the stall's end (and slack for the view's lag), every role has
		// a holder.
		await(t, s.LeaseDuration+s.Stagger+slack, "every role has a holder within a lease plus the stagger of the stall's end", func() bool {
			return allHeld(e.rec, roles)
		})
		time.Sleep(s.LeaseDuration) // steady renewals until the next stall, on purpose
	}
	// Another lease, on purpose: to see that nothing is shed late either.
	time.Sleep(s.LeaseDuration)
	now := time.Now()
	gaps := unheldGaps(e.rec, roles, onset, now)
	ra, rb := revocationsSince(e.rec, a.id, onset), revocationsSince(e.rec, b.id, onset)
	t.Logf("revocations since the stall: node-a %v %q, node-b %v %q; unheld gaps %v (stall released %v ago)", ra, revocationCauses(e.rec, a.id, onset), rb, revocationCauses(e.rec, b.id, onset), gaps, now.Sub(released).Round(time.Millisecond))
	assert.Empty(t, ra, "node-a lost no role to a stall shorter than the renew margin")
	assert.Empty(t, rb, "node-b lost no role to a stall shorter than the renew margin")
	// A gap counts from a revocation, which may come during a stall (a
	// write the stall held past the transaction timeout retires its
	// token): the promise, which the await after each stall checks, runs
	// from the stall's end, so a gap may also span the stall.
	for _, r := range roles {
		assert.LessOrEqual(t, gaps[r], stallFor+s.LeaseDuration+s.Stagger+slack, "%s unheld longer than the stall and a lease plus the stagger", r)
	}
	assert.True(t, allHeld(e.rec, roles), "every role held after the stall")
	e.rec.checkFence(t)
}

func TestIntegrationShortStallAloneKeepsItsRoles(t *testing.T) {
	e := newEnv(t, itTxnTimeout, withFaults())
	roles := roleNames("lone-%02d", 24)
	s := itSettings()
	a := e.start("node-a", roles, s, nil)
	await(t, 30*time.Second, "node-a holds every role", func() bool { return allHeld(e.rec, roles, a.id) })
	time.Sleep(s.LeaseDuration) // steady renewals before the first stall, on purpose
	onset := eventCount(e.rec)
	for range stalls {
		stallProduce(t, e, stallFor)
		await(t, s.LeaseDuration+slack, "node-a holds every role within a lease of the stall's end", func() bool {
			return allHeld(e.rec, roles, a.id)
		})
		time.Sleep(s.LeaseDuration) // steady renewals until the next stall, on purpose
	}
	time.Sleep(s.LeaseDuration) // a lease more, on purpose: nothing is shed late either
	lost := revocationsSince(e.rec, a.id, onset)
	gaps := unheldGaps(e.rec, roles, onset, time.Now())
	t.Logf("node-a's revocations: %v, causes %q; unheld gaps %v", lost, revocationCauses(e.rec, a.id, onset), gaps)
	assert.Empty(t, lost, "a member alone loses no role to a stall shorter than the renew margin")
	assert.True(t, allHeld(e.rec, roles, a.id), "node-a holds every role after the stall")
	for _, r := range roles { // from the stall's start, as above
		assert.LessOrEqual(t, gaps[r], stallFor+s.LeaseDuration+slack, "%s unheld longer than the stall and a lease", r)
	}
	e.rec.checkFence(t)
}

// The same at start, when many roles are taken at once: two members start
// for 24 roles, and as soon as the first role is taken every Produce is
// held for stallFor, while the others are being taken. No role is shed,
// and every role has a holder within a lease plus the stagger of the
// stall's end.
func TestIntegrationStallAtStartShedsNothing(t *testing.T) {
	e := newEnv(t, itTxnTimeout, withFaults())
	roles := roleNames("start-%02d", 24)
	s := itSettings()
	a := e.start("node-a", roles, s, nil)
	b := e.start("node-b", roles, s, nil)
	await(t, 30*time.Second, "a role is taken", func() bool {
		for _, r := range roles {
			if len(e.rec.holders(r)) > 0 {
				return true
			}
		}
		return false
	})
	stallProduce(t, e, stallFor)
	await(t, s.LeaseDuration+s.Stagger+slack, "every role has a holder within a lease plus the stagger of the stall's end", func() bool {
		return allHeld(e.rec, roles)
	})
	time.Sleep(2 * s.LeaseDuration) // on purpose: a role shed late shows within it
	ra, rb := revocationsSince(e.rec, a.id, 0), revocationsSince(e.rec, b.id, 0)
	gaps := unheldGaps(e.rec, roles, 0, time.Now())
	t.Logf("revocations: node-a %v, node-b %v; unheld gaps after the first event %v", ra, rb, gaps)
	assert.Zero(t, ra[processor.ReasonLeaseLost], "node-a lost no role to its deadline")
	assert.Zero(t, rb[processor.ReasonLeaseLost], "node-b lost no role to its deadline")
	assert.True(t, allHeld(e.rec, roles), "every role held")
	e.rec.checkFence(t)
}
