package processor

import (
	"github.com/krabka/krole/rolestate"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
)

const role = codec.Role("controller")

var (
	tok1 = codec.Token{ProducerID: 42, Epoch: 1}
	tok2 = codec.Token{ProducerID: 42, Epoch: 2}
)

func defaults() Settings { return Settings{}.WithDefaults() }

// local builds a Local for a member registered at off (seen in the view).
func local(off int64) Local {
	l := NewLocal()
	l.Registered = off
	return l
}

func holder(tok codec.Token, renewedAt time.Time) Local {
	l := local(0)
	l.Held = &Held{Role: role, Member: "me", Token: tok, Lease: *leaseOf("me", tok, renewedAt, 10*time.Second)}
	l.RenewedAt = renewedAt
	return l
}

func TestDecide(t *testing.T) {
	s := defaults()
	sec := time.Second
	type tc struct {
		name  string
		st    rolestate.State
		l     Local
		now   time.Time
		want  ActionKind
		until time.Time
		prune []codec.MemberID
		why   Reason
	}
	cases := []tc{
		{name: "first election: not registered", st: state(role, nil, 0), l: NewLocal(), now: t0, want: DoRegister},
		{name: "first election: sole candidate challenges at once", st: state(role, nil, 0, "me", 0), l: local(0), now: t0, want: DoChallenge},
		{name: "registration on its way to the view waits",
			st: state(role, nil, 0), l: func() Local { l := local(5); l.RegisteredAt = t0; return l }(),
			now: t0.Add(sec), want: DoWait, until: t0.Add(10 * sec)},
		{name: "registration not seen for a lease registers again",
			st: state(role, nil, 0), l: func() Local { l := local(5); l.RegisteredAt = t0; return l }(),
			now: t0.Add(10 * sec), want: DoRegister},
		{name: "pruned: newer records but not our registration",
			st: state(role, nil, 0, "x", 9), l: func() Local { l := local(5); l.RegisteredAt = t0; return l }(),
			now: t0.Add(sec), want: DoRegister},
		{name: "stale own registration in the view does not count",
			st: state(role, nil, 0, "me", 3), l: func() Local { l := local(7); l.RegisteredAt = t0; l.Retired = 3; return l }(),
			now: t0, want: DoWait, until: t0.Add(10 * sec)},
		{name: "deregistered own registration still in the view: register",
			st: state(role, nil, 0, "me", 3), l: func() Local { l := NewLocal(); l.Retired = 3; return l }(),
			now: t0, want: DoRegister},
		{name: "live lease of another: wait for its deadline",
			st: state(role, leaseOf("x", tok1, t0, 10*sec), 4, "x", 1, "me", 2), l: local(2),
			now: t0.Add(3 * sec), want: DoWait, until: t0.Add(10 * sec)},
		{name: "expired lease: top-ranked live candidate challenges and prunes the dead holder",
			st: state(role, leaseOf("x", tok1, t0, 10*sec), 4, "x", 1, "me", 2, "y", 3), l: local(2),
			now: t0.Add(10 * sec), want: DoChallenge, prune: []codec.MemberID{"x"}},
		{name: "expired lease: rank 1 waits one stagger",
			st:  state(role, leaseOf("x", tok1, t0, 10*sec), 4, "x", 1, "y", 2, "me", 3),
			l:   func() Local { l := local(3); l.VacantSince, l.VacantKey = t0.Add(10*sec), 4; return l }(),
			now: t0.Add(10 * sec), want: DoWait, until: t0.Add(11 * sec)},
		{name: "expired lease: rank 1 challenges after one stagger, prunes the skipped and the dead holder",
			st:  state(role, leaseOf("x", tok1, t0, 10*sec), 4, "x", 1, "y", 2, "me", 3),
			l:   func() Local { l := local(3); l.VacantSince, l.VacantKey = t0.Add(10*sec), 4; return l }(),
			now: t0.Add(11 * sec), want: DoChallenge, prune: []codec.MemberID{"x", "y"}},
		{name: "no lease: rank 2 waits two staggers",
			st:  state(role, nil, 0, "a", 1, "b", 2, "me", 3),
			l:   func() Local { l := local(3); l.VacantSince, l.VacantKey = t0, -1; return l }(),
			now: t0.Add(sec), want: DoWait, until: t0.Add(2 * sec)},
		{name: "release: next candidate challenges at once, before any deadline",
			st: func() rolestate.State { r := codec.ReleaseLease("x", tok1); return state(role, &r, 6, "me", 3) }(),
			l:  local(3), now: t0, want: DoChallenge},
		{name: "release by a member still registered: it ranks last and is not pruned",
			st: func() rolestate.State { r := codec.ReleaseLease("x", tok1); return state(role, &r, 6, "x", 1, "me", 3) }(),
			l:  local(3), now: t0, want: DoChallenge},
		{name: "the member whose lease expired ranks last",
			st:  state(role, leaseOf("me", tok1, t0, 10*sec), 4, "me", 1, "a", 2, "b", 3),
			l:   func() Local { l := local(1); l.VacantSince, l.VacantKey = t0.Add(10*sec), 4; return l }(),
			now: t0.Add(10 * sec), want: DoWait, until: t0.Add(12 * sec)},
		{name: "lost a race: leaves the vacancy alone for a lease",
			st:  state(role, nil, 0, "me", 1),
			l:   func() Local { l := local(1); l.LostKey, l.LostAt = -1, t0; return l }(),
			now: t0.Add(sec), want: DoWait, until: t0.Add(10 * sec)},
		{name: "lost a race a lease ago: challenges again",
			st:  state(role, nil, 0, "me", 1),
			l:   func() Local { l := local(1); l.LostKey, l.LostAt = -1, t0; return l }(),
			now: t0.Add(10 * sec), want: DoChallenge},
		{name: "backing off after a failure",
			st:  state(role, nil, 0, "me", 1),
			l:   func() Local { l := local(1); l.RetryAt, l.Failures = t0.Add(sec), 1; return l }(),
			now: t0, want: DoWait, until: t0.Add(sec)},
		{name: "holder waits for the renew interval",
			st: state(role, leaseOf("me", tok1, t0, 10*sec), 4, "me", 0), l: holder(tok1, t0),
			now: t0.Add(sec), want: DoWait, until: t0.Add(2 * sec)},
		{name: "holder renews every renew interval",
			st: state(role, leaseOf("me", tok1, t0, 10*sec), 4, "me", 0), l: holder(tok1, t0),
			now: t0.Add(2 * sec), want: DoRenew},
		{name: "holder backs off after a failed renewal",
			st: state(role, leaseOf("me", tok1, t0, 10*sec), 4, "me", 0),
			l: func() Local {
				l := holder(tok1, t0)
				l.RetryAt, l.Failures = t0.Add(2500*time.Millisecond), 1
				return l
			}(),
			now: t0.Add(2 * sec), want: DoWait, until: t0.Add(2500 * time.Millisecond)},
		{name: "holder past its renew deadline steps down on its own",
			st: state(role, leaseOf("me", tok1, t0, 10*sec), 4, "me", 0), l: holder(tok1, t0),
			now: t0.Add(8 * sec), want: DoStepDown, why: ReasonLeaseLost},
		{name: "holder that sees a newer token in the view steps down",
			st: state(role, leaseOf("x", tok2, t0, 10*sec), 5, "me", 0, "x", 1), l: holder(tok1, t0),
			now: t0.Add(sec), want: DoStepDown, why: ReasonFenced},
		{name: "holder ignores an older lease in a lagging view",
			st: state(role, leaseOf("x", codec.Token{ProducerID: 42}, t0.Add(-20*sec), 10*sec), 3, "me", 0), l: holder(tok1, t0),
			now: t0.Add(sec), want: DoWait, until: t0.Add(2 * sec)},
		{name: "resignation comes first",
			st:  state(role, leaseOf("me", tok1, t0, 10*sec), 4, "me", 0),
			l:   func() Local { l := holder(tok1, t0); l.Resign = ReasonResigned; return l }(),
			now: t0.Add(sec), want: DoResign, why: ReasonResigned},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := c.l.Observe(c.st, "me", c.now)
			a := Decide(c.st, "me", l, c.now, s)
			require.Equal(t, c.want.String(), a.Kind.String(), "reason: %s", a.Reason)
			assert.NotEmpty(t, a.Reason)
			if !c.until.IsZero() {
				assert.Equal(t, c.until, a.Until)
			}
			assert.Equal(t, c.prune, a.Prune)
			assert.Equal(t, c.why, a.Revoke)
		})
	}
}

func TestObserveAdoptsOwnRegistration(t *testing.T) {
	l := NewLocal().Observe(state(role, nil, 0, "a", 1, "me", 4), "me", t0)
	assert.Equal(t, int64(4), l.Registered)
	assert.True(t, l.RegisteredAt.IsZero())

	// A registration it deregistered itself is not adopted again.
	l = NewLocal()
	l.Retired = 4
	l = l.Observe(state(role, nil, 0, "me", 4), "me", t0)
	assert.Equal(t, int64(-1), l.Registered)
}

func TestObserveKeepsVacancyUntilANewLease(t *testing.T) {
	expired := leaseOf("x", tok1, t0.Add(-10*time.Second), 10*time.Second)
	l := NewLocal().Observe(state(role, expired, 4, "x", 1, "me", 2), "me", t0)
	assert.Equal(t, t0, l.VacantSince)
	// Candidates come and go: the same vacancy.
	l = l.Observe(state(role, expired, 4, "me", 2), "me", t0.Add(time.Second))
	assert.Equal(t, t0, l.VacantSince)
	// A live lease ends the vacancy; its expiry is a new one.
	live := leaseOf("y", tok2, t0.Add(time.Second), 10*time.Second)
	l = l.Observe(state(role, live, 7, "me", 2), "me", t0.Add(2*time.Second))
	assert.True(t, l.VacantSince.IsZero())
	l = l.Observe(state(role, live, 7, "me", 2), "me", t0.Add(11*time.Second))
	assert.Equal(t, t0.Add(11*time.Second), l.VacantSince)
	assert.Equal(t, int64(7), l.VacantKey)
}

func TestReleaseLease(t *testing.T) {
	r := codec.ReleaseLease("me", tok1)
	require.NoError(t, r.Validate(), "a release is a valid lease")
	assert.True(t, (r).Released())
	skewed := t0.Add(-365 * 24 * time.Hour).UnixMilli() // a clock a year behind
	assert.True(t, r.Expired(skewed), "a release is expired under every clock")
	assert.False(t, (*leaseOf("me", tok1, t0, time.Second)).Released())
	assert.False(t, (*leaseOf("me", tok1, t0, 2*time.Millisecond)).Released(), "the shortest lease Validate allows")
	_, held := state(role, &r, 3).Holder(skewed)
	assert.False(t, held)
}
