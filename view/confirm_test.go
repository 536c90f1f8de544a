package view

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/testcluster"
	"github.com/krabka/krole/rolestate"
)

// consumerGate holds the view's consumer back: while closed, each fetch
// that long-polls (the consumer's; the view's probes never wait) sleeps at
// the broker until the gate opens. The probes pass.
type consumerGate struct {
	c       *testcluster.Cluster
	mu      sync.Mutex
	open    chan struct{}
	waiting chan struct{} // closed when a fetch is held
	once    sync.Once
}

func holdConsumer(t *testing.T, c *testcluster.Cluster) *consumerGate {
	t.Helper()
	return holdConsumerIf(t, c, func(*kmsg.FetchRequest) bool { return true })
}

// holdConsumerIf is holdConsumer for the consumer's fetches that hold
// says to hold; the others pass.
func holdConsumerIf(t *testing.T, c *testcluster.Cluster, hold func(*kmsg.FetchRequest) bool) *consumerGate {
	t.Helper()
	c.RequireFake(t)
	g := &consumerGate{c: c, open: make(chan struct{}), waiting: make(chan struct{})}
	c.Fake.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.Fake.KeepControl()
		if fr := req.(*kmsg.FetchRequest); fr.MaxWaitMillis == 0 || !hold(fr) {
			return nil, nil, false // a probe, or a fetch let through
		}
		g.mu.Lock()
		open := g.open
		g.mu.Unlock()
		select {
		case <-open:
			return nil, nil, false
		default:
		}
		g.once.Do(func() { close(g.waiting) })
		c.Fake.SleepControl(func() { <-open })
		return nil, nil, false
	})
	t.Cleanup(g.release)
	return g
}

// held waits until a fetch of the consumer is held at the broker.
func (g *consumerGate) held(t *testing.T) {
	t.Helper()
	select {
	case <-g.waiting:
	case <-time.After(20 * time.Second):
		t.Fatal("the view's consumer sent no fetch")
	}
}

func (g *consumerGate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
	default:
		close(g.open)
	}
}

// TestConfirmHoldsARecordCommittedJustBefore: a lease committed just
// before Confirm is in its answer, although the view's consumer has not
// fetched it yet when Confirm is called; a lookup at that moment does not
// show it.
func TestConfirmHoldsARecordCommittedJustBefore(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 2})
	m := c.Members(t)
	m.Register("db", "m1")
	v, _ := runView(t, c.Config, Options{})
	caughtUp(t, v)

	g := holdConsumer(t, c)
	g.held(t)
	l := m.Lease("db", "m1", time.Minute) // committed: its marker is written
	st, err := v.Role(testCtx(t), "db")
	require.NoError(t, err)
	require.Nil(t, st.Lease, "the consumer is held: the table does not have the lease yet")

	type result struct {
		err   error
		lease *codec.Lease
		open  int64
	}
	done := make(chan result, 1)
	go func() {
		cf, err := v.Confirm(testCtx(t), "db")
		done <- result{err, cf.State.Lease, cf.OpenProducerID}
	}()
	select {
	case r := <-done:
		t.Fatalf("Confirm returned while the view could not have the lease: %+v", r)
	case <-time.After(300 * time.Millisecond):
	}
	g.release()
	r := <-done
	require.NoError(t, r.err)
	require.NotNil(t, r.lease, "the lease committed before Confirm")
	assert.Equal(t, l, *r.lease)
	assert.Equal(t, int64(-1), r.open, "no open transaction")

	// Nothing new: a second Confirm needs no fetch of the view and answers
	// the same.
	cf, err := v.Confirm(testCtx(t), "db")
	require.NoError(t, err)
	assert.Equal(t, l, *cf.State.Lease)
	assert.Equal(t, []codec.MemberID{"m1"}, members(cf.State.Candidates))
}

// TestConfirmReportsAnOpenTransaction: another producer's transaction open
// in the role's partition is reported with its producer id; the state holds
// what was committed before it and nothing of it.
func TestConfirmReportsAnOpenTransaction(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	m := c.Members(t)
	w := newWriter(t, c, 1)
	m.Register("db", "m1")
	l := m.Lease("db", "m1", time.Minute)
	v, _ := runView(t, c.Config, Options{})
	caughtUp(t, v)

	cf, err := v.Confirm(testCtx(t), "db")
	require.NoError(t, err)
	assert.Equal(t, int64(-1), cf.OpenProducerID, "no transaction open yet")

	// Another producer opens a transaction in the partition and does not
	// end it.
	tp := w.txnProducer("other")
	require.NoError(t, tp.BeginTxn())
	_, _, err = tp.SendMessage(leaseMsg(t, w, "db", mkLease("m2", 9, time.Now(), time.Minute)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = tp.AbortTxn() })
	w.register("db", "m3") // behind the open transaction
	// Its producer id, from its transaction coordinator.
	tok, ok, err := m.Transport.Describe(testCtx(t), "other")
	require.NoError(t, err)
	require.True(t, ok)
	require.NotEqual(t, l.Token.ProducerID, tok.ProducerID, "another producer than the holder's")

	cf, err = v.Confirm(testCtx(t), "db")
	require.NoError(t, err)
	assert.Equal(t, tok.ProducerID, cf.OpenProducerID, "the open transaction's producer id, as the coordinator knows it")
	require.NotNil(t, cf.State.Lease)
	assert.Equal(t, l, *cf.State.Lease, "the committed lease, not the open one")
	assert.Equal(t, []codec.MemberID{"m1"}, members(cf.State.Candidates), "nothing past the open transaction's first offset")

	require.NoError(t, tp.CommitTxn())
	require.Eventually(t, func() bool {
		cf, err = v.Confirm(testCtx(t), "db")
		return err == nil && cf.OpenProducerID == -1
	}, 10*time.Second, 20*time.Millisecond)
	require.NotNil(t, cf.State.Lease)
	assert.Equal(t, codec.MemberID("m2"), cf.State.Lease.Member)
	assert.Equal(t, []codec.MemberID{"m1", "m3"}, members(cf.State.Candidates))
}

// TestConfirmFailsWhenTheClusterIsGone: a view that cannot reach the
// cluster confirms nothing: Confirm fails (not with ctx) and gives no
// state, although the table still holds the role.
func TestConfirmFailsWhenTheClusterIsGone(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	c.RequireFake(t)
	m := c.Members(t)
	m.Lease("db", "m1", time.Hour)
	v, _ := runView(t, c.Config, Options{})
	caughtUp(t, v)
	cf, err := v.Confirm(testCtx(t), "db")
	require.NoError(t, err)
	require.NotNil(t, cf.State.Lease)

	c.Fake.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cf, err = v.Confirm(ctx, "db")
	require.Error(t, err)
	assert.NoError(t, ctx.Err(), "the probe failed; the context did not end")
	assert.False(t, errors.Is(err, ErrNotCaughtUp), "a failed probe, not a context that ended: %v", err)
	assert.Nil(t, cf.State.Lease, "no stale state with the error")
	assert.Equal(t, int64(-1), cf.OpenProducerID)
	st, err := v.Role(testCtx(t), "db")
	require.NoError(t, err)
	assert.NotNil(t, st.Lease, "the table still has it: lookups answer from it")
}

// TestConfirmContractErrors: ctx ending first gives ErrNotCaughtUp with
// ctx's error; after Run, ErrStopped.
func TestConfirmContractErrors(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	idle, err := New(Options{Config: c.Config})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err = idle.Confirm(ctx, "db")
	assert.ErrorIs(t, err, ErrNotCaughtUp)
	assert.ErrorIs(t, err, context.DeadlineExceeded)

	v, stop := runView(t, c.Config, Options{})
	caughtUp(t, v)
	stop()
	_, err = v.Confirm(testCtx(t), "db")
	assert.ErrorIs(t, err, ErrStopped)
}

// fakeClock is a view clock that moves only when told.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *fakeClock) Now() time.Time                  { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Advance(d time.Duration)         { c.ns.Add(int64(d)) }
func (c *fakeClock) Set(t time.Time)                 { c.ns.Store(t.UnixNano()) }
func (c *fakeClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// countProbes counts, from now on, the ListOffsets requests and the
// fetches that do not wait (the view's probes; its consumer's fetches
// wait) the cluster is sent.
func countProbes(t *testing.T, c *testcluster.Cluster) (listOffsets, fetches *atomic.Int64) {
	t.Helper()
	c.RequireFake(t)
	listOffsets, fetches = new(atomic.Int64), new(atomic.Int64)
	c.Fake.ControlKey(int16(kmsg.ListOffsets), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.Fake.KeepControl()
		listOffsets.Add(1)
		return nil, nil, false
	})
	c.Fake.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.Fake.KeepControl()
		if req.(*kmsg.FetchRequest).MaxWaitMillis == 0 {
			fetches.Add(1)
		}
		return nil, nil, false
	})
	return listOffsets, fetches
}

// confirmedOnce starts a one-partition cluster where m1 is a candidate of
// db, and a view of it that has caught up and confirmed db once.
func confirmedOnce(t *testing.T) (*testcluster.Cluster, *testcluster.Members, *View) {
	t.Helper()
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	m := c.Members(t)
	m.Register("db", "m1")
	v, _ := runView(t, c.Config, Options{})
	caughtUp(t, v)
	_, err := v.Confirm(testCtx(t), "db")
	require.NoError(t, err)
	return c, m, v
}

// TestConfirmAfterTheFirstIsOneFetch: once the view has caught up, a
// confirmation with no transaction open is one round trip (a
// read_committed Fetch from what the view has read answers the last stable
// offset and the records below it), however the partition moved since the
// last one; it still holds the lease committed just before it.
func TestConfirmAfterTheFirstIsOneFetch(t *testing.T) {
	c, m, v := confirmedOnce(t)

	g := holdConsumer(t, c)
	g.held(t)
	m.Register("db", "m2")
	l := m.Lease("db", "m1", time.Minute)
	lists, fetches := countProbes(t, c)
	done := make(chan error, 1)
	var got *codec.Lease
	go func() {
		cf, err := v.Confirm(testCtx(t), "db")
		got = cf.State.Lease
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("Confirm returned while the view could not have the lease: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	g.release()
	require.NoError(t, <-done)
	require.NotNil(t, got)
	assert.Equal(t, l, *got)
	assert.Equal(t, int64(0), lists.Load(), "no ListOffsets: the Fetch answers the last stable offset")
	assert.Equal(t, int64(1), fetches.Load(), "one probe Fetch")
}

// TestConfirmPastOneFetchAnswer: when the records the view has not read
// yet are more than one probe Fetch's answer holds, Confirm still waits
// for the last one below the last stable offset.
func TestConfirmPastOneFetchAnswer(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	m := c.Members(t)
	w := newWriter(t, c, 1)
	m.Register("db", "m0")
	v, _ := runView(t, c.Config, Options{})
	caughtUp(t, v)
	_, err := v.Confirm(testCtx(t), "db")
	require.NoError(t, err)

	g := holdConsumer(t, c)
	g.held(t)
	const n = 1500 // registrations of about 300 bytes each: past probeMaxBytes
	long := strings.Repeat("x", 120)
	msgs, size := make([]*sarama.ProducerMessage, 0, n), 0
	for i := range n {
		member := codec.MemberID(fmt.Sprintf("%s%05d", long, i))
		b, err := codec.EncodeRecord(codec.Record{Registration: &codec.Registration{Member: member, RegisteredAt: time.Now().UnixMilli()}})
		require.NoError(t, err)
		key := codec.RegistrationKey("db", member).String()
		msgs = append(msgs, &sarama.ProducerMessage{Topic: c.Config.Topic, Key: sarama.StringEncoder(key),
			Value: sarama.ByteEncoder(b), Partition: 0})
		size += len(key) + len(b)
	}
	require.Greater(t, size, probeMaxBytes)
	for i := 0; i < n; i += 50 { // batches of 50: the answer stops between two
		require.NoError(t, w.plain.SendMessages(msgs[i:i+50]))
	}
	last := w.register("db", "last")
	done := make(chan error, 1)
	var got rolestate.State
	go func() {
		cf, err := v.Confirm(testCtx(t), "db")
		got = cf.State
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("Confirm returned while the view could not have the registrations: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	g.release()
	require.NoError(t, <-done)
	require.Equal(t, n+2, len(got.Candidates), "every registration")
	assert.Equal(t, codec.MemberID("last"), got.Candidates[n+1].Member)
	assert.Equal(t, last, got.Candidates[n+1].Offset)
}
