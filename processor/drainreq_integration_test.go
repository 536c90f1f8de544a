package processor_test

import (
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/processor"
)

// requestDrain appends a drain request of member naming its session
// incarnation nonce, as another process (krole drain) does: a plain
// append in the partition of the member's session records.
func (e *env) requestDrain(member codec.MemberID, nonce string) {
	e.t.Helper()
	sc, err := e.c.Config.Sarama()
	require.NoError(e.t, err)
	client, err := sarama.NewClient(e.c.Config.Brokers, sc)
	require.NoError(e.t, err)
	defer client.Close()
	parts, err := client.Partitions(e.c.Config.Topic)
	require.NoError(e.t, err)
	p, err := sarama.NewSyncProducerFromClient(client)
	require.NoError(e.t, err)
	defer p.Close()
	b, err := codec.EncodeRecord(codec.Record{Drain: &codec.DrainRequest{Member: member, Nonce: nonce, At: time.Now().UnixMilli()}})
	require.NoError(e.t, err)
	key := codec.DrainKey(member)
	_, _, err = p.SendMessage(&sarama.ProducerMessage{Topic: e.c.Config.Topic, Key: sarama.StringEncoder(key.String()),
		Value: sarama.ByteEncoder(b), Partition: codec.KeyPartition(key, int32(len(parts)))})
	require.NoError(e.t, err)
}

// sessionNonce returns the incarnation nonce of member's live session as
// the observer's view holds it, once its heartbeat says it is in a group.
func (e *env) sessionNonce(member codec.MemberID) string {
	e.t.Helper()
	var nonce string
	await(e.t, 10*time.Second, string(member)+"'s heartbeat naming its group", func() bool {
		se, ok, err := e.obs.SessionSettled(e.ctx(10*time.Second), member)
		require.NoError(e.t, err)
		if !ok || se.Heartbeat.End || se.Heartbeat.Group == "" {
			return false
		}
		nonce = se.Heartbeat.Session.Nonce
		return true
	})
	return nonce
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// A drain request written to the role topic for a member's current
// session incarnation drains it as Member.Drain does: it hands every role
// over, each moved role won once by the others, and says so in its
// heartbeats. Started again under its id (a new incarnation), the member
// takes its share again: the request named the old one.
func TestIntegrationDrainRequest(t *testing.T) {
	e := newEnv(t, itTxnTimeout)
	roles := groupRoles(24)
	s := itSettings()
	g := processor.Group{Name: "shards"}
	e.start("node-a", roles, s, nil, inGroup(g))
	b := e.start("node-b", roles, s, nil, inGroup(g))
	e.start("node-c", roles, s, nil, inGroup(g))
	balanced := map[codec.MemberID]int{"node-a": 8, "node-b": 8, "node-c": 8}
	e.awaitCounts(roles, balanced, 20*time.Second)
	assert.False(t, closed(b.m.DrainedOnRequest()), "no request yet")

	nonce := e.sessionNonce("node-b")
	asked := time.Now()
	e.requestDrain("node-b", nonce)
	e.awaitCounts(roles, map[codec.MemberID]int{"node-a": 12, "node-c": 12}, 20*time.Second)
	handed := e.rec.since(processor.Revoked, asked, func(ev stamped) bool { return ev.Reason == processor.ReasonHandedOver })
	assert.Equal(t, map[codec.MemberID]int{"node-b": 8}, handed, "node-b hands each of its roles over once")
	assert.Equal(t, map[codec.MemberID]int{"node-a": 4, "node-c": 4}, e.rec.since(processor.Elected, asked, nil),
		"each moved role is won once")
	assert.Empty(t, e.rec.since(processor.Revoked, asked, func(ev stamped) bool { return ev.Member != "node-b" }),
		"no role of the others moves")
	select {
	case <-b.m.DrainedOnRequest():
	case <-time.After(10 * time.Second):
		t.Fatal("node-b's DrainedOnRequest did not close after it handed every role over")
	}
	await(t, 10*time.Second, "node-b's heartbeat saying it drains", func() bool {
		se, ok, err := e.obs.Session(e.ctx(10*time.Second), "node-b")
		require.NoError(t, err)
		return ok && se.Heartbeat.Drain
	})

	b.stop(t)()
	restarted := time.Now()
	b = e.start("node-b", roles, s, nil, inGroup(g))
	e.awaitCounts(roles, balanced, 20*time.Second)
	assert.NotEqual(t, nonce, e.sessionNonce("node-b"), "a new incarnation")
	still, err := e.obs.DrainRequested(e.ctx(10*time.Second), "node-b", nonce)
	require.NoError(t, err)
	assert.True(t, still, "the request for the old incarnation is still the latest")
	assert.Equal(t, map[codec.MemberID]int{"node-b": 8}, e.rec.since(processor.Elected, restarted, nil),
		"node-b takes its share again, each role won once")
	assert.False(t, closed(b.m.DrainedOnRequest()), "the old request does not drain the new incarnation")
	e.rec.checkFence(t)
}
