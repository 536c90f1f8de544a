package faultnet_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/internal/faultnet"
	"github.com/krabka/krole/internal/testcluster"
)

func TestMain(m *testing.M) { testcluster.VerifyNoLeaks(m) }

const produceKey = 0 // kmsg.Produce

// producer returns a sarama sync producer with its own client id and a
// short request timeout and no retries, so that a held request fails it
// fast.
func producer(t *testing.T, c *testcluster.Cluster, clientID string) *onceProducer {
	t.Helper()
	sc := c.Sarama(t)
	sc.ClientID = clientID
	sc.Net.ReadTimeout = 300 * time.Millisecond
	sc.Producer.Retry.Max = 0
	p, err := sarama.NewSyncProducer(c.Config.Brokers, sc)
	require.NoError(t, err)
	op := &onceProducer{SyncProducer: p}
	t.Cleanup(func() { _ = op.Close() })
	return op
}

// onceProducer closes its producer once, however often Close is called.
type onceProducer struct {
	sarama.SyncProducer
	once sync.Once
	err  error
}

func (p *onceProducer) Close() error {
	p.once.Do(func() { p.err = p.SyncProducer.Close() })
	return p.err
}

func values(ms []*sarama.ConsumerMessage) []string {
	var out []string
	for _, m := range ms {
		out = append(out, string(m.Value))
	}
	return out
}

func ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// A held produce reaches the broker after the client gave up on it and
// closed its connection, when it is released (DeliverOnClose, the
// default); under DropOnClose it never does.
func TestHeldRequestAfterTheClientGaveUp(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy faultnet.ClosePolicy
		want   []string
	}{
		{"deliver on close", faultnet.DeliverOnClose, []string{"late"}},
		{"drop on close", faultnet.DropOnClose, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, fn := testcluster.StartFaulty(t, testcluster.Options{Nodes: 1})
			fn.SetOnClientClose(tc.policy)
			topic := c.Topic(t, c.Name("app"), 1, 10*time.Second)
			p := producer(t, c, "slow-1")
			held := fn.Hold(faultnet.Rule{APIKey: produceKey, Node: faultnet.AnyNode, ClientID: "slow", Count: 1})

			_, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder("late")})
			require.Error(t, err, "the client gives up on the held produce")
			require.NoError(t, held.Wait(ctx(t), 1))
			require.NoError(t, p.Close())
			require.Eventually(t, func() bool { return fn.Open("slow") == 0 }, 10*time.Second, 5*time.Millisecond,
				"faultnet sees the client close")
			assert.Empty(t, values(c.ReadAll(t, topic, sarama.ReadUncommitted, 10*time.Second)),
				"nothing reaches the broker while held")

			held.Release()
			if tc.want != nil {
				require.NoError(t, held.WaitDelivered(ctx(t), 1))
			}
			if tc.want == nil {
				assert.Empty(t, values(c.ReadAll(t, topic, sarama.ReadUncommitted, 10*time.Second)))
				return
			}
			require.Eventually(t, func() bool {
				return assert.ObjectsAreEqual(tc.want, values(c.ReadAll(t, topic, sarama.ReadUncommitted, 10*time.Second)))
			}, 10*time.Second, 20*time.Millisecond, "the released produce is appended")
			assert.Equal(t, 1, held.Count())
		})
	}
}

// Only the first Count matching requests are held; the others, and other
// clients' requests, pass.
func TestHoldTakesTheFirstCountMatches(t *testing.T) {
	c, fn := testcluster.StartFaulty(t, testcluster.Options{Nodes: 1})
	topic := c.Topic(t, c.Name("app"), 1, 10*time.Second)
	held := fn.Hold(faultnet.Rule{APIKey: produceKey, Node: 0, ClientID: "slow", Count: 1})
	other := producer(t, c, "fast-1")
	_, _, err := other.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder("other client")})
	require.NoError(t, err)
	assert.Equal(t, 0, held.Count(), "another client's produce is not held")

	slow := producer(t, c, "slow-1")
	_, _, err = slow.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder("held")})
	require.Error(t, err)
	assert.Equal(t, 1, held.Count())
	// The connection is gone (the client timed out); the next produce
	// opens another one and is not held: the rule took its one request.
	_, _, err = slow.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder("after")})
	require.NoError(t, err)
	assert.Equal(t, 1, held.Count())
	held.Release()
	require.Eventually(t, func() bool {
		return assert.ObjectsAreEqual([]string{"other client", "after", "held"}, values(c.ReadAll(t, topic, sarama.ReadUncommitted, 10*time.Second)))
	}, 10*time.Second, 20*time.Millisecond)
}

// A dropped request never reaches the broker, and its client sees the
// connection break.
func TestDropClosesTheConnection(t *testing.T) {
	c, fn := testcluster.StartFaulty(t, testcluster.Options{Nodes: 1})
	topic := c.Topic(t, c.Name("app"), 1, 10*time.Second)
	d := fn.Drop(faultnet.Rule{APIKey: produceKey, Node: faultnet.AnyNode, ClientID: "drop", Count: 1})
	p := producer(t, c, "drop-1")
	_, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder("dropped")})
	require.Error(t, err)
	assert.Equal(t, 1, d.Count())
	d.Remove()
	_, _, err = p.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder("kept")})
	require.NoError(t, err)
	assert.Equal(t, []string{"kept"}, values(c.ReadAll(t, topic, sarama.ReadUncommitted, 10*time.Second)))
}

// A partitioned client gets no answer while others do; after the heal it
// is answered again.
func TestPartition(t *testing.T) {
	c, fn := testcluster.StartFaulty(t, testcluster.Options{Nodes: 1})
	topic := c.Topic(t, c.Name("app"), 1, 10*time.Second)
	cut := producer(t, c, "cut-1")
	_, _, err := cut.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder("before")})
	require.NoError(t, err)

	heal := fn.Partition("cut")
	_, _, err = cut.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder("during")})
	require.Error(t, err, "the partitioned client gets no answer")
	ok := producer(t, c, "ok-1")
	_, _, err = ok.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder("other")})
	require.NoError(t, err, "another client is not cut off")

	heal()
	require.Eventually(t, func() bool {
		_, _, err := cut.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder("after")})
		return err == nil
	}, 10*time.Second, 20*time.Millisecond, "the healed client is answered")
	got := values(c.ReadAll(t, topic, sarama.ReadUncommitted, 10*time.Second))
	assert.Contains(t, got, "before")
	assert.Contains(t, got, "other")
	assert.Contains(t, got, "after")
}

// SetDelay holds each request back on its way to the broker: no produce
// is answered before the delay has passed, and the requests of one
// connection keep their order.
func TestSetDelay(t *testing.T) {
	c, fn := testcluster.StartFaulty(t, testcluster.Options{Nodes: 1})
	topic := c.Topic(t, c.Name("app"), 1, 10*time.Second)
	p := producer(t, c, "delayed")
	_, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder("before")})
	require.NoError(t, err)
	const d = 150 * time.Millisecond
	fn.SetDelay(d)
	for _, v := range []string{"one", "two"} {
		start := time.Now()
		_, _, err = p.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder(v)})
		require.NoError(t, err)
		assert.GreaterOrEqual(t, time.Since(start), d, "a delayed produce answered before its request could arrive")
	}
	fn.SetDelay(0)
	assert.Equal(t, []string{"before", "one", "two"}, values(c.ReadAll(t, topic, sarama.ReadUncommitted, 10*time.Second)))
}
