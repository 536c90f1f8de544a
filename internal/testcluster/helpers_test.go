package testcluster

import (
	"context"
	"errors"
	"go.uber.org/goleak"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/syndtr/goleveldb/leveldb"

	"github.com/krabka/krole/internal/devcluster"
)

// failRecorder is a testing.TB that records a failure instead of failing
// the test; FailNow ends the goroutine, as it does for a test.
type failRecorder struct {
	testing.TB
	failed bool
}

func (r *failRecorder) Helper()                    {}
func (r *failRecorder) Errorf(string, ...any)      { r.failed = true }
func (r *failRecorder) Fatalf(string, ...any)      { r.failed = true; runtime.Goexit() }
func (r *failRecorder) FailNow()                   { r.failed = true; runtime.Goexit() }
func (r *failRecorder) Cleanup(f func())           { r.TB.Cleanup(f) }
func (r *failRecorder) Logf(f string, args ...any) { r.TB.Logf(f, args...) }

// fails reports whether fn fails the TB it is given.
func fails(t *testing.T, fn func(tb testing.TB)) bool {
	r := &failRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(r)
	}()
	<-done
	return r.failed
}

func cleanupPolicy(t *testing.T, c *Cluster, topic string) string {
	t.Helper()
	admin, err := sarama.NewClusterAdmin(c.Config.Brokers, c.Sarama(t))
	require.NoError(t, err)
	defer admin.Close()
	conf, err := devcluster.TopicConfigs(admin, topic)
	require.NoError(t, err)
	v, ok := conf["cleanup.policy"]
	if !ok {
		t.Fatalf("no cleanup.policy in the config of %s", topic)
	}
	return v
}

// Topic creates a fresh application topic, and fails on a name in use;
// CreateTopic stays idempotent for the role topic.
func TestTopicCreatesAFreshDeleteTopic(t *testing.T) {
	c := Start(t, Options{})
	name := c.Name("app")
	assert.True(t, strings.HasPrefix(name, c.Config.TxnPrefix+"app-"), name)
	assert.NotEqual(t, name, c.Name("app"))
	assert.Equal(t, name, c.Topic(t, name, 4, 10*time.Second))
	assert.Equal(t, "delete", cleanupPolicy(t, c, name))
	client, err := sarama.NewClient(c.Config.Brokers, c.Sarama(t))
	require.NoError(t, err)
	defer client.Close()
	ps, err := client.Partitions(name)
	require.NoError(t, err)
	assert.Len(t, ps, 4)

	assert.True(t, fails(t, func(tb testing.TB) { c.Topic(tb, name, 4, 10*time.Second) }), "a topic that exists already")
	err = devcluster.CreateNewTopic(context.Background(), c.Config, devcluster.TopicSpec{Name: name, Partitions: 4, Replication: 1, CleanupPolicy: "delete"})
	var te *sarama.TopicError
	require.True(t, errors.As(err, &te), "got %v", err)
	assert.Equal(t, sarama.ErrTopicAlreadyExists, te.Err)

	require.NoError(t, devcluster.CreateTopic(context.Background(), c.Config, 3, 1), "the role topic exists: fine")
	assert.Equal(t, "compact", cleanupPolicy(t, c, c.Config.Topic))
}

// ReadAll shows what each isolation shows, waits for an open transaction
// to end, and leaves the markers out.
func TestReadAllReadsUpToTheMarker(t *testing.T) {
	c := Start(t, Options{})
	topic := c.Topic(t, c.Name("data"), 2, 10*time.Second)
	plain, err := sarama.NewSyncProducer(c.Config.Brokers, c.Sarama(t))
	require.NoError(t, err)
	defer plain.Close()
	sc := c.Sarama(t)
	sc.Producer.Idempotent = true
	sc.Producer.Transaction.ID = c.Config.TransactionalID("readall")
	sc.Net.MaxOpenRequests = 1
	txn, err := sarama.NewSyncProducer(c.Config.Brokers, sc)
	require.NoError(t, err)
	defer txn.Close()
	send := func(p sarama.SyncProducer, partition int32, v string) {
		t.Helper()
		_, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: topic, Partition: partition, Value: sarama.StringEncoder(v)})
		require.NoError(t, err)
	}
	values := func(ms []*sarama.ConsumerMessage) []string {
		var out []string
		for _, m := range ms {
			assert.False(t, strings.HasPrefix(string(m.Key), "end-of-read-"), "a marker in the result")
			out = append(out, string(m.Value))
		}
		return out
	}

	send(plain, 0, "plain-0")
	send(plain, 1, "plain-1")
	require.NoError(t, txn.BeginTxn())
	send(txn, 0, "aborted")
	require.NoError(t, txn.AbortTxn())
	require.NoError(t, txn.BeginTxn())
	send(txn, 1, "committed")
	require.NoError(t, txn.CommitTxn())

	assert.Equal(t, []string{"plain-0", "plain-1", "committed"}, values(c.ReadAll(t, topic, sarama.ReadCommitted, 10*time.Second)))
	assert.Equal(t, []string{"plain-0", "aborted", "plain-1", "committed"}, values(c.ReadAll(t, topic, sarama.ReadUncommitted, 10*time.Second)),
		"the markers of the earlier read are left out too")

	// An open transaction holds a read_committed read back until it ends.
	require.NoError(t, txn.BeginTxn())
	send(txn, 0, "late")
	var ms []*sarama.ConsumerMessage
	failed := make(chan bool, 1)
	go func() {
		failed <- fails(t, func(tb testing.TB) { ms = c.ReadAll(tb, topic, sarama.ReadCommitted, 10*time.Second) })
	}()
	select {
	case <-failed:
		t.Fatalf("the read ended while a transaction was open: %v", values(ms))
	case <-time.After(300 * time.Millisecond):
	}
	require.NoError(t, txn.CommitTxn())
	select {
	case f := <-failed:
		require.False(t, f, "the read failed")
		assert.Equal(t, []string{"plain-0", "late", "plain-1", "committed"}, values(ms))
	case <-time.After(20 * time.Second):
		t.Fatal("the read did not end after the commit")
	}

	// A marker that does not show within the bound fails the test.
	require.NoError(t, txn.BeginTxn())
	send(txn, 1, "open")
	assert.True(t, fails(t, func(tb testing.TB) { c.ReadAll(tb, topic, sarama.ReadCommitted, 300*time.Millisecond) }),
		"the marker does not show past an open transaction within the bound")
	require.NoError(t, txn.AbortTxn())
}

func TestRequireExactlyOnce(t *testing.T) {
	ok := []Numbered{{0, "a", 0}, {2, "a", 0}, {1, "b", 1}, {3, "b", 1}}
	assert.False(t, fails(t, func(tb testing.TB) { RequireExactlyOnce(tb, ok, 4) }))
	for name, outs := range map[string][]Numbered{
		"a duplicate":        {{0, "a", 0}, {1, "a", 0}, {1, "b", 1}, {2, "b", 1}, {3, "b", 1}},
		"a gap":              {{0, "a", 0}, {1, "a", 0}, {3, "b", 1}},
		"out of range":       {{0, "a", 0}, {1, "a", 0}, {2, "b", 1}, {3, "b", 1}, {4, "b", 1}},
		"a key in two parts": {{0, "a", 0}, {2, "a", 0}, {1, "a", 1}, {3, "b", 1}},
		"a key out of order": {{2, "a", 0}, {0, "a", 0}, {1, "b", 1}, {3, "b", 1}},
	} {
		assert.True(t, fails(t, func(tb testing.TB) { RequireExactlyOnce(tb, outs, 4) }), name)
	}
}

// leakyWait blocks until release is closed: a goroutine the leak check
// must find.
//
//go:noinline
func leakyWait(started, release chan struct{}) {
	close(started)
	<-release
}

// The options the leak checks run with must not hide a goroutine of the
// code under test.
func TestLeakOptionsFindALeak(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	go leakyWait(started, release)
	<-started // a goroutine not yet running shows only its go statement's wrapper
	err := goleak.Find(LeakOptions()...)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "testcluster.leakyWait")
	close(release)
	// Other tests of the package may still be running: only ours counts.
	if err := goleak.Find(LeakOptions()...); err != nil {
		assert.NotContains(t, err.Error(), "testcluster.leakyWait")
	}
}

// A LevelDB database left open is a leak the checks find; one closed is
// not, even though its memory-pool drainer runs on for up to a second
// after Close (the check runs at once here, well within that second).
func TestLeakOptionsLevelDB(t *testing.T) {
	db, err := leveldb.OpenFile(t.TempDir(), nil)
	require.NoError(t, err)
	err = goleak.Find(LeakOptions()...)
	require.Error(t, err, "an open database")
	assert.Contains(t, err.Error(), "leveldb.(*DB).tCompaction")
	require.NoError(t, db.Close())
	if err := goleak.Find(LeakOptions()...); err != nil {
		assert.NotContains(t, err.Error(), "goleveldb", "a closed database")
	}
}

func TestSyncBuffer(t *testing.T) {
	var b SyncBuffer
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 100; i++ {
			_, _ = b.Write([]byte("x"))
		}
	}()
	for i := 0; i < 100; i++ {
		_ = b.String()
	}
	<-done
	assert.Equal(t, strings.Repeat("x", 100), b.String())
}
