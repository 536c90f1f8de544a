package view

import (
	"testing"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
)

// TestPredecoderPairsByOffset: the update callback gets the decoded record
// of exactly the offset goka hands it; entries goka dropped (it drains a
// consumer it closes) are discarded, a missing one is decoded by the
// callback, and a reset forgets everything.
func TestPredecoderPairsByOffset(t *testing.T) {
	v := offlineView(t, 1)
	d := newPredecoder(v, []int32{0})
	msg := func(off int64, m codec.MemberID) *sarama.ConsumerMessage {
		b, err := codec.EncodeRecord(codec.Record{Registration: &codec.Registration{Member: m}})
		require.NoError(t, err)
		return &sarama.ConsumerMessage{Offset: off, Key: codec.RegistrationKey("r", m).Encode(), Value: b}
	}
	d.push(0, []*sarama.ConsumerMessage{msg(3, "a"), msg(5, "b"), msg(6, "c")})
	d.push(0, []*sarama.ConsumerMessage{{Offset: 7, Key: []byte("garbage")}})

	_, ok := d.take(0, 2)
	assert.False(t, ok, "not decoded")
	got, ok := d.take(0, 5) // 3 was dropped by goka
	require.True(t, ok)
	assert.Equal(t, codec.MemberID("b"), got.k.Member)
	_, ok = d.take(0, 3)
	assert.False(t, ok, "gone")
	got, ok = d.take(0, 7) // 6 dropped too
	require.True(t, ok)
	assert.Equal(t, SkipKey, got.reason)
	_, ok = d.take(1, 7)
	assert.False(t, ok, "no such partition")

	d.push(0, []*sarama.ConsumerMessage{msg(8, "d")})
	d.reset(0)
	_, ok = d.take(0, 8)
	assert.False(t, ok, "reset forgets")
}
