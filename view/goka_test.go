package view

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"
	gokacodec "github.com/lovoo/goka/codec"
	"github.com/lovoo/goka/storage"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/testcluster"
)

// The tests in this file pin the goka v1.1.14 behaviours listed at the top
// of goka.go, on goka alone (with the view's consumer, but none of the
// view's other glue), so that an upgrade that changes one fails here
// first.

// TestGokaDefaultConsumerConfigReadsUncommitted: goka's default consumer
// config reads uncommitted records, so the view must hand goka a consumer
// of its own.
func TestGokaDefaultConsumerConfigReadsUncommitted(t *testing.T) {
	assert.Equal(t, sarama.ReadUncommitted, goka.DefaultConfig().Consumer.IsolationLevel)
}

// gokaEvents records what goka does with one partition, in order.
type gokaEvents struct {
	mu  sync.Mutex
	evs []string
	ch  chan string
}

func (g *gokaEvents) add(format string, a ...any) {
	e := fmt.Sprintf(format, a...)
	g.mu.Lock()
	g.evs = append(g.evs, e)
	g.mu.Unlock()
	g.ch <- e
}

func (g *gokaEvents) next(t *testing.T) string {
	t.Helper()
	select {
	case e := <-g.ch:
		return e
	case <-time.After(10 * time.Second):
		t.Fatal("goka did nothing more")
		return ""
	}
}

// eventStore is goka's in-memory storage, recording GetOffset and
// MarkRecovered; GetOffset answers stored (goka's def when stored is nil).
type eventStore struct {
	storage.Storage
	ev     *gokaEvents
	stored *int64
}

func (s *eventStore) GetOffset(def int64) (int64, error) {
	off := def
	if s.stored != nil {
		off = *s.stored
	}
	s.ev.add("get-offset def=%d -> %d", def, off)
	return off, nil
}

func (s *eventStore) MarkRecovered() error {
	s.ev.add("recovered")
	return s.Storage.MarkRecovered()
}

// eventTopicManager records the newest offsets goka asks for.
type eventTopicManager struct {
	goka.TopicManager
	ev *gokaEvents
}

func (m *eventTopicManager) GetOffset(topic string, partition int32, which int64) (int64, error) {
	off, err := m.TopicManager.GetOffset(topic, partition, which)
	if which == sarama.OffsetNewest {
		m.ev.add("newest %d", off)
	}
	return off, err
}

// runGoka runs a goka View of c's topic (one partition) with the view's
// consumer, a recording storage and topic manager; stored is what the
// storage's GetOffset answers (nil: goka's default).
func runGoka(t *testing.T, c *testcluster.Cluster, stored *int64) (*goka.View, *gokaEvents) {
	t.Helper()
	ev := &gokaEvents{ch: make(chan string, 100)}
	sc, err := c.Config.Sarama()
	require.NoError(t, err)
	sc.Consumer.MaxWaitTime = fetchMaxWait
	client, err := sarama.NewClient(c.Config.Brokers, sc)
	require.NoError(t, err)
	var cons *fetchConsumer
	var mu sync.Mutex
	var tms []goka.TopicManager
	gv, err := goka.NewView(c.Config.Brokers, goka.Table(c.Config.Topic), new(gokacodec.Bytes),
		goka.WithViewStorageBuilder(func(string, int32) (storage.Storage, error) {
			return &eventStore{Storage: storage.NewMemory(), ev: ev, stored: stored}, nil
		}),
		goka.WithViewConsumerSaramaBuilder(func([]string, string) (sarama.Consumer, error) {
			cons = newFetchConsumer(client, sc, nil)
			return cons, nil
		}),
		goka.WithViewTopicManagerBuilder(func(brokers []string) (goka.TopicManager, error) {
			m, err := goka.NewTopicManager(brokers, sc, goka.NewTopicManagerConfig())
			if err == nil {
				mu.Lock()
				tms = append(tms, m)
				mu.Unlock()
			}
			return &eventTopicManager{TopicManager: m, ev: ev}, err
		}),
		goka.WithViewCallback(func(uc goka.UpdateContext, _ storage.Storage, key string, _ []byte) error {
			_, hdr := uc.Headers()[BatchHeader]
			ev.add("update %d header=%v", uc.Offset(), hdr)
			return nil
		}),
	)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- gv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
		if cons != nil {
			_ = cons.Close()
		}
		for _, tm := range tms {
			_ = tm.Close()
		}
		_ = client.Close()
	})
	return gv, ev
}

// TestGokaRecoveryEndsAtNewestMinusOne pins goka's recovery of a
// partition: it asks the storage for its offset (with goka's "not stored"
// marker, -3, as default) and the topic manager for the newest offset,
// starts the consumer at the oldest offset, calls the update callback once
// per record in offset order with the record's headers, and ends recovery
// (MarkRecovered) only once it has been handed a record at newest - 1 or
// beyond. A partition that ends in a transaction marker never gets there
// while nothing follows the marker: the record after it ends recovery.
func TestGokaRecoveryEndsAtNewestMinusOne(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	w := newWriter(t, c, 1)
	tp := w.txnProducer("w")
	w.register("r", "a")                                           // 0
	w.lease(tp, "r", mkLease("a", 0, time.Now(), time.Hour), true) // 1, commit marker at 2

	gv, ev := runGoka(t, c, nil)
	assert.Equal(t, "get-offset def=-3 -> -3", ev.next(t))
	assert.Equal(t, "newest 3", ev.next(t), "the newest offset counts the marker")
	assert.Equal(t, "update 0 header=true", ev.next(t))
	assert.Equal(t, "update 1 header=true", ev.next(t))
	assert.False(t, gv.Recovered(), "the record before the marker does not end recovery")

	w.register("r", "b") // 3
	assert.Equal(t, "update 3 header=true", ev.next(t))
	assert.Equal(t, "recovered", ev.next(t), "a record at newest - 1 or beyond ends recovery")
}

// TestGokaStartsTheConsumerAfterTheStoredOffset pins how goka picks the
// consumer's start: one past the offset the storage's GetOffset answers,
// and when that is at or past the newest offset, recovery reads nothing
// and ends at once (tailTopicManager relies on it).
func TestGokaStartsTheConsumerAfterTheStoredOffset(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	w := newWriter(t, c, 1)
	for _, m := range []string{"a", "b", "c", "d"} {
		w.register("r", codec.MemberID(m))
	}

	stored := int64(1)
	_, ev := runGoka(t, c, &stored)
	assert.Equal(t, "get-offset def=-3 -> 1", ev.next(t))
	assert.Equal(t, "newest 4", ev.next(t))
	assert.Equal(t, "update 2 header=true", ev.next(t), "the consumer starts one past the stored offset")
	assert.Equal(t, "update 3 header=true", ev.next(t))
	assert.Equal(t, "recovered", ev.next(t))

	c2 := testcluster.Start(t, testcluster.Options{Partitions: 1})
	w2 := newWriter(t, c2, 1)
	w2.register("r", "a")
	end := int64(0) // where recovery would start: at the newest offset
	gv2, ev2 := runGoka(t, c2, &end)
	assert.Equal(t, "get-offset def=-3 -> 0", ev2.next(t))
	assert.Equal(t, "newest 1", ev2.next(t))
	assert.Equal(t, "recovered", ev2.next(t), "nothing to read: recovery ends without a record")
	require.Eventually(t, gv2.Recovered, 5*time.Second, 5*time.Millisecond)
	// The catch-up phase asks again and starts its consumer after offset 0.
	assert.Equal(t, "get-offset def=-3 -> 0", ev2.next(t))
	assert.Equal(t, "newest 1", ev2.next(t))
	w2.register("r", "b")
	assert.Equal(t, "update 1 header=true", ev2.next(t))
}
