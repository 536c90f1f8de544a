package codec

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSessionNameCannotBeARole: a session's transactional-id suffix is
// never a valid role name, whatever the member id, so no role's
// transactional id <prefix><role> can equal a session's, even for roles
// named like "session.x".
func TestSessionNameCannotBeARole(t *testing.T) {
	for _, m := range []MemberID{"x", "node-1", "a.b", "u@h:1", "session"} {
		name := SessionName(m)
		_, err := NewRole(name)
		assert.ErrorIs(t, err, ErrInvalid, "session name %q must not be a role name", name)
	}
	_, err := NewRole("session.x")
	require.NoError(t, err, "role names allow '.', which is why the session uses '/'")
}

func TestSessionKeyRoundTrip(t *testing.T) {
	k := SessionKey("u@h:1")
	assert.Equal(t, "krole/session/u@h:1", k.String())
	got, err := DecodeKey(k.Encode())
	require.NoError(t, err)
	assert.Equal(t, k, got)
	for _, bad := range []string{"krole/session/", "krole/session/a/b", "krole/session/é"} {
		_, err := DecodeKey([]byte(bad))
		assert.ErrorIs(t, err, ErrMalformed, bad)
	}
}

func TestHeartbeatRoundTripAndChecks(t *testing.T) {
	s := Session{ProducerID: 5, Epoch: 1, Nonce: "abc123"}
	hb := Heartbeat{Member: "m", Session: s, GrantedAt: 10, Deadline: 20}
	b, err := EncodeRecord(Record{Heartbeat: &hb})
	require.NoError(t, err)
	got, err := DecodeRecord(b)
	require.NoError(t, err)
	require.NotNil(t, got.Heartbeat)
	assert.Equal(t, hb, *got.Heartbeat)
	assert.Equal(t, KindSession, got.Kind())
	assert.False(t, got.Tombstone())
	var buf RecordBuf
	got, err = buf.Decode(b, "m")
	require.NoError(t, err)
	assert.Equal(t, hb, *got.Heartbeat)

	require.NoError(t, CheckPair(SessionKey("m"), got))
	assert.ErrorIs(t, CheckPair(SessionKey("other"), got), ErrMalformed, "a heartbeat names the member of its key")
	assert.ErrorIs(t, CheckPair(LeaseKey("r"), got), ErrMalformed)
	lease := Lease{Member: "m", Token: Token{1, 1}, GrantedAt: 1, Deadline: 5}
	assert.ErrorIs(t, CheckPair(SessionKey("m"), Record{Lease: &lease}), ErrMalformed, "a lease under a session key")

	for name, bad := range map[string]Heartbeat{
		"no nonce":     {Member: "m", Session: Session{ProducerID: 5}, GrantedAt: 1, Deadline: 2},
		"bad nonce":    {Member: "m", Session: Session{ProducerID: 5, Nonce: "a-b"}, GrantedAt: 1, Deadline: 2},
		"long nonce":   {Member: "m", Session: Session{ProducerID: 5, Nonce: strings.Repeat("a", MaxNonceLen+1)}, GrantedAt: 1, Deadline: 2},
		"no span":      {Member: "m", Session: s, GrantedAt: 2, Deadline: 2},
		"negative pid": {Member: "m", Session: Session{ProducerID: -1, Nonce: "a"}, GrantedAt: 1, Deadline: 2},
		"bad excluded": {Member: "m", Session: s, GrantedAt: 1, Deadline: 2, Excluded: []Role{"a/b"}},
		"bad member":   {Member: "", Session: s, GrantedAt: 1, Deadline: 2},
	} {
		_, err := EncodeRecord(Record{Heartbeat: &bad})
		assert.ErrorIs(t, err, ErrInvalid, name)
	}
	_, err = EncodeRecord(Record{Heartbeat: &hb, Lease: &lease})
	assert.ErrorIs(t, err, ErrInvalid, "a record is one kind")

	for name, raw := range map[string]string{
		"v1 heartbeat":       `{"v":1,"kind":"heartbeat","member":"m","session":{"producer_id":5,"epoch":1,"nonce":"a"},"granted_at":1,"deadline":2}`,
		"no session":         `{"v":3,"kind":"heartbeat","member":"m","granted_at":1,"deadline":2}`,
		"no times":           `{"v":3,"kind":"heartbeat","member":"m","session":{"producer_id":5,"epoch":1,"nonce":"a"}}`,
		"end with times":     `{"v":3,"kind":"session_end","member":"m","session":{"producer_id":5,"epoch":1,"nonce":"a"},"granted_at":1,"deadline":2}`,
		"v2 session lease":   `{"v":2,"kind":"lease","member":"m","producer_id":1,"epoch":1,"granted_at":1,"deadline":2,"session":{"producer_id":5,"epoch":1,"nonce":"a"}}`,
		"lease, bad session": `{"v":3,"kind":"lease","member":"m","producer_id":1,"epoch":1,"granted_at":1,"deadline":2,"session":{"producer_id":5,"epoch":1,"nonce":""}}`,
	} {
		_, err := DecodeRecord([]byte(raw))
		assert.ErrorIs(t, err, ErrMalformed, name)
	}
	_, err = DecodeRecord([]byte(`{"v":5,"kind":"heartbeat"}`))
	var uv *UnknownVersionError
	assert.True(t, errors.As(err, &uv), "a version past DrainVersion is newer, not malformed")
}

func TestSessionKeeps(t *testing.T) {
	l := Session{ProducerID: 5, Epoch: 2, Nonce: "n1"}
	assert.True(t, l.Keeps(l))
	assert.True(t, Session{ProducerID: 5, Epoch: 3, Nonce: "n1"}.Keeps(l), "the session's epoch may move (a re-init after an unanswered heartbeat)")
	assert.False(t, Session{ProducerID: 5, Epoch: 1, Nonce: "n1"}.Keeps(l), "an older epoch")
	assert.False(t, Session{ProducerID: 6, Epoch: 2, Nonce: "n1"}.Keeps(l), "another producer id")
	assert.False(t, Session{ProducerID: 5, Epoch: 2, Nonce: "n2"}.Keeps(l), "another incarnation")
	hb := Heartbeat{Excluded: []Role{"a", "b"}}
	assert.True(t, hb.Excludes("b"))
	assert.False(t, hb.Excludes("c"))
}

func TestSessionPartitionIsStable(t *testing.T) {
	for _, n := range []int32{1, 3, 12} {
		p := SessionPartition("node-1", n)
		assert.True(t, p >= 0 && p < n)
		assert.Equal(t, Partition(Role("session/node-1"), n), p)
	}
}
