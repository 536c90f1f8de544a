package testcluster_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/testcluster"
	"github.com/krabka/krole/processor/stream"
	"github.com/krabka/krole/rolestate"
	"github.com/krabka/krole/view"
)

// versionLog records the highest version of each request key the
// embedded cluster was sent.
type versionLog struct {
	mu  sync.Mutex
	max map[int16]int16
}

func (l *versionLog) record(req kmsg.Request) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if v, ok := l.max[req.Key()]; !ok || req.GetVersion() > v {
		l.max[req.Key()] = req.GetVersion()
	}
}

// The version matrix: under the request versions of Apache Kafka 3.0,
// Apache Kafka 4.0 and Redpanda, every request krole sends negotiates
// down and works: acquire, lease write, a fenced writer, application
// writes read back read_committed, the role's records, describe, and a
// view that catches up with all of it. Each request sent is at or below
// the broker's maximum for its key (kfake refuses one above, so the test
// would fail there too, but the log says which).
func TestVersionMatrix(t *testing.T) {
	if testcluster.External() {
		t.Skip("caps the embedded cluster's versions; KROLE_BROKERS names an outside cluster with versions of its own")
	}
	for _, b := range testcluster.RealBrokers() {
		t.Run(b.Name, func(t *testing.T) {
			c := testcluster.Start(t, testcluster.Options{Partitions: 3, MaxVersions: b.Versions})
			log := &versionLog{max: map[int16]int16{}}
			c.Fake.Control(func(req kmsg.Request) (kmsg.Response, error, bool) {
				c.Fake.KeepControl()
				log.record(req)
				return nil, nil, false
			})
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()

			v, err := view.New(view.Options{Config: c.Config})
			require.NoError(t, err)
			vctx, vcancel := context.WithCancel(ctx)
			vdone := make(chan error, 1)
			go func() { vdone <- v.Run(vctx) }()
			defer func() { vcancel(); require.NoError(t, <-vdone) }()

			role := codec.Role("matrix")
			a, b2 := c.Transport(t), c.Transport(t)
			_, err = a.Register(ctx, role, "node-a")
			require.NoError(t, err)
			_, err = b2.Register(ctx, role, "node-b")
			require.NoError(t, err)

			tokA, err := a.AcquireEpoch(ctx, role)
			require.NoError(t, err)
			now := time.Now().UnixMilli()
			la, err := codec.NewLease("node-a", tokA, now, now+30_000)
			require.NoError(t, err)
			require.NoError(t, leaseErr(a.WriteLease(ctx, role, tokA, la)))

			data := c.Topic(t, c.Name("data"), 2, 10*time.Second)
			require.NoError(t, a.Writer(role, tokA).Write(ctx,
				fencing.Message{Topic: data, Partition: 0, Value: []byte("a-0")},
				fencing.Message{Topic: data, Partition: 1, Value: []byte("a-1")}))

			require.NoError(t, v.WaitCaughtUp(ctx))
			st, err := v.Role(ctx, role)
			require.NoError(t, err)
			require.NotNil(t, st.Lease)
			assert.Equal(t, la, *st.Lease, "the view caught up with the lease")
			assert.Len(t, st.Candidates, 2)

			tokB, err := b2.AcquireEpoch(ctx, role)
			require.NoError(t, err)
			assert.True(t, tokB.Newer(tokA))
			err = leaseErr(a.WriteLease(ctx, role, tokA, la))
			assert.True(t, fencing.IsFenced(err), "the old holder's lease write is fenced: %v", err)
			err = a.Writer(role, tokA).Write(ctx, fencing.Message{Topic: data, Partition: 0, Value: []byte("a-late")})
			assert.Error(t, err, "the old holder's application write is refused")
			lb, err := codec.NewLease("node-b", tokB, now, now+30_000)
			require.NoError(t, err)
			require.NoError(t, leaseErr(b2.WriteLease(ctx, role, tokB, lb)))
			require.NoError(t, b2.Writer(role, tokB).Write(ctx, fencing.Message{Topic: data, Partition: 0, Value: []byte("b-0")}))

			got, ok, err := b2.Describe(ctx, role)
			require.NoError(t, err)
			assert.True(t, ok)
			assert.Equal(t, tokB, got, "describe names the current token")

			recs, err := b2.ReadRoleRecords(ctx, role)
			require.NoError(t, err)
			var leases []codec.Lease
			for _, r := range recs {
				if r.Record.Lease != nil {
					leases = append(leases, *r.Record.Lease)
				}
			}
			assert.Equal(t, []codec.Lease{la, lb}, leases)

			var values []string
			for _, m := range c.ReadAll(t, data, sarama.ReadCommitted, 20*time.Second) {
				values = append(values, string(m.Value))
			}
			assert.ElementsMatch(t, []string{"a-0", "a-1", "b-0"}, values, "nothing of the fenced writer shows")

			require.NoError(t, v.WaitCaughtUp(ctx))
			st, err = v.Role(ctx, role)
			require.NoError(t, err)
			require.NotNil(t, st.Lease)
			assert.Equal(t, lb, *st.Lease, "the view caught up with the takeover")

			// processor/stream's requests (OffsetFetch, AddOffsetsToTxn,
			// TxnOffsetCommit; Redpanda caps AddOffsetsToTxn at v1): the
			// new holder copies three input records exactly once.
			in, out := c.Topic(t, c.Name("in"), 2, 10*time.Second), c.Topic(t, c.Name("out"), 2, 10*time.Second)
			prod, err := sarama.NewSyncProducer(c.Config.Brokers, c.Sarama(t))
			require.NoError(t, err)
			for i, val := range []string{"s-0", "s-1", "s-2"} {
				_, _, err := prod.SendMessage(&sarama.ProducerMessage{Topic: in, Partition: int32(i % 2), Value: sarama.StringEncoder(val)})
				require.NoError(t, err)
			}
			require.NoError(t, prod.Close())
			sctx, scancel := context.WithCancel(ctx)
			consumed := 0
			err = stream.Run(sctx, stream.Config{Transport: b2, Group: c.Name("group"), Input: in, Output: out,
				OnCommit: func(cm stream.Commit) {
					if consumed += cm.Records; consumed >= 3 {
						scancel()
					}
				}}, role, tokB)
			scancel()
			require.NoError(t, err)
			assert.Equal(t, 3, consumed, "the stream consumed each input once")
			values = nil
			for _, m := range c.ReadAll(t, out, sarama.ReadCommitted, 20*time.Second) {
				values = append(values, string(m.Value))
			}
			assert.ElementsMatch(t, []string{"s-0", "s-1", "s-2"}, values, "the stream's outputs are committed once each")

			log.mu.Lock()
			defer log.mu.Unlock()
			for _, k := range []kmsg.Key{kmsg.Produce, kmsg.Fetch, kmsg.ListOffsets, kmsg.Metadata, kmsg.InitProducerID,
				kmsg.AddPartitionsToTxn, kmsg.EndTxn, kmsg.FindCoordinator, kmsg.DescribeTransactions,
				kmsg.OffsetFetch, kmsg.AddOffsetsToTxn, kmsg.TxnOffsetCommit} {
				sent, ok := log.max[int16(k)]
				require.True(t, ok, "%s was sent", k.Name())
				limit, _ := b.Versions.LookupMaxKeyVersion(int16(k))
				assert.LessOrEqual(t, sent, limit, "%s v%d is above %s's v%d", k.Name(), sent, b.Name, limit)
				t.Logf("%s: sent v%d, broker max v%d", k.Name(), sent, limit)
			}
		})
	}
}

// runView runs a view of c's role topic (its table in dir when dir is set)
// until the returned stop is called, which waits for Run to return nil.
func runView(t *testing.T, c *testcluster.Cluster, dir string) (*view.View, func()) {
	t.Helper()
	v, err := view.New(view.Options{Config: c.Config, StateDir: dir})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- v.Run(ctx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		require.NoError(t, <-done)
	}
	t.Cleanup(stop)
	wctx, wcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer wcancel()
	require.NoError(t, v.WaitCaughtUp(wctx))
	return v, stop
}

// roleState is what compaction must not change of a role's state: the
// lease with its offset, and the candidates with theirs (their ranks).
type roleState struct {
	Lease       *codec.Lease
	LeaseOffset int64
	Candidates  []rolestate.Candidate
}

func stateOf(t *testing.T, v *view.View, role codec.Role) roleState {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, v.WaitCaughtUp(ctx))
	st, err := v.Role(ctx, role)
	require.NoError(t, err)
	return roleState{Lease: st.Lease, LeaseOffset: st.LeaseOffset, Candidates: st.Candidates}
}

// Compaction of the role topic (kfake's Compact and ApplyRetention, as the
// log cleaner would run them) between elections changes nothing the
// succession rules read: the lease and its offset, the candidates and
// their offsets (their ranks), for a fresh view and for a view resumed
// from its state dir; and the next election goes on from there. It does
// remove records (superseded leases, the registration a member replaced,
// an aborted lease write).
func TestCompactionKeepsRankingHoldersAndResumedView(t *testing.T) {
	if testcluster.External() {
		t.Skip("compacts the embedded cluster's topic")
	}
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	role, other := codec.Role("compacted"), codec.Role("neighbour")
	tr := c.Transport(t)
	for _, m := range []codec.MemberID{"node-1", "node-2", "node-3"} {
		_, err := tr.Register(ctx, role, m)
		require.NoError(t, err)
	}
	_, err := tr.Register(ctx, role, "node-1") // node-1 moves to the back
	require.NoError(t, err)
	_, err = tr.Register(ctx, other, "node-9")
	require.NoError(t, err)

	lease := func(m codec.MemberID, tok codec.Token) codec.Lease {
		now := time.Now().UnixMilli()
		l, err := codec.NewLease(m, tok, now, now+30_000)
		require.NoError(t, err)
		return l
	}
	// First election: node-2 holds and renews; an aborted write under its
	// token; node-3 takes over and renews.
	tok2, err := tr.AcquireEpoch(ctx, role)
	require.NoError(t, err)
	for i := 0; i < 3; i++ {
		require.NoError(t, leaseErr(tr.WriteLease(ctx, role, tok2, lease("node-2", tok2))))
	}
	aborted := errors.New("aborted on purpose")
	err = tr.Transact(ctx, role, tok2, func(tx *fencing.Txn) error {
		v, err := codec.EncodeRecord(codec.Record{Lease: ptr(lease("node-2", tok2))})
		require.NoError(t, err)
		_, err = tx.Produce(c.Config.Topic, 0, codec.LeaseKey(role).Encode(), v)
		require.NoError(t, err)
		return aborted
	})
	require.ErrorIs(t, err, aborted)
	tr3 := c.Transport(t)
	tok3, err := tr3.AcquireEpoch(ctx, role)
	require.NoError(t, err)
	for i := 0; i < 3; i++ {
		require.NoError(t, leaseErr(tr3.WriteLease(ctx, role, tok3, lease("node-3", tok3))))
	}
	tokN, err := tr.AcquireEpoch(ctx, other)
	require.NoError(t, err)
	require.NoError(t, leaseErr(tr.WriteLease(ctx, other, tokN, lease("node-9", tokN))))

	dir := t.TempDir()
	resumed, stop := runView(t, c, dir)
	before, beforeOther := stateOf(t, resumed, role), stateOf(t, resumed, other)
	require.NotNil(t, before.Lease)
	assert.Equal(t, codec.MemberID("node-3"), before.Lease.Member)
	var ranks []codec.MemberID
	for _, cand := range before.Candidates {
		ranks = append(ranks, cand.Member)
	}
	assert.Equal(t, []codec.MemberID{"node-2", "node-3", "node-1"}, ranks)
	stop()
	recsBefore, err := tr.ReadRoleRecords(ctx, role)
	require.NoError(t, err)

	c.Fake.Compact()
	c.Fake.ApplyRetention()

	recsAfter, err := tr.ReadRoleRecords(ctx, role)
	require.NoError(t, err)
	assert.Less(t, len(recsAfter), len(recsBefore), "compaction removed records")
	t.Logf("role records: %d before compaction, %d after", len(recsBefore), len(recsAfter))

	fresh, _ := runView(t, c, "")
	assert.Equal(t, before, stateOf(t, fresh, role), "a fresh view reads the same state from the compacted topic")
	assert.Equal(t, beforeOther, stateOf(t, fresh, other))
	resumed, _ = runView(t, c, dir)
	assert.Equal(t, before, stateOf(t, resumed, role), "a view resumed from its state dir is unchanged")
	assert.Equal(t, beforeOther, stateOf(t, resumed, other))

	// The next election: node-2 (first in rank) takes over, fencing node-3.
	tok2b, err := tr.AcquireEpoch(ctx, role)
	require.NoError(t, err)
	assert.True(t, fencing.IsFenced(leaseErr(tr3.WriteLease(ctx, role, tok3, lease("node-3", tok3)))), "node-3 is fenced")
	l := lease("node-2", tok2b)
	require.NoError(t, leaseErr(tr.WriteLease(ctx, role, tok2b, l)))
	require.NoError(t, tr.Deregister(ctx, role, "node-3"))
	c.Fake.Compact()
	for name, v := range map[string]*view.View{"fresh": fresh, "resumed": resumed} {
		st := stateOf(t, v, role)
		require.NotNil(t, st.Lease, name)
		assert.Equal(t, l, *st.Lease, name)
		ranks = ranks[:0]
		for _, cand := range st.Candidates {
			ranks = append(ranks, cand.Member)
		}
		assert.Equal(t, []codec.MemberID{"node-2", "node-1"}, ranks, name)
	}
}

// What a view offline for longer than delete.retention.ms can miss: the
// log cleaner removed a deregistration's tombstone (and the registration
// it removed) before the view read them, so a view resumed from its state
// dir keeps the removed candidate. A view that rereads the topic (its
// state dir deleted) is right. Documented in docs/CLI.md ("krole init") and
// internal/cli/init.go.
func TestViewOfflineLongerThanDeleteRetentionKeepsARemovedCandidate(t *testing.T) {
	if testcluster.External() {
		t.Skip("compacts the embedded cluster's topic")
	}
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	role := codec.Role("forgotten")
	tr := c.Transport(t)
	for _, m := range []codec.MemberID{"node-1", "node-2"} {
		_, err := tr.Register(ctx, role, m)
		require.NoError(t, err)
	}
	dir := t.TempDir()
	v, stop := runView(t, c, dir)
	require.Len(t, stateOf(t, v, role).Candidates, 2)
	stop()

	// While the view is offline: node-2 leaves, and the tombstone is
	// older than delete.retention.ms (0 here) when the cleaner runs.
	require.NoError(t, tr.Deregister(ctx, role, "node-2"))
	_, err := tr.Register(ctx, role, "node-3") // so the tombstone is not the last batch
	require.NoError(t, err)
	setTopicConfig(t, c, "delete.retention.ms", "0")
	c.Fake.Compact()

	resumed, _ := runView(t, c, dir)
	var stale []codec.MemberID
	for _, cand := range stateOf(t, resumed, role).Candidates {
		stale = append(stale, cand.Member)
	}
	assert.Equal(t, []codec.MemberID{"node-1", "node-2", "node-3"}, stale, "the removed candidate stays in the resumed table")

	fresh, _ := runView(t, c, t.TempDir())
	var right []codec.MemberID
	for _, cand := range stateOf(t, fresh, role).Candidates {
		right = append(right, cand.Member)
	}
	assert.Equal(t, []codec.MemberID{"node-1", "node-3"}, right, "a view with a new state dir is right")
}

func setTopicConfig(t *testing.T, c *testcluster.Cluster, name, value string) {
	t.Helper()
	admin, err := sarama.NewClusterAdmin(c.Config.Brokers, c.Sarama(t))
	require.NoError(t, err)
	defer admin.Close()
	require.NoError(t, admin.IncrementalAlterConfig(sarama.TopicResource, c.Config.Topic,
		map[string]sarama.IncrementalAlterConfigsEntry{name: {Operation: sarama.IncrementalAlterConfigsOperationSet, Value: &value}}, false))
}

func ptr[T any](v T) *T { return &v }

// leaseErr is the error of a WriteLease, for tests that do not look at
// the offset.
func leaseErr(_ int64, err error) error { return err }
