package codec

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDrainKeyRoundTrip(t *testing.T) {
	k := DrainKey("u@h:1")
	assert.Equal(t, "krole/drain/u@h:1", k.String())
	require.NoError(t, k.Validate())
	got, err := DecodeKey(k.Encode())
	require.NoError(t, err)
	assert.Equal(t, k, got)
	assert.Equal(t, KindDrain, got.Kind)
	assert.Equal(t, "drain", got.Kind.String())
	for _, bad := range []string{"krole/drain/", "krole/drain/a/b", "krole/drain/é", "krole/drain/" + strings.Repeat("m", MaxNameLen+1)} {
		_, err := DecodeKey([]byte(bad))
		assert.ErrorIs(t, err, ErrMalformed, bad)
	}
	assert.ErrorIs(t, Key{Kind: KindDrain, Role: "r", Member: "m"}.Validate(), ErrInvalid, "a drain key has no role")
	assert.ErrorIs(t, Key{Kind: KindDrain}.Validate(), ErrInvalid, "a drain key names a member")
}

// A member's drain requests lie in the partition of its session records.
func TestDrainKeySharesTheSessionPartition(t *testing.T) {
	for _, n := range []int32{1, 3, 12} {
		assert.Equal(t, SessionPartition("node-1", n), KeyPartition(DrainKey("node-1"), n))
		assert.Equal(t, SessionPartition("node-1", n), KeyPartition(SessionKey("node-1"), n))
		assert.Equal(t, Partition("shard-1", n), KeyPartition(LeaseKey("shard-1"), n))
		assert.Equal(t, Partition("shard-1", n), KeyPartition(RegistrationKey("shard-1", "node-1"), n))
	}
}

func TestDrainRequestRoundTripAndChecks(t *testing.T) {
	d := DrainRequest{Member: "node-1", Nonce: "9f2c4e6a8b0d1f35", At: 1700000000000}
	b, err := EncodeRecord(Record{Drain: &d})
	require.NoError(t, err)
	assert.Equal(t, `{"v":4,"kind":"drain","member":"node-1","nonce":"9f2c4e6a8b0d1f35","requested_at":1700000000000}`, string(b))
	got, err := DecodeRecord(b)
	require.NoError(t, err)
	require.NotNil(t, got.Drain)
	assert.Equal(t, d, *got.Drain)
	assert.Equal(t, KindDrain, got.Kind())
	assert.False(t, got.Tombstone())
	var buf RecordBuf
	got, err = buf.Decode(b, "node-1")
	require.NoError(t, err)
	require.NotNil(t, got.Drain)
	assert.Equal(t, d, *got.Drain)

	require.NoError(t, CheckPair(DrainKey("node-1"), got))
	require.NoError(t, CheckPair(DrainKey("node-1"), Record{}), "a tombstone withdraws the request")
	assert.ErrorIs(t, CheckPair(DrainKey("other"), got), ErrMalformed, "a request names the member of its key")
	assert.ErrorIs(t, CheckPair(SessionKey("node-1"), got), ErrMalformed, "a request under a session key")
	hb := Heartbeat{Member: "node-1", Session: Session{ProducerID: 1, Nonce: "a"}, GrantedAt: 1, Deadline: 2}
	assert.ErrorIs(t, CheckPair(DrainKey("node-1"), Record{Heartbeat: &hb}), ErrMalformed, "a heartbeat under a drain key")

	for name, bad := range map[string]DrainRequest{
		"no nonce":   {Member: "m", At: 1},
		"bad nonce":  {Member: "m", Nonce: "a-b", At: 1},
		"long nonce": {Member: "m", Nonce: strings.Repeat("a", MaxNonceLen+1), At: 1},
		"bad member": {Member: "a/b", Nonce: "a", At: 1},
	} {
		_, err := EncodeRecord(Record{Drain: &bad})
		assert.ErrorIs(t, err, ErrInvalid, name)
	}
	_, err = EncodeRecord(Record{Drain: &d, Heartbeat: &hb})
	assert.ErrorIs(t, err, ErrInvalid, "a record is one kind")

	for name, raw := range map[string]string{
		"v3 drain":        `{"v":3,"kind":"drain","member":"m","nonce":"a","requested_at":1}`,
		"no requested_at": `{"v":4,"kind":"drain","member":"m","nonce":"a"}`,
		"no nonce":        `{"v":4,"kind":"drain","member":"m","requested_at":1}`,
		"bad nonce":       `{"v":4,"kind":"drain","member":"m","nonce":"a b","requested_at":1}`,
		"no member":       `{"v":4,"kind":"drain","nonce":"a","requested_at":1}`,
	} {
		_, err := DecodeRecord([]byte(raw))
		assert.ErrorIs(t, err, ErrMalformed, name)
	}
	_, err = DecodeRecord([]byte(`{"v":5,"kind":"drain"}`))
	var uv *UnknownVersionError
	assert.True(t, errors.As(err, &uv), "a version past DrainVersion is newer, not malformed")
}

// A key of krole's shape whose kind this reader does not know is a newer
// writer's, not garbage.
func TestUnknownKeyKind(t *testing.T) {
	_, err := DecodeKey([]byte("krole/lock/node-1"))
	assert.ErrorIs(t, err, ErrUnknownKind)
	assert.ErrorIs(t, err, ErrMalformed, "not a key this reader can read")
	assert.Contains(t, err.Error(), `key "krole/lock/node-1" of a kind newer than this reader ("lock")`)
	for _, bad := range []string{"krole/lock/", "krole/lock", "krole/Lock/x", "krole//x", "krole/" + strings.Repeat("k", 33) + "/x", "other/lock/x"} {
		_, err := DecodeKey([]byte(bad))
		assert.ErrorIs(t, err, ErrMalformed, bad)
		assert.NotErrorIs(t, err, ErrUnknownKind, bad)
	}
}
