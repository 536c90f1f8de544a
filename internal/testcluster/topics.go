package testcluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/devcluster"
)

// Name returns a name for a topic, role, group or the like that no other
// test uses: "<TxnPrefix><what>-<n>", under the test's own
// transactional-id prefix, with n counting up within the process.
func (c *Cluster) Name(what string) string {
	return fmt.Sprintf("%s%s-%d", c.Config.TxnPrefix, what, seq.Add(1))
}

// Sarama returns the sarama configuration of c.Config (read_committed
// isolation, manual partitioner; see fencing.Config.Sarama), a new one
// each call for the caller to change. It fails t when there is none.
func (c *Cluster) Sarama(t testing.TB) *sarama.Config {
	t.Helper()
	sc, err := c.Config.Sarama()
	require.NoError(t, err)
	return sc
}

// Transport connects a new fencing.BrokerTransport to c, closed when the
// test ends (t fails when Close returns an error).
func (c *Cluster) Transport(t testing.TB) *fencing.BrokerTransport {
	t.Helper()
	tr, err := fencing.NewBrokerTransport(c.Config)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, tr.Close()) })
	return tr
}

// Topic creates name as an application topic (cleanup.policy=delete) of
// partitions partitions and replication factor 1, and returns name. It
// waits up to within for the topic to show in the metadata with every
// partition, and fails t when that does not happen, when the topic exists
// already, or when it cannot be created. The topic is not deleted.
func (c *Cluster) Topic(t testing.TB, name string, partitions int32, within time.Duration) string {
	t.Helper()
	require.NoError(t, devcluster.CreateNewTopic(context.Background(), c.Config, devcluster.TopicSpec{
		Name: name, Partitions: partitions, Replication: 1, CleanupPolicy: "delete", Visible: within,
	}))
	return name
}

// markerPrefix starts the key of the marker records that ReadAll appends.
const markerPrefix = "end-of-read-"

// ReadAll returns every record of topic that a reader with the given
// isolation sees now, partition by partition in offset order.
//
// "Now" rests on a marker: ReadAll appends a plain (non-transactional)
// record with the key "end-of-read-<n>" to each partition and reads up to
// it. A read_committed reader gets past the marker only once every
// transaction begun before it has ended, so the read sees each of them
// decided (committed or aborted), never pending; a read_uncommitted reader
// sees every record appended before the marker. Marker records, of this
// read and of earlier ones, are left out of the result.
//
// within bounds the wait for each partition's marker. t fails when a
// marker does not show in that time, and on any error of the cluster.
func (c *Cluster) ReadAll(t testing.TB, topic string, isolation sarama.IsolationLevel, within time.Duration) []*sarama.ConsumerMessage {
	t.Helper()
	sc := c.Sarama(t)
	sc.Consumer.IsolationLevel = isolation
	sc.Consumer.MaxWaitTime = 10 * time.Millisecond // closing a partition consumer waits for its fetch
	client, err := sarama.NewClient(c.Config.Brokers, sc)
	require.NoError(t, err)
	defer client.Close()
	ps, err := client.Partitions(topic)
	require.NoError(t, err)
	prod, err := sarama.NewSyncProducerFromClient(client)
	require.NoError(t, err)
	defer prod.Close()
	marker := fmt.Sprintf("%s%d", markerPrefix, seq.Add(1))
	cons, err := sarama.NewConsumerFromClient(client)
	require.NoError(t, err)
	defer cons.Close()
	var out []*sarama.ConsumerMessage
	for _, p := range ps {
		_, _, err := prod.SendMessage(&sarama.ProducerMessage{Topic: topic, Partition: p, Key: sarama.StringEncoder(marker)})
		require.NoError(t, err)
		pc, err := cons.ConsumePartition(topic, p, sarama.OffsetOldest)
		require.NoError(t, err)
		timeout := time.After(within)
	read:
		for {
			select {
			case m := <-pc.Messages():
				switch {
				case string(m.Key) == marker:
					break read
				case strings.HasPrefix(string(m.Key), markerPrefix):
				default:
					out = append(out, m)
				}
			case err := <-pc.Errors():
				t.Fatalf("reading %s/%d: %v", topic, p, err)
			case <-timeout:
				t.Fatalf("reading %s/%d: the marker did not show", topic, p)
			}
		}
		require.NoError(t, pc.Close())
	}
	return out
}
