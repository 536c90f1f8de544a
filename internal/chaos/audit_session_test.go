package chaos

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
)

// The member sessions of sessioned: a's and b's incarnations.
var (
	sessA = Session{PID: 100, Epoch: 0, Nonce: "na"}
	sessB = Session{PID: 101, Epoch: 0, Nonce: "nb"}
)

// heartbeat is a committed heartbeat of member's session s whose batch was
// built at ts, excluding roles.
func heartbeat(member string, s Session, off, ts int64, excluded ...string) Heartbeat {
	return Heartbeat{Member: member, Session: s, GrantedAt: ts, Deadline: ts + 2000, Excluded: excluded,
		Batch: Batch{Partition: 1, Offset: off, ProducerID: s.PID, ProducerEpoch: s.Epoch, Timestamp: ts}}
}

// beat appends member's heartbeats under s, one every heartbeat interval from
// from until before to.
func beat(h *History, member string, s Session, from, to int64, excluded ...string) {
	for ts := from; ts < to; ts += ms(h.Settings.Renew) {
		h.Heartbeats = append(h.Heartbeats, heartbeat(member, s, int64(len(h.Heartbeats)), ts, excluded...))
	}
}

// sessioned is clean under the member session design: each holding writes
// one lease, at its election, naming its member's session, and the
// session's heartbeats renew it every heartbeat interval (a's until its kill
// at t0+1000, b's until the shutdown).
func sessioned() History {
	h := clean()
	h.Leases = []Lease{leaseAt("r", "a", tok(0), 0, t0), leaseAt("r", "b", tok(1), 1, t0+2995)}
	h.Leases[0].Session, h.Leases[1].Session = &sessA, &sessB
	beat(&h, "a", sessA, t0+400, t0+1000)
	beat(&h, "b", sessB, t0+3395, h.Shutdown)
	return h
}

// A holding renewed by its session's heartbeats alone is judged from its
// last heartbeat: the role held until the shutdown by b, whose one lease
// was written 17 s before it, is no gap (judged from b's lease, it was
// one), and a's holding ends at its last heartbeat.
func TestAuditSessionRenewals(t *testing.T) {
	h := sessioned()
	r := Audit(h)
	assert.Empty(t, r.Violations)
	assert.Equal(t, len(h.Heartbeats), r.Heartbeats)
	require.Len(t, r.Gaps, 2)
	for _, g := range r.Gaps {
		switch g.After {
		case tok(0):
			assert.Equal(t, t0+800, g.From, "a's last heartbeat")
		case tok(1):
			assert.Equal(t, h.Heartbeats[len(h.Heartbeats)-1].Timestamp, g.From, "b's last heartbeat")
		}
	}
	last := lastRenewal(h)
	assert.Equal(t, t0+800, last[roleToken{"r", tok(0)}])
	assert.Equal(t, h.Heartbeats[len(h.Heartbeats)-1].Timestamp, last[roleToken{"r", tok(1)}])

	// A heartbeat of another incarnation (another nonce, or another
	// producer id) or of another member renews nothing; a later epoch of
	// the same incarnation does.
	for _, tc := range []struct {
		member string
		s      Session
		want   int64
	}{
		{"a", Session{PID: 100, Epoch: 0, Nonce: "other"}, t0 + 800},
		{"a", Session{PID: 102, Epoch: 0, Nonce: "na"}, t0 + 800},
		{"b", sessA, t0 + 800},
		{"a", Session{PID: 100, Epoch: 3, Nonce: "na"}, t0 + 950},
	} {
		h := sessioned()
		h.Heartbeats = append(h.Heartbeats, heartbeat(tc.member, tc.s, 99, t0+950))
		assert.Equal(t, tc.want, lastRenewal(h)[roleToken{"r", tok(0)}], "%s %s", tc.member, tc.s)
	}
}

// (a) under sessions: a holder cut off at t0+1000 whose last heartbeat
// vouching for the role began at t0+800 has its deadline at t0+2400: a
// revocation by t0+3400 is within the tolerance, one at t0+3500 is not.
// Judged from its one lease (t0), the first would be reported too. A
// heartbeat that excludes the role does not move the deadline.
func TestAuditOverlapSession(t *testing.T) {
	for _, tc := range []struct {
		at       int64
		excluded bool
		want     int
	}{{t0 + 3400, false, 0}, {t0 + 3500, false, 1}, {t0 + 3100, true, 1}} {
		h := sessioned()
		h.Faults[0].Kind = FaultPartition
		if tc.excluded {
			h.Heartbeats[1].Excluded = []string{"r"} // the one at t0+800: the base is t0+400
		}
		h.Events = append(h.Events, Event{Kind: "revoked", Role: "r", Member: "a", PID: 1, Epoch: 0, Reason: "lease lost", Wall: tc.at})
		vs := reported(Audit(h), KindOverlap)
		assert.Len(t, vs, tc.want, "revoked at t0+%d, excluded %t", tc.at-t0, tc.excluded)
		if len(vs) > 0 && !tc.excluded {
			assert.Contains(t, vs[0].Evidence, "last renewal begun "+stamp(t0+800))
		}
	}

	// The session goes on after the role is lost (the member holds
	// others), its heartbeats naming the role again once its view shows
	// b's lease: they renew nothing of a's holding past b's minted line
	// (t0+2990), so a holding on until t0+6000 is reported (deadline
	// t0+4590, + tolerance); one revoked at t0+5500 is not.
	for _, tc := range []struct {
		at   int64
		want int
	}{{t0 + 5500, 0}, {t0 + 6000, 1}} {
		h := sessioned()
		h.Faults = nil
		beat(&h, "a", sessA, t0+1200, h.Shutdown)
		h.Events = append(h.Events, Event{Kind: "revoked", Role: "r", Member: "a", PID: 1, Epoch: 0, Reason: "lease lost", Wall: tc.at})
		assert.Len(t, reported(Audit(h), KindOverlap), tc.want, "revoked at t0+%d", tc.at-t0)
	}
}

// A session end releases every lease of its incarnation: the role is
// without a holder from it, as from a release. A heartbeat committed under
// another producer than the session it names is reported (author).
func TestAuditSessionEnd(t *testing.T) {
	h := sessioned()
	h.Faults[0] = Fault{Kind: FaultRestart, Target: "a", Start: t0 + 1000, End: t0 + 4000}
	end := heartbeat("a", sessA, 50, t0+1050)
	end.GrantedAt, end.Deadline, end.End = 0, 0, true
	h.Heartbeats = append(h.Heartbeats, end)
	r := Audit(h)
	assert.Empty(t, r.Violations)
	assert.Equal(t, 1, r.SessionEnds)
	assert.Equal(t, t0+1050, lastRenewal(h)[roleToken{"r", tok(0)}])

	h = sessioned()
	h.Heartbeats[0].ProducerEpoch = 7
	vs := reported(Audit(h), KindAuthor)
	require.Len(t, vs, 1)
	assert.Contains(t, vs[0].Evidence, "names a session 100/0/na but was written by producer 100/7")
}

// The auditor reads the role topic's values on its own; what it reads
// must be what package codec writes.
func TestDecodeSessionRecords(t *testing.T) {
	s := codec.Session{ProducerID: 7, Epoch: 2, Nonce: "abc"}
	b, err := codec.EncodeRecord(codec.Record{Lease: &codec.Lease{Member: "m1", Token: codec.Token{ProducerID: 5, Epoch: 1}, GrantedAt: 10, Deadline: 2010, Session: &s}})
	require.NoError(t, err)
	l, err := decodeLease(b)
	require.NoError(t, err)
	assert.Equal(t, Lease{Member: "m1", Token: Token{PID: 5, Epoch: 1}, GrantedAt: 10, Deadline: 2010, Session: &Session{PID: 7, Epoch: 2, Nonce: "abc"}}, l)

	b, err = codec.EncodeRecord(codec.Record{Heartbeat: &codec.Heartbeat{Member: "m1", Session: s, GrantedAt: 20, Deadline: 2020, Excluded: []codec.Role{"r1"}}})
	require.NoError(t, err)
	hb, err := decodeHeartbeat(b)
	require.NoError(t, err)
	assert.Equal(t, Heartbeat{Member: "m1", Session: Session{PID: 7, Epoch: 2, Nonce: "abc"}, GrantedAt: 20, Deadline: 2020, Excluded: []string{"r1"}}, hb)

	b, err = codec.EncodeRecord(codec.Record{Heartbeat: &codec.Heartbeat{Member: "m1", Session: s, End: true}})
	require.NoError(t, err)
	hb, err = decodeHeartbeat(b)
	require.NoError(t, err)
	assert.True(t, hb.End)
	assert.Equal(t, "abc", hb.Session.Nonce)
	assert.Equal(t, string(codec.SessionKey("m1").Encode()), "krole/session/m1", "the key fillHistory looks for")
}

// A history with sessions written and read back keeps its heartbeats and
// the sessions its leases name.
func TestHistoryRoundTripSessions(t *testing.T) {
	h := sessioned()
	h.Heartbeats[1].Excluded = []string{"r"}
	path := t.TempDir() + "/history.json"
	require.NoError(t, WriteHistory(path, &h))
	back, err := ReadHistory(path)
	require.NoError(t, err)
	assert.Equal(t, h, *back)
	assert.Equal(t, lastRenewal(h), lastRenewal(*back))
}
