package rolestate

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/krabka/krole/codec"
)

func TestCheckHeartbeatAuthor(t *testing.T) {
	s := codec.Session{ProducerID: 7, Epoch: 2, Nonce: "n"}
	hb := codec.Record{Heartbeat: &codec.Heartbeat{Member: "m", Session: s, GrantedAt: 1, Deadline: 2}}
	assert.NoError(t, CheckHeartbeatAuthor(hb, Batch{ProducerID: 7, Epoch: 2, Transactional: true}))
	assert.ErrorIs(t, CheckHeartbeatAuthor(hb, Batch{ProducerID: 7, Epoch: 2}), ErrForged, "not in a transaction")
	assert.ErrorIs(t, CheckHeartbeatAuthor(hb, Batch{ProducerID: 8, Epoch: 2, Transactional: true}), ErrForged, "another producer")
	assert.ErrorIs(t, CheckHeartbeatAuthor(hb, Batch{ProducerID: 7, Epoch: 3, Transactional: true}), ErrForged, "another epoch")
	assert.ErrorIs(t, CheckHeartbeatAuthor(codec.Record{}, Batch{ProducerID: 7, Epoch: 2, Transactional: true}), ErrForged, "a tombstone")
	_, err := codec.NewRole(string(SessionAuthor("m")))
	assert.Error(t, err, "a session's key is never a role")
}
