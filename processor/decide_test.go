package processor

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/rolestate"
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
	l.registered = off
	return l
}

// seenAt returns l having first observed the lease record at offset off at
// at (its own clock).
func seenAt(l Local, off int64, at time.Time) Local {
	l.leaseOff, l.leaseSeen = off, monoOf(at)
	return l
}

// vacantFrom returns l having first observed the vacancy key at since.
func vacantFrom(l Local, key int64, since time.Time) Local {
	l.vacantSince, l.vacantKey = monoOf(since), key
	return l
}

func holder(tok codec.Token, writtenAt time.Time) Local {
	l := local(0)
	l.held = &Held{Role: role, Member: "me", Token: tok, Lease: *leaseOf("me", tok, writtenAt, 10*time.Second)}
	l.writtenAt = monoOf(writtenAt)
	return l
}

func TestDecide(t *testing.T) {
	s := defaults()
	sec, minute := time.Second, time.Minute
	const unconfirmed = -2 // tc.open: no confirmation at now
	type tc struct {
		name string
		st   rolestate.State
		l    Local
		now  time.Time
		open int64 // the OpenProducerID of a confirmation taken at now; unconfirmed for none
		// openOff is that confirmation's OpenOffset (0 when open names none).
		openOff int64
		want    ActionKind
		until   time.Time
		prune   []codec.MemberID
		why     Reason
	}
	cases := []tc{
		{name: "holder whose registration someone removed hands over",
			st:  state(role, leaseOf("me", tok1, t0, 10*sec), 4, "x", 5),
			l:   func() Local { l := holder(tok1, t0); l.regHeld = true; return l }(),
			now: t0.Add(sec), want: DoResign, why: ReasonDeregistered},
		{name: "holder whose registration was removed before its holding showed it (a racing challenger pruned it) registers again and keeps the role",
			st: state(role, leaseOf("me", tok1, t0, 10*sec), 4, "x", 5), l: holder(tok1, t0),
			now: t0.Add(sec), want: DoRegister},
		{name: "holder whose registration is in the view keeps holding",
			st: state(role, leaseOf("me", tok1, t0, 10*sec), 4, "me", 0, "x", 5), l: holder(tok1, t0),
			now: t0.Add(3 * sec), want: DoWait, until: t0.Add(5 * sec)},
		{name: "first election: not registered", st: state(role, nil, 0), l: NewLocal(), now: t0, want: DoRegister},
		{name: "first election: sole candidate confirms before it challenges", st: state(role, nil, 0, "me", 0), l: local(0), now: t0,
			open: unconfirmed, want: DoConfirm},
		{name: "first election: sole candidate challenges once confirmed", st: state(role, nil, 0, "me", 0), l: local(0), now: t0, open: -1, want: DoChallenge},
		{name: "registration on its way to the view waits",
			st: state(role, nil, 0), l: func() Local { l := local(5); l.registeredAt = monoOf(t0); return l }(),
			now: t0.Add(sec), want: DoWait, until: t0.Add(10 * sec)},
		{name: "registration not seen for a lease registers again",
			st: state(role, nil, 0), l: func() Local { l := local(5); l.registeredAt = monoOf(t0); return l }(),
			now: t0.Add(10 * sec), want: DoRegister},
		{name: "pruned: newer records but not our registration",
			st: state(role, nil, 0, "x", 9), l: func() Local { l := local(5); l.registeredAt = monoOf(t0); return l }(),
			now: t0.Add(sec), want: DoRegister},
		{name: "stale own registration in the view does not count",
			st: state(role, nil, 0, "me", 3), l: func() Local { l := local(7); l.registeredAt = monoOf(t0); l.deregistered = 3; return l }(),
			now: t0, want: DoWait, until: t0.Add(10 * sec)},
		{name: "deregistered own registration still in the view: register",
			st: state(role, nil, 0, "me", 3), l: func() Local { l := NewLocal(); l.deregistered = 3; return l }(),
			now: t0, want: DoRegister},
		{name: "live lease of another: wait for its span after it was first observed",
			st: state(role, leaseOf("x", tok1, t0, 10*sec), 4, "x", 1, "me", 2), l: seenAt(local(2), 4, t0),
			now: t0.Add(3 * sec), want: DoWait, until: t0.Add(10 * sec)},
		{name: "a lease observed late counts from its observation, not from its deadline",
			st: state(role, leaseOf("x", tok1, t0, 10*sec), 4, "x", 1, "me", 2), l: seenAt(local(2), 4, t0.Add(4*sec)),
			now: t0.Add(10 * sec), want: DoWait, until: t0.Add(14 * sec)},
		{name: "a freshly started member counts a lease it never saw renewed from its first observation",
			st: state(role, leaseOf("x", tok1, t0.Add(-time.Hour), 10*sec), 4, "x", 1, "me", 2), l: local(2),
			now: t0, want: DoWait, until: t0.Add(10 * sec)},
		{name: "a renewal is a new record: the count restarts",
			st: state(role, leaseOf("x", tok1, t0.Add(8*sec), 10*sec), 9, "x", 1, "me", 2), l: seenAt(local(2), 4, t0),
			now: t0.Add(12 * sec), want: DoWait, until: t0.Add(22 * sec)},
		{name: "holder's clock 60s ahead: its lease expires one span after it was observed, not 60s later",
			st: state(role, leaseOf("x", tok1, t0.Add(minute), 10*sec), 4, "x", 1, "me", 2), l: seenAt(local(2), 4, t0),
			now: t0.Add(10 * sec), open: -1, want: DoChallenge, prune: []codec.MemberID{"x"}},
		{name: "holder's clock 60s ahead: live until then",
			st: state(role, leaseOf("x", tok1, t0.Add(minute), 10*sec), 4, "x", 1, "me", 2), l: seenAt(local(2), 4, t0),
			now: t0.Add(9 * sec), want: DoWait, until: t0.Add(10 * sec)},
		{name: "holder's clock 60s behind: its deadline has passed on our clock, yet its lease is live",
			st: state(role, leaseOf("x", tok1, t0.Add(-minute), 10*sec), 4, "x", 1, "me", 2), l: seenAt(local(2), 4, t0),
			now: t0.Add(sec), want: DoWait, until: t0.Add(10 * sec)},
		{name: "a lease granting more than MaxLeaseSpan counts as MaxLeaseSpan",
			st: state(role, leaseOf("x", tok1, t0, 365*24*time.Hour), 4, "x", 1, "me", 2), l: seenAt(local(2), 4, t0),
			now: t0.Add(sec), want: DoWait, until: t0.Add(rolestate.MaxLeaseSpan)},
		{name: "expired lease: top-ranked live candidate challenges and prunes the dead holder",
			st: state(role, leaseOf("x", tok1, t0, 10*sec), 4, "x", 1, "me", 2, "y14", 3), l: seenAt(local(2), 4, t0),
			now: t0.Add(10 * sec), open: -1, want: DoChallenge, prune: []codec.MemberID{"x"}},
		{name: "expired lease: rank 1 waits one stagger",
			st:  state(role, leaseOf("x", tok1, t0, 10*sec), 4, "x", 1, "y", 2, "me", 3),
			l:   vacantFrom(seenAt(local(3), 4, t0), 4, t0.Add(10*sec)),
			now: t0.Add(10 * sec), want: DoWait, until: t0.Add(11 * sec)},
		{name: "expired lease: rank 1 challenges after one stagger, prunes the skipped and the dead holder",
			st:  state(role, leaseOf("x", tok1, t0, 10*sec), 4, "x", 1, "y", 2, "me", 3),
			l:   vacantFrom(seenAt(local(3), 4, t0), 4, t0.Add(10*sec)),
			now: t0.Add(11 * sec), open: -1, want: DoChallenge, prune: []codec.MemberID{"x", "y"}},
		{name: "expired lease: rank 1 defers to a live candidate ahead of it",
			st:  state(role, leaseOf("x", tok1, t0, 10*sec), 4, "x", 1, "y", 2, "me", 3),
			l:   vacantFrom(seenAt(local(3), 4, t0), 4, t0.Add(10*sec)).withAheadLive(time.Time{}, t0.Add(15*sec), time.Time{}),
			now: t0.Add(11 * sec), want: DoWait, until: t0.Add(15 * sec)},
		{name: "expired lease: rank 1 defers to a live candidate ahead for at most a lease past its turn",
			st:  state(role, leaseOf("x", tok1, t0, 10*sec), 4, "x", 1, "y", 2, "me", 3),
			l:   vacantFrom(seenAt(local(3), 4, t0), 4, t0.Add(10*sec)).withAheadLive(time.Time{}, t0.Add(minute), time.Time{}),
			now: t0.Add(11 * sec), want: DoWait, until: t0.Add(21 * sec)},
		{name: "expired lease: rank 1 challenges a lease past its turn, though the candidate ahead is alive",
			st:  state(role, leaseOf("x", tok1, t0, 10*sec), 4, "x", 1, "y", 2, "me", 3),
			l:   vacantFrom(seenAt(local(3), 4, t0), 4, t0.Add(10*sec)).withAheadLive(time.Time{}, t0.Add(minute), time.Time{}),
			now: t0.Add(21 * sec), open: -1, want: DoChallenge, prune: []codec.MemberID{"x", "y"}},
		{name: "expired lease: rank 1 defers while the live candidate ahead takes roles, past a lease after its turn",
			st:  state(role, leaseOf("x", tok1, t0, 10*sec), 4, "x", 1, "y", 2, "me", 3),
			l:   vacantFrom(seenAt(local(3), 4, t0), 4, t0.Add(10*sec)).withAheadLive(time.Time{}, t0.Add(minute), t0.Add(20*sec)),
			now: t0.Add(21 * sec), want: DoWait, until: t0.Add(30 * sec)},
		{name: "expired lease: rank 1 challenges once the live candidate ahead took no role for a lease",
			st:  state(role, leaseOf("x", tok1, t0, 10*sec), 4, "x", 1, "y", 2, "me", 3),
			l:   vacantFrom(seenAt(local(3), 4, t0), 4, t0.Add(10*sec)).withAheadLive(time.Time{}, t0.Add(minute), t0.Add(20*sec)),
			now: t0.Add(30 * sec), open: -1, want: DoChallenge, prune: []codec.MemberID{"x", "y"}},
		{name: "expired lease: the top-ranked candidate defers to nobody",
			st:  state(role, leaseOf("x", tok1, t0, 10*sec), 4, "x", 1, "me", 2, "y14", 3),
			l:   vacantFrom(seenAt(local(2), 4, t0), 4, t0.Add(10*sec)).withAheadLive(time.Time{}, t0.Add(minute), time.Time{}),
			now: t0.Add(10 * sec), open: -1, want: DoChallenge, prune: []codec.MemberID{"x"}},
		// A dead holder's roles split: candidates rank by SplitScore, in
		// which "y" comes before "me" and "me" before "y14".
		{name: "expired lease: a candidate that joined first waits one stagger behind one of a higher split score",
			st:  state(role, leaseOf("x", tok1, t0, 10*sec), 4, "x", 1, "me", 2, "y", 3),
			l:   vacantFrom(seenAt(local(2), 4, t0), 4, t0.Add(10*sec)),
			now: t0.Add(10 * sec), want: DoWait, until: t0.Add(11 * sec)},
		{name: "expired lease: a candidate that joined last goes first on its split score",
			st:  state(role, leaseOf("x", tok1, t0, 10*sec), 4, "x", 1, "y14", 2, "me", 3),
			l:   vacantFrom(seenAt(local(3), 4, t0), 4, t0.Add(10*sec)),
			now: t0.Add(10 * sec), open: -1, want: DoChallenge, prune: []codec.MemberID{"x"}},
		{name: "release: candidates keep join order, whatever their split scores",
			st: func() rolestate.State {
				r := codec.ReleaseLease("x", tok1)
				return state(role, &r, 6, "me", 2, "y", 3)
			}(),
			l: local(2), now: t0, open: -1, want: DoChallenge},
		{name: "no lease: rank 2 waits two staggers",
			st:  state(role, nil, 0, "a", 1, "b", 2, "me", 3),
			l:   vacantFrom(local(3), -1, t0),
			now: t0.Add(sec), want: DoWait, until: t0.Add(2 * sec)},
		{name: "release: next candidate challenges at once, before any deadline",
			st: func() rolestate.State { r := codec.ReleaseLease("x", tok1); return state(role, &r, 6, "me", 3) }(),
			l:  local(3), now: t0, open: -1, want: DoChallenge},
		{name: "release by a member still registered: it ranks last and is not pruned",
			st: func() rolestate.State { r := codec.ReleaseLease("x", tok1); return state(role, &r, 6, "x", 1, "me", 3) }(),
			l:  local(3), now: t0, open: -1, want: DoChallenge},
		{name: "the member whose lease expired ranks last",
			st:  state(role, leaseOf("me", tok1, t0, 10*sec), 4, "me", 1, "a", 2, "b", 3),
			l:   vacantFrom(seenAt(local(1), 4, t0), 4, t0.Add(10*sec)),
			now: t0.Add(10 * sec), want: DoWait, until: t0.Add(12 * sec)},

		// Confirmation and held-back partitions.
		{name: "an open transaction of another producer, first seen: no challenge, confirms again after a retry backoff",
			st: state(role, leaseOf("x", tok1, t0, 10*sec), 4, "x", 1, "me", 2), l: seenAt(local(2), 4, t0),
			now: t0.Add(10 * sec), open: 99, want: DoWait, until: t0.Add(10*sec + 250*time.Millisecond)},
		{name: "the same transaction still open at the same offset: readers frozen, no challenge, confirms again a heartbeat interval later",
			st:  state(role, leaseOf("x", tok1, t0, 10*sec), 4, "x", 1, "me", 2),
			l:   func() Local { return seenAt(local(2), 4, t0).Confirmed(t0.Add(10*sec), confirmedOpen(99, 7)) }(),
			now: t0.Add(10*sec + 250*time.Millisecond), open: 99, openOff: 7, want: DoWait, until: t0.Add(12*sec + 250*time.Millisecond)},
		{name: "another transaction open at a later offset: readers moved, challenges",
			st:  state(role, leaseOf("x", tok1, t0, 10*sec), 4, "x", 1, "me", 2),
			l:   func() Local { return seenAt(local(2), 4, t0).Confirmed(t0.Add(10*sec), confirmedOpen(99, 7)) }(),
			now: t0.Add(10*sec + 250*time.Millisecond), open: 99, openOff: 9, want: DoChallenge, prune: []codec.MemberID{"x"}},
		{name: "frozen, decided again before the next confirmation is due: still waits",
			st: state(role, leaseOf("x", tok1, t0, 10*sec), 4, "x", 1, "me", 2),
			l: func() Local {
				return seenAt(local(2), 4, t0).Confirmed(t0.Add(9*sec), confirmedOpen(99, 7)).Confirmed(t0.Add(10*sec), confirmedOpen(99, 7))
			}(),
			now: t0.Add(11 * sec), open: unconfirmed, want: DoWait, until: t0.Add(12 * sec)},
		{name: "frozen a heartbeat interval ago: confirms again",
			st: state(role, leaseOf("x", tok1, t0, 10*sec), 4, "x", 1, "me", 2),
			l: func() Local {
				return seenAt(local(2), 4, t0).Confirmed(t0.Add(9*sec), confirmedOpen(99, 7)).Confirmed(t0.Add(10*sec), confirmedOpen(99, 7))
			}(),
			now: t0.Add(12 * sec), open: unconfirmed, want: DoConfirm},
		{name: "held back by the role's own producer id (a holder that died mid-write): challenges, AcquireEpoch aborts it",
			st: state(role, leaseOf("x", tok1, t0, 10*sec), 4, "x", 1, "me", 2), l: seenAt(local(2), 4, t0),
			now: t0.Add(10 * sec), open: 42, want: DoChallenge, prune: []codec.MemberID{"x"}},
		{name: "an open transaction with no lease: no holder's renewal can hide behind it, challenges",
			st: state(role, nil, 0, "me", 2), l: local(2), now: t0, open: 42, want: DoChallenge},
		{name: "an open transaction after a release: no holder's renewal can hide behind it, challenges",
			st: func() rolestate.State { r := codec.ReleaseLease("x", tok1); return state(role, &r, 6, "me", 3) }(),
			l:  local(3), now: t0, open: 99, want: DoChallenge},

		// Losses.
		{name: "fenced: leaves the lease it saw alone until a newer one shows",
			st:  state(role, leaseOf("me", tok1, t0, 10*sec), 4, "me", 1, "a", 2),
			l:   func() Local { l := seenAt(local(1), 4, t0); l.lostAt, l.lostOff = monoOf(t0.Add(3*sec)), 4; return l }(),
			now: t0.Add(10 * sec), want: DoWait, until: t0.Add(13 * sec)},
		{name: "lost a race with no lease: leaves the vacancy alone for a lease",
			st:  state(role, nil, 0, "me", 1),
			l:   func() Local { l := local(1); l.lostAt, l.lostOff = monoOf(t0), -1; return l }(),
			now: t0.Add(sec), want: DoWait, until: t0.Add(10 * sec)},
		{name: "lost a race a lease ago and no newer lease showed: confirms, then may challenge",
			st:  state(role, nil, 0, "me", 1),
			l:   func() Local { l := local(1); l.lostAt, l.lostOff = monoOf(t0), -1; return l }(),
			now: t0.Add(10 * sec), open: -1, want: DoChallenge},
		{name: "fenced, and a newer lease showed and expired: the normal rules",
			st:  state(role, leaseOf("a", tok2, t0, 10*sec), 6, "me", 1, "a", 2),
			l:   func() Local { l := seenAt(local(1), 6, t0); l.lostAt, l.lostOff = monoOf(t0), 4; return l }(),
			now: t0.Add(10 * sec), open: -1, want: DoChallenge, prune: []codec.MemberID{"a"}},

		// Retired tokens.
		{name: "own lease under the retired token: takes the role back at once, pruning nobody",
			st:  state(role, leaseOf("me", tok1, t0, 10*sec), 4, "a", 1, "me", 2),
			l:   func() Local { l := seenAt(local(2), 4, t0); l.retiredTok = &tok1; return l }(),
			now: t0.Add(3 * sec), open: -1, want: DoChallenge},
		{name: "own lease under the retired token: confirms first",
			st:  state(role, leaseOf("me", tok1, t0, 10*sec), 4, "a", 1, "me", 2),
			l:   func() Local { l := seenAt(local(2), 4, t0); l.retiredTok = &tok1; return l }(),
			now: t0.Add(3 * sec), open: unconfirmed, want: DoConfirm},
		{name: "retired token, but the view shows a newer lease: the normal rules",
			st:  state(role, leaseOf("a", tok2, t0, 10*sec), 5, "a", 1, "me", 2),
			l:   func() Local { l := seenAt(local(2), 5, t0); l.retiredTok = &tok1; return l }(),
			now: t0.Add(3 * sec), want: DoWait, until: t0.Add(10 * sec)},

		// Backoffs.
		{name: "backing off after a failure",
			st:  state(role, nil, 0, "me", 1),
			l:   func() Local { l := local(1); l.retryAt, l.failures = monoOf(t0.Add(sec)), 1; return l }(),
			now: t0, want: DoWait, until: t0.Add(sec)},
		{name: "backing off campaigning after work failed",
			st:  state(role, nil, 0),
			l:   func() Local { l := NewLocal(); l.campaignAt = monoOf(t0.Add(8 * sec)); return l }(),
			now: t0, want: DoWait, until: t0.Add(8 * sec)},

		// The holder.
		{name: "holder checks in with the member session every heartbeat interval",
			st: state(role, leaseOf("me", tok1, t0, 10*sec), 4, "me", 0), l: holder(tok1, t0),
			now: t0.Add(sec), want: DoWait, until: t0.Add(3 * sec)},
		{name: "holder rewrites its lease every LeaseRewriteInterval",
			st: state(role, leaseOf("me", tok1, t0, 10*sec), 4, "me", 0),
			l: func() Local {
				l := holder(tok1, t0)
				l.writtenAt = monoOf(t0)
				return l
			}(),
			now: t0.Add(LeaseRewriteInterval), want: DoRewriteLease},
		{name: "holder asked to rewrite its lease does so at once",
			st:  state(role, leaseOf("me", tok1, t0, 10*sec), 4, "me", 0),
			l:   func() Local { l := holder(tok1, t0); l.rewriteNow = true; return l }(),
			now: t0.Add(sec), want: DoRewriteLease},
		{name: "holder backs off after a failed rewrite",
			st: state(role, leaseOf("me", tok1, t0, 10*sec), 4, "me", 0),
			l: func() Local {
				l := holder(tok1, t0)
				l.rewriteNow = true
				l.retryAt, l.failures = monoOf(t0.Add(2500*time.Millisecond)), 1
				return l
			}(),
			now: t0.Add(2 * sec), want: DoWait, until: t0.Add(2500 * time.Millisecond)},
		{name: "holder past its heartbeat deadline leaves the end to the member session",
			st: state(role, leaseOf("me", tok1, t0, 10*sec), 4, "me", 0), l: holder(tok1, t0),
			now: t0.Add(8 * sec), want: DoWait, until: t0.Add(10 * sec)},
		{name: "holder that sees a newer token in the view steps down",
			st: state(role, leaseOf("x", tok2, t0, 10*sec), 5, "me", 0, "x", 1), l: holder(tok1, t0),
			now: t0.Add(sec), want: DoStepDown, why: ReasonFenced},
		{name: "holder ignores an older lease in a lagging view",
			st: state(role, leaseOf("x", codec.Token{ProducerID: 42}, t0.Add(-20*sec), 10*sec), 3, "me", 0), l: holder(tok1, t0),
			now: t0.Add(sec), want: DoWait, until: t0.Add(3 * sec)},
		{name: "resignation comes first",
			st:  state(role, leaseOf("me", tok1, t0, 10*sec), 4, "me", 0),
			l:   func() Local { l := holder(tok1, t0); l.resign = ReasonResigned; return l }(),
			now: t0.Add(sec), want: DoResign, why: ReasonResigned},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := c.l.Observe(c.st, "me", c.now)
			if c.want == DoChallenge || (c.open != unconfirmed && c.open != 0) {
				l = l.Confirmed(c.now, confirmedOpen(c.open, c.openOff))
			}
			a := Decide(c.st, "me", l, c.now, s)
			require.Equal(t, c.want.String(), a.Kind.String(), "reason: %s", a.Reason)
			assert.NotEmpty(t, a.Reason)
			if !c.until.IsZero() {
				assert.Equal(t, c.until, a.Until)
			}
			assert.Equal(t, c.prune, a.Prune)
			assert.Equal(t, c.why, a.Revoke)
			if c.want == DoChallenge {
				// Never without a confirmation taken now.
				unconf := c.l.Observe(c.st, "me", c.now)
				assert.Equal(t, DoConfirm.String(), Decide(c.st, "me", unconf, c.now, s).Kind.String())
			}
		})
	}
}

func TestObserveAdoptsOwnRegistration(t *testing.T) {
	l := NewLocal().Observe(state(role, nil, 0, "a", 1, "me", 4), "me", t0)
	assert.Equal(t, int64(4), l.registered)
	assert.True(t, l.registeredAt == 0)

	// A registration it deregistered itself is not adopted again.
	l = NewLocal()
	l.deregistered = 4
	l = l.Observe(state(role, nil, 0, "me", 4), "me", t0)
	assert.Equal(t, int64(-1), l.registered)
}

func TestObserveKeepsVacancyUntilANewLease(t *testing.T) {
	old := leaseOf("x", tok1, t0.Add(-10*time.Second), 10*time.Second)
	l := NewLocal().Observe(state(role, old, 4, "x", 1, "me", 2), "me", t0)
	assert.True(t, l.vacantSince == 0, "a lease first observed now is live for its span, whatever its deadline says")
	l = l.Observe(state(role, old, 4, "x", 1, "me", 2), "me", t0.Add(10*time.Second))
	assert.Equal(t, monoOf(t0.Add(10*time.Second)), l.vacantSince)
	// Candidates come and go: the same vacancy.
	l = l.Observe(state(role, old, 4, "me", 2), "me", t0.Add(11*time.Second))
	assert.Equal(t, monoOf(t0.Add(10*time.Second)), l.vacantSince)
	// A new lease ends the vacancy; its expiry is a new one.
	live := leaseOf("y", tok2, t0.Add(12*time.Second), 10*time.Second)
	l = l.Observe(state(role, live, 7, "me", 2), "me", t0.Add(12*time.Second))
	assert.True(t, l.vacantSince == 0)
	l = l.Observe(state(role, live, 7, "me", 2), "me", t0.Add(22*time.Second))
	assert.Equal(t, monoOf(t0.Add(22*time.Second)), l.vacantSince)
	assert.Equal(t, int64(7), l.vacantKey)
	// What it knew of the candidates ahead in one vacancy is not carried
	// into the next.
	l = l.withAheadLive(time.Time{}, t0.Add(time.Minute), t0)
	l = l.Observe(state(role, live, 7, "me", 2), "me", t0.Add(23*time.Second))
	assert.Equal(t, monoOf(t0.Add(time.Minute)), l.aheadLive, "the same vacancy")
	l = l.Observe(state(role, leaseOf("y", tok2, t0.Add(23*time.Second), 10*time.Second), 9, "me", 2), "me", t0.Add(23*time.Second))
	assert.True(t, l.aheadLive == 0, "a new lease ends the vacancy")
	assert.True(t, l.aheadWon == 0, "a new lease ends the vacancy")
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
	_, held = NewLocal().Observe(state(role, &r, 3), "me", t0).holder(state(role, &r, 3), "me", t0)
	assert.False(t, held, "a release holds for no observer")
}

// confirmedOpen is a confirmation that shows an open transaction of
// producer pid at offset off (pid -1: none).
func confirmedOpen(pid, off int64) rolestate.Confirmed {
	if pid < 0 {
		off = -1
	}
	return rolestate.Confirmed{OpenProducerID: pid, OpenOffset: off}
}

// What the Member learns outside the role's state (rule 0) comes before
// the succession rules, and rule 7's look-ahead and the member's paused
// campaigns come before a confirmation.
func TestDecideInputs(t *testing.T) {
	s := defaults()
	sec := time.Second
	held := state(role, leaseOf("me", tok1, t0, 10*sec), 4, "me", 0)
	withToken := func(err error) Local { l := holder(tok1, t0); l.tokenErr = err; return l }

	a := Decide(held, "me", withToken(fencing.ErrUnknownOutcome), t0.Add(sec), s)
	assert.Equal(t, DoStepDown, a.Kind)
	assert.Equal(t, ReasonTokenRetired, a.Revoke, "a retired token: rule 5 lets the member take its lease back")
	a = Decide(held, "me", withToken(fencing.ErrNotHeld), t0.Add(sec), s)
	assert.Equal(t, ReasonFenced, a.Revoke, "a forgotten token is a fence")
	assert.Equal(t, DoWait, Decide(held, "me", withToken(nil), t0.Add(sec), s).Kind)

	l := local(0)
	l.instanceAct = &Action{Kind: DoRegister, Reason: "answer"}
	assert.Equal(t, *l.instanceAct, Decide(state(role, nil, 0, "me", 0), "me", l, t0, s), "the instance rules' verdict as it is")

	l = local(0)
	l.withdrawn = true
	assert.Equal(t, DoWait, Decide(state(role, nil, 0, "me", 0), "me", l, t0, s).Kind, "withdrawn: no campaign")

	// Rank 1 in its turn, on a source that can tell who is alive.
	vacant := state(role, leaseOf("x", tok1, t0, 10*sec), 4, "x", 1, "y", 2, "me", 3)
	l = vacantFrom(seenAt(local(3), 4, t0), 4, t0.Add(10*sec))
	l.lookAhead = true
	now := t0.Add(11 * sec)
	assert.Equal(t, DoLookAhead, Decide(vacant, "me", l, now, s).Kind)
	assert.Equal(t, DoConfirm, Decide(vacant, "me", l.withAheadLive(now, time.Time{}, time.Time{}), now, s).Kind, "nobody ahead alive")
	a = Decide(vacant, "me", l.withAheadLive(now, now.Add(sec), time.Time{}), now, s)
	assert.Equal(t, DoWait, a.Kind, "defers to the live candidate ahead")
	assert.False(t, a.Deferring.IsZero())

	l = l.withAheadLive(now, time.Time{}, time.Time{})
	l.pausedUntil, l.jitter = monoOf(now.Add(sec)), 100*time.Millisecond
	a = Decide(vacant, "me", l, now, s)
	assert.Equal(t, DoWait, a.Kind, "campaigns paused")
	assert.True(t, a.paused)
	assert.Equal(t, now.Add(s.HeartbeatInterval/2+100*time.Millisecond), a.Until)
	l.aheadAt = monoOf(now.Add(sec))
	assert.Equal(t, DoConfirm, Decide(vacant, "me", l, now.Add(sec), s).Kind, "resumed")
}
