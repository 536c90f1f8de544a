package bench

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/krabka/krole/codec"
)

// A dead holder's lease fell due at the later of its own deadline and
// its session's last heartbeat's: the lease is written at election, and
// the heartbeats renewed it after. The failover bench counted from the
// lease's own deadline alone, and reported the new holder acting a renew
// interval or more past a deadline that had not passed.
func TestLeaseDue(t *testing.T) {
	sess := codec.Session{ProducerID: 7, Nonce: "n1"}
	l := codec.Lease{Member: "a", Deadline: 1000, Session: &sess}
	beat := &codec.Heartbeat{Member: "a", Session: sess, GrantedAt: 2000, Deadline: 5000}
	assert.Equal(t, int64(5000), LeaseDue(l, beat), "renewed by the session's heartbeat")
	assert.Equal(t, int64(1000), LeaseDue(l, nil), "no heartbeat")
	other := &codec.Heartbeat{Member: "a", Session: codec.Session{ProducerID: 8, Nonce: "n2"}, GrantedAt: 2000, Deadline: 5000}
	assert.Equal(t, int64(1000), LeaseDue(l, other), "another incarnation's heartbeat keeps nothing alive")
	bare := codec.Lease{Member: "a", Deadline: 1000}
	assert.Equal(t, int64(1000), LeaseDue(bare, beat), "a lease that names no session")
	early := &codec.Heartbeat{Member: "a", Session: sess, GrantedAt: 0, Deadline: 500}
	assert.Equal(t, int64(1000), LeaseDue(l, early), "a heartbeat before the lease")
}
