package fencing_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/testcluster"
)

// The produce (transactional and plain), fetch and list-offsets paths
// each refresh the metadata and resend after every answer in the one list
// of "leader moved" codes: the leader answers the code once (a kfake
// fault), and the call still succeeds.
func TestEveryPathRetriesEveryLeaderMovedCode(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Nodes: 1, Partitions: partitions})
	c.RequireFake(t)
	ctx := (&env{t: t}).ctx()
	tr := c.Transport(t)
	role := codec.Role("moved")
	tok, err := tr.AcquireEpoch(ctx, role)
	require.NoError(t, err)
	require.NoError(t, leaseErr(tr.WriteLease(ctx, role, tok, lease(t, "n0", tok))))
	topic, p := c.Config.Topic, codec.Partition(role, partitions)

	paths := []struct {
		name string
		key  kmsg.Key
		call func() error
	}{
		{"transactional produce", kmsg.Produce, func() error { return leaseErr(tr.WriteLease(ctx, role, tok, lease(t, "n1", tok))) }},
		{"plain produce", kmsg.Produce, func() error { _, err := tr.Register(ctx, role, "member"); return err }},
		{"fetch", kmsg.Fetch, func() error { _, err := tr.ReadRoleRecords(ctx, role); return err }},
		{"list offsets", kmsg.ListOffsets, func() error { _, err := tr.LogStart(ctx, topic, p); return err }},
	}
	require.NotEmpty(t, fencing.LeaderMovedCodes)
	for _, code := range fencing.LeaderMovedCodes {
		var ke *kerr.Error
		require.ErrorAs(t, kerr.ErrorForCode(int16(code)), &ke, "code %d", code)
		for _, path := range paths {
			t.Run(path.name+"/"+ke.Message, func(t *testing.T) {
				h := c.Fake.Fault(kfake.Fault{Keys: []kmsg.Key{path.key}, Topic: topic, Err: ke, Count: 1})
				defer h.Remove()
				require.NoError(t, path.call(), "the call is resent after %s", ke.Message)
				assert.Equal(t, 1, h.Hits(), "the leader answered %s once", ke.Message)
			})
		}
	}
}
