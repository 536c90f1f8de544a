package stream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/testcluster"
)

// env is one test's cluster.
type env struct {
	t     *testing.T
	c     *testcluster.Cluster
	nodes int
}

// onEachCluster runs fn on a one-broker cluster and on a three-broker one
// (where partition leaders and coordinators spread over the brokers).
func onEachCluster(t *testing.T, fn func(t *testing.T, e *env)) {
	t.Helper()
	for _, nodes := range []int{1, 3} {
		t.Run(fmt.Sprintf("%d brokers", nodes), func(t *testing.T) {
			if nodes > 1 && testcluster.External() {
				t.Skip("KROLE_BROKERS names an outside cluster; the one-broker run covers it")
			}
			fn(t, newEnv(t, nodes))
		})
	}
}

func newEnv(t *testing.T, nodes int) *env {
	t.Helper()
	return &env{t: t, c: testcluster.Start(t, testcluster.Options{Nodes: nodes, Partitions: 3}), nodes: nodes}
}

func (e *env) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	e.t.Cleanup(cancel)
	return ctx
}

// topic creates an application topic (cleanup.policy=delete).
func (e *env) topic(what string, partitions int32) string {
	e.t.Helper()
	return e.c.Topic(e.t, e.c.Name(what), partitions, 10*time.Second)
}

// inputKeys is the number of distinct keys of the input records.
const inputKeys = 37

// produce appends input records numbered from to to-1 (value the number,
// key "key-<number mod inputKeys>", partitioned by key) and returns the
// end offset of every partition of topic afterwards.
func (e *env) produce(topic string, from, to int) map[int32]int64 {
	e.t.Helper()
	sc := e.c.Sarama(e.t)
	sc.Producer.Partitioner = sarama.NewHashPartitioner
	client, err := sarama.NewClient(e.c.Config.Brokers, sc)
	require.NoError(e.t, err)
	defer client.Close()
	prod, err := sarama.NewSyncProducerFromClient(client)
	require.NoError(e.t, err)
	defer prod.Close()
	var msgs []*sarama.ProducerMessage
	for n := from; n < to; n++ {
		msgs = append(msgs, &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(fmt.Sprintf("key-%d", n%inputKeys)), Value: sarama.StringEncoder(strconv.Itoa(n))})
	}
	require.NoError(e.t, prod.SendMessages(msgs))
	ps, err := client.Partitions(topic)
	require.NoError(e.t, err)
	end := map[int32]int64{}
	for _, p := range ps {
		off, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		require.NoError(e.t, err)
		end[p] = off
	}
	return end
}

// read returns every record of topic with the given isolation, read up
// to a marker (see testcluster.Cluster.ReadAll).
func (e *env) read(topic string, isolation sarama.IsolationLevel) []*sarama.ConsumerMessage {
	e.t.Helper()
	return e.c.ReadAll(e.t, topic, isolation, 30*time.Second)
}

// committedOffsets returns the group's committed offsets on topic.
func (e *env) committedOffsets(group, topic string) map[int32]int64 {
	e.t.Helper()
	admin, err := sarama.NewClusterAdmin(e.c.Config.Brokers, e.c.Sarama(e.t))
	require.NoError(e.t, err)
	defer admin.Close()
	res, err := admin.ListConsumerGroupOffsets(group, nil)
	out := map[int32]int64{}
	if errors.Is(err, sarama.ErrGroupIDNotFound) {
		return out // no offset committed yet (kfake's answer; Kafka answers none)
	}
	require.NoError(e.t, err)
	for p, blk := range res.Blocks[topic] {
		require.Equal(e.t, sarama.ErrNoError, blk.Err)
		if blk.Offset >= 0 {
			out[p] = blk.Offset
		}
	}
	return out
}

// output is one record of the output topic: the input number it carries
// and the holder that wrote it.
type output struct {
	n, holder int
	key       string
	partition int32
	offset    int64
}

// outputs decodes the records the test transforms write ("<n>|<holder>").
func outputs(t *testing.T, ms []*sarama.ConsumerMessage) []output {
	t.Helper()
	out := make([]output, 0, len(ms))
	for _, m := range ms {
		parts := strings.SplitN(string(m.Value), "|", 2)
		require.Len(t, parts, 2, "output %q", m.Value)
		n, err := strconv.Atoi(parts[0])
		require.NoError(t, err)
		h, err := strconv.Atoi(parts[1])
		require.NoError(t, err)
		out = append(out, output{n: n, holder: h, key: string(m.Key), partition: m.Partition, offset: m.Offset})
	}
	return out
}

// requireExactlyOnce asserts that outs hold every number in [0, n) exactly
// once, and that the numbers of each key appear in increasing order
// (records of a key are consumed in order and written to one partition).
func requireExactlyOnce(t *testing.T, outs []output, n int) {
	t.Helper()
	seen := map[int][]output{}
	for _, o := range outs {
		seen[o.n] = append(seen[o.n], o)
	}
	for num, dup := range seen {
		if len(dup) > 1 {
			t.Logf("number %d written %d times: %+v", num, len(dup), dup)
		}
	}
	nums := make([]testcluster.Numbered, 0, len(outs))
	for _, o := range outs { // outs come partition by partition, in offset order
		nums = append(nums, testcluster.Numbered{N: o.n, Key: o.key, Partition: o.partition})
	}
	testcluster.RequireExactlyOnce(t, nums, n)
}

// transformFor returns a Transform that writes "<n>|<holder>" with the
// input's key to the default output, partitioned by key, and counts its
// calls.
func transformFor(holder int, calls *atomic.Int64) func(Message) ([]fencing.Message, error) {
	return func(in Message) ([]fencing.Message, error) {
		calls.Add(1)
		return []fencing.Message{{Partition: fencing.PartitionByKey, Key: in.Key, Value: []byte(fmt.Sprintf("%s|%d", in.Value, holder))}}, nil
	}
}

// done reports whether progress has reached end on every partition.
func done(progress, end map[int32]int64) bool {
	for p, off := range end {
		if off > 0 && progress[p] < off {
			return false
		}
	}
	return true
}

// runToEnd runs Run with cfg until the group's committed offsets reach
// end, then cancels it, and returns what Run returned. cfg.OnCommit, when
// set, is called first. It fails the test when the test's own ctx ended
// first (Run would then return nil without having finished).
func (e *env) runToEnd(ctx context.Context, cfg Config, role codec.Role, tok codec.Token, end map[int32]int64) error {
	e.t.Helper()
	progress := e.committedOffsets(cfg.Group, cfg.Input)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if done(progress, end) {
		e.t.Fatalf("nothing to do: the group is at %v already", progress)
	}
	onCommit := cfg.OnCommit
	cfg.OnCommit = func(cm Commit) {
		if onCommit != nil {
			onCommit(cm)
		}
		for p, off := range cm.Offsets {
			progress[p] = off
		}
		if done(progress, end) {
			cancel()
		}
	}
	err := Run(rctx, cfg, role, tok)
	require.NoError(e.t, ctx.Err(), "the test's time ran out before the run reached the end of the input")
	return err
}
