package view

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/devcluster"
	"github.com/krabka/krole/internal/faultnet"
	"github.com/krabka/krole/internal/testcluster"
)

// recreateTopic deletes the role topic and creates it again, empty, with
// nparts partitions.
func recreateTopic(t *testing.T, c *testcluster.Cluster, nparts int32) {
	t.Helper()
	sc, err := c.Config.Sarama()
	require.NoError(t, err)
	admin, err := sarama.NewClusterAdmin(c.Config.Brokers, sc)
	require.NoError(t, err)
	defer admin.Close()
	require.NoError(t, admin.DeleteTopic(c.Config.Topic))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		// kfake deletes at once; a real cluster may still hold the topic
		// for a moment.
		err := devcluster.CreateTopic(ctx, c.Config, nparts, 1)
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			require.NoError(t, err, "recreating the topic")
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// changesUntil reads changes of ch until ok says the table is as wanted,
// and returns the last change of each role.
func changesUntil(t *testing.T, ch <-chan Change, ok func(map[codec.Role]Change) bool) map[codec.Role]Change {
	t.Helper()
	last := map[codec.Role]Change{}
	timeout := time.After(20 * time.Second)
	for !ok(last) {
		select {
		case c, open := <-ch:
			require.True(t, open, "the watch closed")
			last[c.Role] = c
		case <-timeout:
			t.Fatalf("the rebuilt states never arrived; got %+v", last)
		}
	}
	return last
}

// TestRecreatedTopicIsRebuilt: the role topic is deleted and created again
// while a view follows it, and new records are written. The view notices
// that the offsets went backwards, rebuilds its table from the new topic,
// counts the rebuild, and its subscribers get the rebuilt states: the new
// records only, none of the old state. With and without a state dir.
func TestRecreatedTopicIsRebuilt(t *testing.T) {
	for _, withDir := range []bool{false, true} {
		name := "memory"
		if withDir {
			name = "state-dir"
		}
		t.Run(name, func(t *testing.T) {
			const nparts = 2
			c := testcluster.Start(t, testcluster.Options{Partitions: nparts})
			w := newWriter(t, c, nparts)
			opts := Options{ReconnectBackoff: 20 * time.Millisecond}
			if withDir {
				opts.StateDir = t.TempDir()
			}
			v, _ := runView(t, c.Config, opts)
			ctx := testCtx(t)
			byPart := rolesInPartitions("role", nparts, 1)
			r, q := byPart[0][0], byPart[1][0]
			tp := w.txnProducer(string(r))
			for _, m := range []codec.MemberID{"a", "b", "c", "d"} {
				w.register(r, m)
				w.register(q, m)
			}
			w.lease(tp, r, mkLease("a", 0, time.Now(), time.Hour), true)
			caughtUp(t, v)
			changes := v.Watch(ctx)
			st, err := v.Role(ctx, r)
			require.NoError(t, err)
			require.NotNil(t, st.Lease)
			require.Len(t, st.Candidates, 4)

			recreateTopic(t, c, nparts)
			w.register(r, "z") // offset 0 of the new partition
			w.register(q, "y")

			got := changesUntil(t, changes, func(m map[codec.Role]Change) bool {
				cr, okr := m[r]
				cq, okq := m[q]
				return okr && okq && len(cr.After.Candidates) == 1 && len(cq.After.Candidates) == 1
			})
			assert.Nil(t, got[r].After.Lease, "the old lease is gone")
			assert.Equal(t, []codec.MemberID{"z"}, members(got[r].After.Candidates))
			assert.Equal(t, int64(0), got[r].After.Candidates[0].Offset)
			assert.Equal(t, []codec.MemberID{"y"}, members(got[q].After.Candidates))
			assert.NotNil(t, got[r].Before.Lease, "Before is the old state")

			caughtUp(t, v)
			snap, err := v.Snapshot(ctx)
			require.NoError(t, err)
			require.Len(t, snap, 2)
			for _, s := range snap {
				assert.Nil(t, s.Lease, s.Role)
				assert.Len(t, s.Candidates, 1, s.Role)
			}
			s := v.Stats()
			assert.Equal(t, int64(nparts), s.Rebuilds)
			for _, ps := range s.Partitions {
				assert.Equal(t, int64(1), ps.Next, "partition %d", ps.Partition)
			}

			// The view follows the new topic on.
			w.register(r, "x")
			caughtUp(t, v)
			cs, err := v.Candidates(ctx, r)
			require.NoError(t, err)
			assert.Equal(t, []codec.MemberID{"z", "x"}, members(cs))
		})
	}
}

// TestStateDirOfARecreatedTopicIsRebuilt: a view restarts on a state dir
// after the topic was recreated while no view ran (shorter than before).
// goka would start each partition's consumer at the new end and never
// read the new records below it; the view notices that the end is below
// what the state dir holds, clears the partition's state and reads it
// from its start.
func TestStateDirOfARecreatedTopicIsRebuilt(t *testing.T) {
	const nparts = 2
	c := testcluster.Start(t, testcluster.Options{Partitions: nparts})
	w := newWriter(t, c, nparts)
	dir := t.TempDir()
	byPart := rolesInPartitions("role", nparts, 1)
	r, q := byPart[0][0], byPart[1][0]
	for _, m := range []codec.MemberID{"a", "b", "c", "d"} {
		w.register(r, m)
		w.register(q, m)
	}
	v1, stop1 := runView(t, c.Config, Options{StateDir: dir})
	caughtUp(t, v1)
	stop1()

	recreateTopic(t, c, nparts)
	w.register(r, "z")
	w.register(r, "x")
	w.register(q, "y")

	v2, _ := runView(t, c.Config, Options{StateDir: dir, ReconnectBackoff: 20 * time.Millisecond})
	caughtUp(t, v2)
	snap, err := v2.Snapshot(testCtx(t))
	require.NoError(t, err)
	require.Len(t, snap, 2)
	byRole := map[codec.Role][]codec.MemberID{}
	for _, s := range snap {
		byRole[s.Role] = members(s.Candidates)
	}
	assert.Equal(t, map[codec.Role][]codec.MemberID{r: {"z", "x"}, q: {"y"}}, byRole)
	assert.Equal(t, int64(nparts), v2.Stats().Rebuilds)
}

// TestRestartedClusterWithoutDataIsRebuilt: the cluster stops and a new
// one, without the old data, starts on the same address (an in-memory
// `krole dev` restarted); the view reconnects, notices that the offsets
// went backwards, and shows the new records only.
func TestRestartedClusterWithoutDataIsRebuilt(t *testing.T) {
	if testcluster.External() {
		t.Skip("restarts the embedded cluster; KROLE_BROKERS names an outside cluster")
	}
	const nparts = 1
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := func(listen string) *devcluster.Cluster {
		t.Helper()
		for {
			fake, err := devcluster.Start(ctx, testcluster.DevOptions(t, devcluster.Options{Listen: listen}))
			if err == nil {
				return fake
			}
			select { // the old listener's port may take a moment to free
			case <-ctx.Done():
				require.NoError(t, err)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	fake := start("127.0.0.1:0")
	addr := fake.ListenAddrs()[0]
	c := &testcluster.Cluster{Config: fencing.Config{Brokers: []string{addr}, Topic: "krole-restart.roles", TxnPrefix: "krole-restart."}.WithDefaults(), Fake: fake}
	require.NoError(t, devcluster.CreateTopic(ctx, c.Config, nparts, 1))
	w := newWriter(t, c, nparts)
	for _, m := range []codec.MemberID{"a", "b", "c"} {
		w.register("r", m)
	}
	v, _ := runView(t, c.Config, Options{ReconnectBackoff: 20 * time.Millisecond})
	caughtUp(t, v)
	changes := v.Watch(testCtx(t), "r")

	fake.Close()
	fake = start(addr)
	defer fake.Close()
	require.NoError(t, devcluster.CreateTopic(ctx, c.Config, nparts, 1))
	w2 := newWriter(t, c, nparts)
	w2.register("r", "z")

	got := changesUntil(t, changes, func(m map[codec.Role]Change) bool {
		ch, ok := m["r"]
		return ok && len(ch.After.Candidates) == 1
	})
	assert.Equal(t, []codec.MemberID{"z"}, members(got["r"].After.Candidates))
	assert.Equal(t, []codec.MemberID{"a", "b", "c"}, members(got["r"].Before.Candidates))
	assert.Equal(t, int64(1), v.Stats().Rebuilds)
}

// TestRecreatedTopicWrittenPastTheViewIsRebuilt: the topic is recreated
// and the new partition is written past the view's next offset before the
// view's consumer fetches again (a member's heartbeats do that within a
// heartbeat interval), so the consumer itself never meets
// OFFSET_OUT_OF_RANGE. The health monitor's probe, made while the new
// partition was still short, finds it gone backwards; the view rebuilds
// it then, reading the records below its old offset, and is healthy
// again. Without the probe's word reaching the consumer, the partition
// stayed marked rewound for ever and the new log's first records were
// never read.
func TestRecreatedTopicWrittenPastTheViewIsRebuilt(t *testing.T) {
	c, fn := testcluster.StartFaulty(t, testcluster.Options{Partitions: 1})
	w := newWriter(t, c, 1)
	cfg := c.Config
	cfg.ClientID = "krole-past"
	v, _ := runView(t, cfg, Options{HealthInterval: 50 * time.Millisecond, ReconnectBackoff: 20 * time.Millisecond})
	ctx := testCtx(t)
	for _, m := range []codec.MemberID{"a", "b", "c"} {
		w.register("db", m)
	}
	caughtUp(t, v)
	time.Sleep(250 * time.Millisecond) // idle: the consumer's long poll waits at the broker

	// The consumer's next fetch is held; the monitor's ListOffsets are not.
	held := fn.Hold(faultnet.Rule{APIKey: int16(kmsg.Fetch), Node: faultnet.AnyNode, ClientID: "krole-past"})
	recreateTopic(t, c, 1)
	w.register("db", "z") // offset 0 of the new partition: below the view's 3
	require.Eventually(t, func() bool {
		return strings.Contains(v.Health().Reason, "went backwards")
	}, 20*time.Second, 10*time.Millisecond, "the monitor's probe finds the partition gone backwards")
	for _, m := range []codec.MemberID{"y", "x", "w", "u"} {
		w.register("db", m) // offsets 1 to 4: past the view's next offset
	}
	held.Release()

	require.Eventually(t, func() bool { return v.Health().Healthy }, 30*time.Second, 20*time.Millisecond,
		"the view rebuilt the partition and is healthy again: %+v", v.Health())
	caughtUp(t, v)
	cs, err := v.Candidates(ctx, "db")
	require.NoError(t, err)
	assert.Equal(t, []codec.MemberID{"z", "y", "x", "w", "u"}, members(cs), "the new log from its start")
	assert.Equal(t, int64(1), v.Stats().Rebuilds)
}

// TestLateProbeDoesNotRebuildAgain: a probe that read the partition's mark
// before a reset and reports after it (the catch-up loop, Health and
// Confirm probe concurrently) finds the partition rebuilt already: it
// counts no second rebuild, marks no second reset, and leaves no rewound
// mark that the rebuilt table's adoption would not clear.
func TestLateProbeDoesNotRebuildAgain(t *testing.T) {
	v, err := New(Options{Config: fencing.Config{Brokers: []string{"127.0.0.1:1"}}})
	require.NoError(t, err)
	v.setOffline(1)
	t.Cleanup(v.stop)
	e := &OffsetsWentBackwardsError{Topic: v.topic, Partition: 0, Offset: 4, End: 2}

	stale := v.progress.marks()[0].resets
	v.probedBackwards(e, stale)
	require.Equal(t, int64(1), v.Stats().Rebuilds)

	// goka takes the reset; a late probe reports between the glue's take
	// and the progress's count, then another after both.
	require.True(t, v.glue.takeReset(0))
	v.probedBackwards(e, stale)
	v.progress.reset(0)
	v.index.startRebuild(0)
	v.probedBackwards(e, stale)

	assert.Equal(t, int64(1), v.Stats().Rebuilds, "rebuilds counted")
	assert.False(t, v.glue.takeReset(0), "a second reset was marked")
	v.progress.rebuilt([]int32{0})
	assert.Nil(t, v.progress.rewoundOf(0), "the partition stays marked rewound after its rebuild")
}
