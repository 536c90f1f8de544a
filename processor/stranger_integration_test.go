package processor_test

import (
	"slices"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/processor"
)

// A stranger with only Write on the role topic, using a raw producer (a
// plain append, not krole's transport), tombstones the live holder's
// registration: the operator's step-down (what `krole resign --member`
// writes; TestResignStepsDownALiveHolder in internal/cli covers that
// command). It causes exactly a handover, by design (see view/doc.go, "Who
// can write what"): the holder releases at once, the next candidate takes
// the role before the old lease would have run out, the role stays held,
// and the old holder registers again at the back. No forged lease takes
// part: the stranger cannot stop the role or hold it.
func TestIntegrationStrangersTombstoneOfTheHolderForcesOnlyAHandover(t *testing.T) {
	e := newEnv(t, itTxnTimeout)
	role := codec.Role("stranger")
	s := itSettings()
	a, b, _ := e.holderAndCandidate(role, s)
	e.awaitLive(role, a, b)

	sc, err := e.c.Config.Sarama()
	require.NoError(t, err)
	sc.Producer.Idempotent, sc.Producer.Transaction.ID = false, ""
	sc.Net.MaxOpenRequests = 5
	client, err := sarama.NewClient(e.c.Config.Brokers, sc)
	require.NoError(t, err)
	defer client.Close()
	parts, err := client.Partitions(e.c.Config.Topic)
	require.NoError(t, err)
	prod, err := sarama.NewSyncProducerFromClient(client)
	require.NoError(t, err)
	defer prod.Close()

	live, ok := e.rec.lastWrite(role, a.id)
	require.True(t, ok)
	sent := time.Now()
	_, _, err = prod.SendMessage(&sarama.ProducerMessage{
		Topic:     e.c.Config.Topic,
		Partition: codec.Partition(role, int32(len(parts))),
		Key:       sarama.ByteEncoder(codec.RegistrationKey(role, a.id).Encode()),
	})
	require.NoError(t, err)

	el := awaitElected(t, e.rec, role, b.id, sent, s.LeaseDuration+slack)
	rev := e.rec.find(processor.Revoked, role, func(ev stamped) bool { return ev.Member == a.id })
	require.Len(t, rev, 1)
	assert.Equal(t, processor.ReasonDeregistered, rev[0].Reason)
	// node-a lets go in one of two ways, whichever its view shows node-b
	// first: its release, or its session's heartbeat that no longer
	// vouches for the role once node-a stopped acting on it (node-b's
	// epoch then fences the release). node-b can be elected before
	// node-a's transport call has returned and been recorded: wait for
	// the record.
	await(t, 5*time.Second, "the deposed holder let the role go", func() bool {
		return e.rec.letGo(role, a.id)
	})
	assert.Less(t, el.At.UnixMilli(), live.Lease.Deadline, "the role passed at once, not after the old lease ran out")
	e.agree(role, b.id, el.Token)
	await(t, 10*time.Second, "node-a registers again at the back", func() bool {
		return slices.Equal(e.candidates(role), []codec.MemberID{b.id, a.id})
	})
	// Exactly a handover: node-b keeps the role through two leases (a
	// window on purpose, in which another handover would show).
	time.Sleep(2 * s.LeaseDuration)
	hs := e.rec.holders(role)
	assert.Equal(t, map[codec.MemberID]codec.Token{b.id: el.Token}, hs)
	assert.Len(t, e.rec.find(processor.Elected, role, func(stamped) bool { return true }), 2, "one election of node-a, one of node-b")
	e.rec.checkFence(t)
}
