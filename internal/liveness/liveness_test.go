package liveness

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/rolestate"
)

var t0 = time.UnixMilli(1_700_000_000_000)

func state(granted time.Time, span time.Duration, seen time.Time) rolestate.State {
	l, err := codec.NewLease("m1", codec.Token{ProducerID: 7, Epoch: 1}, granted.UnixMilli(), granted.Add(span).UnixMilli())
	if err != nil {
		panic(err)
	}
	return rolestate.State{Role: "db", Lease: &l, LeaseSeenAt: seen}
}

func TestJudge(t *testing.T) {
	const span = 3 * time.Second
	for _, tc := range []struct {
		name          string
		granted, seen time.Time
		now           time.Time
		live, pending bool
		end           time.Time
	}{
		// A fresh reader of a lease renewed a moment ago (clocks agree):
		// live until its span, by the holder's clock plus the tolerance or
		// the reader's count, whichever comes first.
		{"just renewed", t0, t0.Add(10 * time.Millisecond), t0.Add(time.Second), true, false, t0.Add(span + 10*time.Millisecond)},
		// A holder SIGKILLed 12s ago, read now: the holder's clock
		// says it ran out 9s ago; a renewal is waited for, half a span.
		{"dead, read just now", t0, t0.Add(12 * time.Second), t0.Add(12 * time.Second), true, true, t0.Add(12*time.Second + span/2)},
		{"dead, waited half a span", t0, t0.Add(12 * time.Second), t0.Add(12*time.Second + span/2), false, false, t0.Add(12*time.Second + span/2)},
		// Within the tolerance of its run-out: live, not waiting.
		{"within the tolerance", t0, t0.Add(span), t0.Add(span + 900*time.Millisecond), true, false, t0.Add(span + span/2)},
		{"past the tolerance", t0, t0.Add(span), t0.Add(span + ClockTolerance), true, true, t0.Add(span + span/2)},
		// A holder's clock far behind the reader's: pending, not dead, for
		// half a span after the read.
		{"holder clock an hour behind", t0.Add(-time.Hour), t0, t0.Add(time.Second), true, true, t0.Add(span / 2)},
		// A holder's clock far ahead: the reader's own count bounds it.
		{"holder clock an hour ahead", t0.Add(time.Hour), t0, t0.Add(span), false, false, t0.Add(span)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := Judge(state(tc.granted, span, tc.seen), tc.now)
			assert.Equal(t, tc.live, v.Live, "live")
			assert.Equal(t, tc.pending, v.Pending, "pending")
			assert.Equal(t, tc.end, v.End, "end")
		})
	}
	assert.Equal(t, Verdict{}, Judge(rolestate.State{Role: "db"}, t0), "no lease")
	rel := codec.ReleaseLease("m1", codec.Token{ProducerID: 7, Epoch: 1})
	assert.False(t, Judge(rolestate.State{Role: "db", Lease: &rel, LeaseSeenAt: t0}, t0).Live, "a release")
}

// TestJudgeBySessionHeartbeat: a lease that names its holder's member
// session is judged by its latest renewal, the session's heartbeat: a
// holder elected long ago (its lease's Deadline far behind the reader's
// clock) whose heartbeat just began is live, not pending; a heartbeat of
// another incarnation, or one that excludes the role, does not renew it;
// the session's end ends it.
func TestJudgeBySessionHeartbeat(t *testing.T) {
	const span = 3 * time.Second
	sess := codec.Session{ProducerID: 9, Epoch: 0, Nonce: "n1"}
	long := func(hb codec.Heartbeat, seen time.Time) rolestate.State {
		st := state(t0, span, t0.Add(time.Minute)) // elected a minute before the reader read it
		st.Lease.Session = &sess
		st.Session = &rolestate.SessionSeen{Heartbeat: hb, SeenAt: seen}
		return st
	}
	now := t0.Add(time.Minute + 100*time.Millisecond)
	beat := codec.Heartbeat{Member: "m1", Session: sess, GrantedAt: now.Add(-200 * time.Millisecond).UnixMilli(), Deadline: now.Add(-200*time.Millisecond + span).UnixMilli()}

	v := Judge(long(beat, now.Add(-190*time.Millisecond)), now)
	assert.True(t, v.Live, "renewed by a heartbeat 200ms ago")
	assert.False(t, v.Pending, "the heartbeat's deadline is ahead: nothing to wait for")
	assert.Equal(t, time.UnixMilli(beat.Deadline), v.RanOut)

	other := beat
	other.Session.Nonce = "n2"
	v = Judge(long(other, now), now)
	assert.True(t, v.Pending, "another incarnation's heartbeat renews nothing: the lease's own deadline ran out")

	excl := beat
	excl.Excluded = []codec.Role{"db"}
	assert.False(t, Judge(long(excl, now), now).Live, "a heartbeat that excludes the role ends it")

	end := codec.Heartbeat{Member: "m1", Session: sess, End: true}
	assert.False(t, Judge(long(end, now), now).Live, "the session's end ends it")

	// A heartbeat older than the lease (a rewrite after it) leaves the
	// lease's own times.
	st := long(beat, now)
	st.Lease.GrantedAt, st.Lease.Deadline = now.UnixMilli(), now.Add(span).UnixMilli()
	assert.Equal(t, now.Add(span), Judge(st, now).RanOut)
}

// Settle reads again while a verdict is pending: a renewal ends the wait
// at once; without one the wait ends when the verdict does.
func TestSettle(t *testing.T) {
	const span = 400 * time.Millisecond
	start := time.Now()
	dead := state(start.Add(-time.Hour), span, start)
	var reads atomic.Int32
	states, err := Settle(context.Background(), func(context.Context) ([]rolestate.State, error) {
		reads.Add(1)
		return []rolestate.State{dead}, nil
	}, time.Now)
	require.NoError(t, err)
	assert.False(t, Judge(states[0], time.Now()).Live, "no renewal came: dead")
	assert.Greater(t, reads.Load(), int32(1))

	dead = state(start.Add(-time.Hour), span, time.Now())
	renewed := state(time.Now(), span, time.Now())
	reads.Store(0)
	states, err = Settle(context.Background(), func(context.Context) ([]rolestate.State, error) {
		if reads.Add(1) == 1 {
			return []rolestate.State{dead}, nil
		}
		return []rolestate.State{renewed}, nil
	}, time.Now)
	require.NoError(t, err)
	assert.Equal(t, int32(2), reads.Load(), "the renewal ended the wait")
	assert.True(t, Judge(states[0], time.Now()).Live)

	// A frozen clock does not keep it waiting forever.
	dead = state(start.Add(-time.Hour), span, time.Now())
	frozen := func() time.Time { return dead.LeaseSeenAt }
	states, err = Settle(context.Background(), func(context.Context) ([]rolestate.State, error) {
		return []rolestate.State{dead}, nil
	}, frozen)
	require.NoError(t, err)
	assert.Len(t, states, 1)
}

// TestJudgeRenewedAt: the verdict names the latest renewal, the lease's
// or the vouching heartbeat's, whichever began later, and counts the
// time left from when the reader saw it.
func TestJudgeRenewedAt(t *testing.T) {
	const span = 2 * time.Second
	sess := codec.Session{ProducerID: 9, Epoch: 0, Nonce: "n1"}
	st := state(t0, span, t0)
	st.Lease.Session = &sess
	assert.Equal(t, t0.UnixMilli(), Judge(st, t0).VouchedAt, "no heartbeat: the lease")

	// Three spans later, a heartbeat begun 100ms ago, seen 50ms ago.
	now := t0.Add(3 * span)
	hb := codec.Heartbeat{Member: "m1", Session: sess, GrantedAt: now.Add(-100 * time.Millisecond).UnixMilli(), Deadline: now.Add(span - 100*time.Millisecond).UnixMilli()}
	st.Session = &rolestate.SessionSeen{Heartbeat: hb, SeenAt: now.Add(-50 * time.Millisecond)}
	v := Judge(st, now)
	assert.True(t, v.Live)
	assert.Equal(t, hb.GrantedAt, v.VouchedAt)
	assert.Equal(t, now.Add(-50*time.Millisecond), v.RenewalSeen)
	assert.Equal(t, now.Add(span-50*time.Millisecond), v.End, "a span from when the heartbeat was seen")
	assert.Equal(t, v.End, End(st))

	rel := codec.ReleaseLease("m1", codec.Token{ProducerID: 7, Epoch: 1})
	assert.Zero(t, Judge(rolestate.State{Role: "db", Lease: &rel}, now).VouchedAt)
	assert.True(t, End(rolestate.State{Role: "db", Lease: &rel}).IsZero())
}

// TestSession: a member session is gone once it ended or its latest
// heartbeat ran out as a holder's renewal does: a span after the reader
// saw it, or, when the member's clock says it ran out, after the wait
// for the next one.
func TestSession(t *testing.T) {
	const span = 2 * time.Second
	sess := codec.Session{ProducerID: 9, Epoch: 0, Nonce: "n1"}
	beat := func(granted, seen time.Time) *rolestate.SessionSeen {
		return &rolestate.SessionSeen{Heartbeat: codec.Heartbeat{Member: "m2", Session: sess, GrantedAt: granted.UnixMilli(), Deadline: granted.Add(span).UnixMilli()}, SeenAt: seen}
	}
	assert.Equal(t, SessionVerdict{}, Session(nil, t0), "never read: not known to be gone")
	assert.True(t, Session(&rolestate.SessionSeen{Heartbeat: codec.Heartbeat{Member: "m2", Session: sess, End: true}}, t0).Gone, "ended")

	fresh := beat(t0, t0)
	assert.False(t, Session(fresh, t0.Add(span-time.Millisecond)).Gone)
	assert.True(t, Session(fresh, t0.Add(span)).Gone, "a span after it was seen")

	// Read just now, written an hour ago: waited for, then gone.
	old := beat(t0.Add(-time.Hour), t0)
	v := Session(old, t0.Add(100*time.Millisecond))
	assert.False(t, v.Gone)
	assert.True(t, v.Pending)
	assert.True(t, Session(old, t0.Add(span/2)).Gone)
}

// Settle waits for a candidate whose member's clock says its session ran
// out, as for a holder's renewal.
func TestSettleWaitsForCandidates(t *testing.T) {
	const span = 400 * time.Millisecond
	sess := codec.Session{ProducerID: 9, Epoch: 0, Nonce: "n1"}
	start := time.Now()
	old := &rolestate.SessionSeen{Heartbeat: codec.Heartbeat{Member: "m2", Session: sess, GrantedAt: start.Add(-time.Hour).UnixMilli(), Deadline: start.Add(-time.Hour + span).UnixMilli()}, SeenAt: start}
	st := rolestate.State{Role: "db", Candidates: []rolestate.Candidate{{Member: "m2", Session: old}}}
	var reads atomic.Int32
	states, err := Settle(context.Background(), func(context.Context) ([]rolestate.State, error) {
		reads.Add(1)
		return []rolestate.State{st}, nil
	}, time.Now)
	require.NoError(t, err)
	assert.Greater(t, reads.Load(), int32(1), "read again while waiting")
	assert.True(t, Session(states[0].Candidates[0].Session, time.Now()).Gone)
}
