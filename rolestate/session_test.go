package rolestate

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/krabka/krole/codec"
)

// The liveness rule of a lease that names its holder's session: held
// while it is authentic and not released, and its session's heartbeat
// (of the same incarnation, not excluding the role) was seen within one
// span on the reader's clock; or within the lease's own span of when the
// lease was seen.
func TestSessionLeaseLiveness(t *testing.T) {
	t0 := time.Unix(1000, 0)
	sess := codec.Session{ProducerID: 9, Epoch: 1, Nonce: "n1"}
	lease := codec.Lease{Member: "m", Token: codec.Token{ProducerID: 4, Epoch: 2}, GrantedAt: 1, Deadline: 3001, Session: &sess}
	hb := func(s codec.Session, excluded ...codec.Role) *SessionSeen {
		return &SessionSeen{Offset: 5, SeenAt: t0.Add(10 * time.Second),
			Heartbeat: codec.Heartbeat{Member: "m", Session: s, GrantedAt: 100, Deadline: 3100, Excluded: excluded}}
	}
	st := State{Role: "r", Lease: &lease, LeaseOffset: 1, LeaseSeenAt: t0}

	assert.Equal(t, t0.Add(3*time.Second), st.LeaseEnd(), "no heartbeat: the lease's own span")
	assert.Equal(t, NoVouch, st.SessionVouch())

	st.Session = hb(sess)
	assert.Equal(t, Vouched, st.SessionVouch())
	assert.Equal(t, t0.Add(13*time.Second), st.LeaseEnd(), "one heartbeat span from when the heartbeat was seen")
	assert.True(t, st.Live(t0.Add(12*time.Second)))
	assert.False(t, st.Live(t0.Add(13*time.Second)))

	bumped := sess
	bumped.Epoch = 5
	st.Session = hb(bumped)
	assert.Equal(t, Vouched, st.SessionVouch(), "the session's epoch may move within an incarnation")

	other := sess
	other.Nonce = "n2"
	st.Session = hb(other)
	assert.Equal(t, NoVouch, st.SessionVouch(), "another incarnation's heartbeat does not revive the lease")
	assert.Equal(t, t0.Add(3*time.Second), st.LeaseEnd())
	older := sess
	older.Epoch = 0
	st.Session = hb(older)
	assert.Equal(t, NoVouch, st.SessionVouch(), "an epoch older than the lease's")

	st.Session = hb(sess, "x", "r")
	assert.Equal(t, Dropped, st.SessionVouch(), "a heartbeat that excludes the role drops it")
	assert.False(t, st.Live(t0.Add(11*time.Second)))
	assert.True(t, st.Live(t0.Add(2*time.Second)), "until the exclusion was seen")

	// A member that takes a role back under the same incarnation writes
	// its new lease while its latest heartbeat, begun before, still
	// excludes the role (it excluded the lease the member lost): the new
	// lease is not dropped by it; it lives by its own span until a
	// heartbeat vouches for it. Readers took it for dropped, and a
	// candidate could take the role at once.
	retaken := lease
	retaken.GrantedAt, retaken.Deadline = 200, 3200
	st2 := State{Role: "r", Lease: &retaken, LeaseOffset: 2, LeaseSeenAt: t0, Session: hb(sess, "r")}
	assert.Equal(t, NoVouch, st2.SessionVouch(), "an exclusion begun before the lease was written")
	assert.True(t, st2.Live(t0.Add(2*time.Second)))
	assert.False(t, ExcludesLease(st2.Session.Heartbeat, "r", retaken))
	st2.Session.Heartbeat.GrantedAt = 200
	assert.Equal(t, Dropped, st2.SessionVouch(), "an exclusion begun when the lease was written, or after")

	end := hb(sess)
	end.Heartbeat = codec.Heartbeat{Member: "m", Session: sess, End: true}
	st.Session = end
	assert.Equal(t, Dropped, st.SessionVouch(), "a session end drops every lease of the incarnation")
	assert.False(t, st.Live(t0.Add(10*time.Second)))

	st.Session = hb(sess)
	st.Session.Heartbeat.Member = "someone-else"
	assert.Equal(t, NoVouch, st.SessionVouch(), "another member's heartbeat")

	plain := lease
	plain.Session = nil
	st = State{Role: "r", Lease: &plain, LeaseSeenAt: t0, Session: hb(sess)}
	assert.Equal(t, NoVouch, st.SessionVouch(), "a lease without a session lives by its own span")
	rel := codec.ReleaseLease("m", lease.Token)
	st = State{Role: "r", Lease: &rel, LeaseSeenAt: t0, Session: hb(sess)}
	assert.False(t, st.Live(t0), "a release is never live")

	c := State{Role: "r", Lease: &lease, Session: hb(sess, "a")}.Clone()
	c.Session.Heartbeat.Excluded[0] = "b"
	assert.Equal(t, codec.Role("a"), hb(sess, "a").Heartbeat.Excluded[0])

	m, ok := SessionMember(SessionAuthor("u@h"))
	assert.True(t, ok)
	assert.Equal(t, codec.MemberID("u@h"), m)
	_, ok = SessionMember("role")
	assert.False(t, ok)
}
