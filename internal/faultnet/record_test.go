package faultnet_test

import (
	"context"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/krabka/krole/internal/faultnet"
	"github.com/krabka/krole/internal/testcluster"
)

// A recorder keeps the requests of its clients only, in order, with what
// they carry (Decode), also those a rule holds; Take empties it, and
// nothing is recorded after Stop.
func TestRecordKeepsTheRequestsOfItsClients(t *testing.T) {
	c, fn := testcluster.StartFaulty(t, testcluster.Options{Nodes: 1})
	topic := c.Topic(t, c.Name("rec"), 1, 10*time.Second)
	rec := fn.Record("counted")
	other := producer(t, c, "other-1")
	_, _, err := other.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder("not counted")})
	require.NoError(t, err)
	p := producer(t, c, "counted-1")
	_, _, err = p.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder("one")})
	require.NoError(t, err)

	var produces []faultnet.Request
	for _, r := range rec.Take() {
		assert.Equal(t, "counted-1", r.ClientID)
		assert.EqualValues(t, 0, r.Node)
		if kmsg.Key(r.APIKey) == kmsg.Produce {
			produces = append(produces, r)
		}
	}
	require.Len(t, produces, 1, "the counted client's one produce")
	assert.Equal(t, "Produce", produces[0].Name())
	req, err := produces[0].Decode()
	require.NoError(t, err)
	pr := req.(*kmsg.ProduceRequest)
	require.Len(t, pr.Topics, 1)
	assert.Equal(t, topic, pr.Topics[0].Topic)
	assert.Empty(t, rec.Take(), "Take forgets what it returned")

	// A held request is recorded when it is read, before it is delivered.
	held := fn.Hold(faultnet.Rule{APIKey: int16(kmsg.Produce), Node: faultnet.AnyNode, ClientID: "counted", Count: 1})
	_, _, err = p.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder("held")})
	require.Error(t, err, "held past the client's read timeout")
	require.Equal(t, 1, held.Count())
	var heldProduces int
	for _, r := range rec.Take() {
		if kmsg.Key(r.APIKey) == kmsg.Produce {
			heldProduces++
		}
	}
	assert.Equal(t, 1, heldProduces)
	held.Release()

	rec.Stop()
	_, _, err = p.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder("after stop")})
	require.NoError(t, err)
	assert.Empty(t, rec.Take(), "nothing after Stop")
}

// Answered gives when a recorded request's answer went back to the
// client: after the request was read, and not while a rule holds the
// request from the broker.
func TestRecordAnswered(t *testing.T) {
	c, fn := testcluster.StartFaulty(t, testcluster.Options{Nodes: 1})
	topic := c.Topic(t, c.Name("ans"), 1, 10*time.Second)
	rec := fn.Record("answered")
	p := producer(t, c, "answered-1")
	held := fn.Hold(faultnet.Rule{APIKey: int16(kmsg.Produce), Node: faultnet.AnyNode, ClientID: "answered", Count: 1})
	done := make(chan error, 1)
	go func() {
		_, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder("one")})
		done <- err
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, held.Wait(ctx, 1))
	var produce faultnet.Request
	for _, r := range rec.Take() {
		if kmsg.Key(r.APIKey) == kmsg.Produce {
			produce = r
		}
	}
	require.NotZero(t, produce.Conn, "the produce was recorded")
	_, ok := rec.Answered(produce)
	assert.False(t, ok, "no answer while the request is held")
	released := time.Now()
	held.Release()
	require.NoError(t, <-done)
	at, ok := rec.Answered(produce)
	require.True(t, ok, "answered once delivered")
	assert.True(t, at.After(released) && at.After(produce.At))
}
