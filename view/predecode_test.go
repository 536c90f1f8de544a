package view

import (
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
)

// TestPredecoderPairsChunks: the update callback gets the decoded records
// of exactly the chunk goka hands it; chunks goka dropped (it drains a
// consumer it closes) are discarded, a chunk that was not pushed is not
// found, and a reset forgets everything.
func TestPredecoderPairsChunks(t *testing.T) {
	v := offlineView(t, 1)
	d := newPredecoder(v, []int32{0})
	rb := &sarama.RecordBatch{ProducerID: 7, ProducerEpoch: 2, IsTransactional: true}
	msg := func(off int64, m codec.MemberID) fetched {
		b, err := codec.EncodeRecord(codec.Record{Registration: &codec.Registration{Member: m}})
		require.NoError(t, err)
		return fetched{off: off, rb: rb, r: &sarama.Record{Key: codec.RegistrationKey("r", m).Encode(), Value: b}}
	}
	// A legacy message (no batch): a plain append.
	garbage := func(off int64) fetched {
		return fetched{off: off, mb: &sarama.MessageBlock{Offset: off, Msg: &sarama.Message{Key: []byte("garbage")}}}
	}
	require.True(t, d.push(0, []fetched{msg(3, "a"), msg(5, "b")}))
	require.True(t, d.push(0, []fetched{msg(6, "c")}))
	require.True(t, d.push(0, []fetched{garbage(7), msg(9, "d")}))
	assert.False(t, d.push(1, []fetched{msg(1, "a")}), "not a partition of the view")
	assert.False(t, d.push(0, nil), "nothing to hand over")

	got, ok := d.takeChunk(0, 6, 6) // the first chunk was dropped by goka
	require.True(t, ok)
	require.Len(t, got, 1)
	assert.Equal(t, codec.MemberID("c"), got[0].k.Member)
	assert.Equal(t, int64(6), got[0].off)
	assert.Equal(t, batchInfo{producerID: 7, epoch: 2, transactional: true}, got[0].src.batch())
	assert.Equal(t, codec.RegistrationKey("r", "c").String(), string(got[0].src.key()))
	_, ok = d.takeChunk(0, 3, 5)
	assert.False(t, ok, "gone")

	_, ok = d.takeChunk(0, 7, 8)
	assert.False(t, ok, "not the chunk pushed")

	require.True(t, d.push(0, []fetched{garbage(10), msg(11, "d")}))
	got, ok = d.takeChunk(0, 10, 11)
	require.True(t, ok)
	require.Len(t, got, 2)
	assert.Equal(t, SkipKey, got[0].reason)
	assert.Equal(t, batchInfo{producerID: -1, epoch: -1}, got[0].src.batch(), "no batch header: a plain append")
	assert.Equal(t, codec.MemberID("d"), got[1].rec.Registration.Member)

	require.True(t, d.push(0, []fetched{msg(12, "e")}))
	d.reset(0)
	_, ok = d.takeChunk(0, 12, 12)
	assert.False(t, ok, "reset forgets")
}

// TestChunkMessage: a chunk message names its chunk's first and last
// offsets and carries nothing else a record would.
func TestChunkMessage(t *testing.T) {
	rb := &sarama.RecordBatch{FirstTimestamp: time.UnixMilli(1000), MaxTimestamp: time.UnixMilli(1009)}
	m := chunkMessage("t", 2, []fetched{{off: 40, rb: rb, r: &sarama.Record{Key: []byte("k")}},
		{off: 45, rb: rb, r: &sarama.Record{Value: []byte("v"), TimestampDelta: 7 * time.Millisecond}}})
	assert.Equal(t, int64(45), m.Offset)
	assert.Equal(t, "t", m.Topic)
	assert.Equal(t, int32(2), m.Partition)
	assert.Equal(t, time.UnixMilli(1007), m.Timestamp, "the last record's")
	assert.Equal(t, time.UnixMilli(1009), m.BlockTimestamp)
	assert.Nil(t, m.Key)
	assert.Nil(t, m.Value)
	require.Len(t, m.Headers, 1)
	assert.Equal(t, ChunkHeader, string(m.Headers[0].Key))
	first, last, ok := decodeChunkHeader(m.Headers[0].Value)
	require.True(t, ok)
	assert.Equal(t, [2]int64{40, 45}, [2]int64{first, last})
	_, _, ok = decodeChunkHeader([]byte("short"))
	assert.False(t, ok)
}
