package cli

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/testcluster"
	"github.com/krabka/krole/rolestate"
)

// TestRunPartitionedHolder runs `krole run` processes on three brokers
// with faultnet in front of them (the role's transaction coordinator and
// partition leader on different brokers), and cuts the holder's process
// off the network for three leases while it runs on (faultnet.Partition
// on its client id, "krole-" + its member, which krole run sends by
// default), then heals the network. What must hold (the faults issue,
// section 4):
//
//   - while cut off, node-a stops its CMD on its own at its local
//     deadline (HeartbeatDeadline, 4/5 of the lease, after its last committed
//     renewal began), before node-b starts its CMD, and says why (lease
//     lost, or token retired when a renewal got no answer), never
//     "fenced": it hears nothing; no two CMDs are ever alive at once;
//   - node-b takes over within lease + stagger (+ slack) of the cut;
//   - after the heal node-a, whose view last showed its own lease, does
//     not challenge: Describe names node-b's token from the takeover to
//     three leases after the heal, node-b's CMD keeps running (its pid
//     alive, no other CMD started), node-a starts no CMD, and node-a
//     registers again behind node-b.
//
// Requests node-a sent while cut off are delivered when the network heals
// (faultnet's DeliverOnClose), as the report had it.
func TestRunPartitionedHolder(t *testing.T) {
	t.Parallel()
	const role = "cutoff"
	bin := processTest(t, "checks processes through /proc")
	c, fn := testcluster.StartFaulty(t, testcluster.Options{Nodes: 3})
	coord := c.Fake.CoordinatorFor(c.Config.TransactionalID(role))
	p := codec.Partition(role, 3) // testcluster's default partitions
	if c.Fake.LeaderFor(c.Config.Topic, p) == coord {
		require.NoError(t, c.Fake.MoveTopicPartition(c.Config.Topic, p, (coord+1)%3))
	}
	require.NotEqual(t, coord, c.Fake.LeaderFor(c.Config.Topic, p), "coordinator and partition leader differ")

	probe, err := fencing.NewBrokerTransport(c.Config) // client id "krole": never cut off
	require.NoError(t, err)
	t.Cleanup(func() { _ = probe.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	records := func() []fencing.RoleRecord {
		recs, err := probe.ReadRoleRecords(ctx, role)
		require.NoError(t, err)
		return recs
	}
	candidates := func() []codec.MemberID {
		var out []codec.MemberID
		for _, cd := range rolestate.Fold(role, records()).Candidates {
			out = append(out, cd.Member)
		}
		return out
	}

	out := filepath.Join(t.TempDir(), "cmds")
	smp := startSampler(t, out)
	start := func(member string) *kroleProc {
		t.Helper()
		pr := startKrole(t, bin, c, role, member, out)
		require.Eventually(t, func() bool { return slices.Contains(candidates(), codec.MemberID(member)) },
			20*time.Second, 20*time.Millisecond, "%s never registered; stderr:\n%s", member, pr.stderr())
		return pr
	}
	a := start("node-a")
	a.waitLine(t, 0, startedRE, 20*time.Second)
	b := start("node-b")
	cmdA := waitCmds(t, out, 1)[0]
	require.Equal(t, "node-a", cmdA.member)

	// node-a's renewals are its member session's heartbeats.
	beats := func() []fencing.RoleRecord {
		recs, err := probe.ReadSession(ctx, "node-a")
		require.NoError(t, err)
		return recs
	}
	// Cut node-a off right after a renewal of its shows in the log.
	first := beats()
	require.Eventually(t, func() bool {
		b := beats()
		return len(b) > 0 && len(first) > 0 && b[len(b)-1].Offset > first[len(first)-1].Offset
	}, 5*time.Second, 2*time.Millisecond, "node-a renews")
	marksA, marksB := a.count(), b.count()
	heal := fn.Partition("krole-node-a")
	t.Cleanup(heal)
	cutAt := time.Now()

	// node-a's CMD dies while node-a is cut off; watch for it.
	var deadMu sync.Mutex
	var deadAt time.Time
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		for time.Since(cutAt) < 3*testLease {
			if !processAlive(cmdA.pid) {
				deadMu.Lock()
				deadAt = time.Now()
				deadMu.Unlock()
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()

	_, startedB := b.waitLine(t, marksB, startedRE, testLease+testStagger+schedulingSlack+5*time.Second)
	t.Logf("node-b started its CMD %v after the cut", startedB.at.Sub(cutAt).Round(time.Millisecond))
	assert.LessOrEqual(t, startedB.at.Sub(cutAt), testLease+testStagger+schedulingSlack,
		"node-b takes over within lease + stagger (%v) plus %v of scheduling slack", testLease+testStagger, schedulingSlack)
	<-watchDone
	deadMu.Lock()
	died := deadAt
	deadMu.Unlock()
	require.False(t, died.IsZero(), "node-a's CMD (pid %d) still runs %v after the cut", cmdA.pid, 3*testLease)
	assert.True(t, died.Before(startedB.at), "node-a's CMD died at %s, after node-b started its own at %s",
		died.Format("15:04:05.000"), startedB.at.Format("15:04:05.000"))
	_, stopLine := a.waitLine(t, marksA, regexp.MustCompile(fmt.Sprintf(`^krole run: stopping CMD \(pid %d\)`, cmdA.pid)), time.Second)
	_, revLine := a.waitLine(t, marksA, regexp.MustCompile(`^krole run: revoked cutoff \(token \d+/\d+\): `), time.Second)
	assert.Regexp(t, `: (lease lost: |.*, so the token is retired: )`, revLine.text, "node-a, cut off, stops on its own")

	// node-a's local deadline: HeartbeatDeadline (4/5 of the lease) after its
	// last committed renewal began (same machine, same clock). CMD is
	// SIGTERMed then; the kill timeout's default (lease - HeartbeatDeadline)
	// is its grace, and one second is for scheduling and this test's poll.
	recs := records()
	lastA := lastLeaseOf(recs, "node-a", false)
	require.NotNil(t, lastA)
	renewed := lastA.lease.GrantedAt
	for _, b := range beats() {
		if hb := b.Record.Heartbeat; !hb.End && hb.GrantedAt > renewed {
			renewed = hb.GrantedAt
		}
	}
	deadline := time.UnixMilli(renewed).Add(testLease * 4 / 5)
	t.Logf("node-a: local deadline %v after the cut; said stopping CMD %v, CMD dead %v after it",
		deadline.Sub(cutAt).Round(time.Millisecond), stopLine.at.Sub(deadline).Round(time.Millisecond), died.Sub(deadline).Round(time.Millisecond))
	assert.LessOrEqual(t, died.Sub(deadline), testLease/5+time.Second, "node-a's CMD outlived its local deadline")
	nextB := firstLeaseAfter(recs, lastA)
	require.NotNil(t, nextB)
	require.Equal(t, codec.MemberID("node-b"), nextB.lease.Member)
	tokB := nextB.lease.Token
	cmds := waitCmds(t, out, 2)
	cmdB := cmds[1]
	require.Equal(t, "node-b", cmdB.member)
	require.Equal(t, int(tokB.Epoch), cmdB.epoch)
	cur, ok, err := probe.Describe(ctx, role)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, tokB, cur, "Describe names node-b's token")

	// Three leases from the cut, the network heals; for three leases
	// more nothing changes hands.
	time.Sleep(time.Until(cutAt.Add(3 * testLease)))
	heal()
	healed := time.Now()
	for time.Since(healed) < 3*testLease {
		cur, ok, err := probe.Describe(ctx, role)
		require.NoError(t, err)
		require.True(t, ok)
		assert.Equal(t, tokB, cur, "%v after the heal, Describe names another token than node-b's", time.Since(healed).Round(time.Millisecond))
		assert.True(t, processAlive(cmdB.pid), "node-b's CMD (pid %d) stopped %v after the heal", cmdB.pid, time.Since(healed).Round(time.Millisecond))
		if t.Failed() {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	assert.Len(t, readCmds(t, out), 2, "a CMD started after node-b's")
	_, _, electedA := a.find(marksA, regexp.MustCompile(`^krole run: elected `))
	assert.False(t, electedA, "node-a was elected again")
	require.Eventually(t, func() bool {
		return slices.Equal(candidates(), []codec.MemberID{"node-b", "node-a"})
	}, 5*time.Second, 20*time.Millisecond, "node-a registers again, behind node-b")
	select {
	case <-a.exited:
		t.Errorf("node-a's krole run exited: %v", a.state)
	default:
	}

	for _, pr := range []*kroleProc{a, b} {
		require.NoError(t, pr.cmd.Process.Signal(syscall.SIGTERM))
	}
	for _, pr := range []*kroleProc{a, b} {
		<-pr.exited
		assert.Equal(t, 0, pr.state.ExitCode(), "%s: stderr:\n%s", pr.member, pr.stderr())
	}
	smp.stop()
	samples, overlaps := smp.result()
	assert.Empty(t, overlaps, "two CMDs were alive at once")
	assert.Positive(t, samples, "the sampler ran")
}
