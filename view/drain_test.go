package view

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/testcluster"
)

// requestDrain appends a drain request of member naming nonce, in the
// partition of its session records, and returns its offset.
func (w *writer) requestDrain(member codec.MemberID, nonce string) int64 {
	w.t.Helper()
	b, err := codec.EncodeRecord(codec.Record{Drain: &codec.DrainRequest{Member: member, Nonce: nonce, At: time.Now().UnixMilli()}})
	require.NoError(w.t, err)
	return w.send(codec.DrainKey(member).String(), b, codec.KeyPartition(codec.DrainKey(member), w.nparts))
}

// A drain request names one incarnation: DrainRequested holds for its
// nonce, not for another nor for another member; the latest request of a
// member counts; a tombstone withdraws it; a request in another
// partition than the member's session records is skipped, and a key of a
// kind the view does not know is counted as a newer writer's. The state
// dir keeps the latest request across a restart.
func TestDrainRequestNamesOneIncarnation(t *testing.T) {
	const nparts = 3
	c := testcluster.Start(t, testcluster.Options{Partitions: nparts})
	w := newWriter(t, c, nparts)
	dir := t.TempDir()
	v, stop := runView(t, c.Config, Options{StateDir: dir})
	ctx := testCtx(t)
	requested := func(v *View, member codec.MemberID, nonce string) bool {
		t.Helper()
		require.NoError(t, v.WaitCaughtUp(ctx))
		ok, err := v.DrainRequested(ctx, member, nonce)
		require.NoError(t, err)
		return ok
	}

	assert.False(t, requested(v, "node-b", "n1"), "no request yet")
	w.requestDrain("node-b", "n1")
	assert.True(t, requested(v, "node-b", "n1"))
	assert.False(t, requested(v, "node-b", "n2"), "another incarnation of node-b")
	assert.False(t, requested(v, "node-a", "n1"), "another member")
	req, ok, err := v.DrainRequest(ctx, "node-b")
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, codec.MemberID("node-b"), req.Member)
	assert.Positive(t, req.At)

	w.requestDrain("node-b", "n2")
	assert.True(t, requested(v, "node-b", "n2"), "the latest request counts")
	assert.False(t, requested(v, "node-b", "n1"), "the earlier request is replaced")

	// In the wrong partition: skipped, never applied.
	b, err := codec.EncodeRecord(codec.Record{Drain: &codec.DrainRequest{Member: "node-c", Nonce: "n1", At: 1}})
	require.NoError(t, err)
	wrong := (codec.KeyPartition(codec.DrainKey("node-c"), nparts) + 1) % nparts
	w.send(codec.DrainKey("node-c").String(), b, wrong)
	assert.False(t, requested(v, "node-c", "n1"), "a request outside the member's session partition")
	assert.Equal(t, int64(1), v.Stats().Skipped[SkipPartition])

	// A key of a kind this reader does not know: a newer writer's.
	w.send("krole/lock/node-c", []byte(`{"v":9}`), 0)
	caughtUp(t, v)
	assert.Equal(t, int64(1), v.Stats().Skipped[SkipVersion], "a key of an unknown kind is a newer writer's")
	assert.Zero(t, v.Stats().Skipped[SkipKey])

	stop()
	v2, _ := runView(t, c.Config, Options{StateDir: dir})
	assert.True(t, requested(v2, "node-b", "n2"), "the state dir keeps the latest request")
	assert.False(t, requested(v2, "node-b", "n1"))

	w.send(codec.DrainKey("node-b").String(), nil, codec.KeyPartition(codec.DrainKey("node-b"), nparts))
	assert.False(t, requested(v2, "node-b", "n2"), "a tombstone withdraws the request")
	_, ok, err = v2.DrainRequest(ctx, "node-b")
	require.NoError(t, err)
	assert.False(t, ok)
	assert.Zero(t, v2.Stats().Roles, "drain requests are not roles")
}
