package processor_test

// Real network partitions of one member: a faultnet.Net sits between every client and each of three kfake brokers,
// the role's transaction coordinator and its partition's leader are
// different brokers, and every member talks to the cluster under a client
// id of its own ("krole-" + member, which its view's clients extend), so
// that faultnet.Net.Partition cuts off every connection of one member,
// both ways, present and future, while the member runs on. Requests sent
// meanwhile are delivered when the partition heals, even those whose
// connection the member closed (faultnet's default, DeliverOnClose), as a
// network that held them would. The observer view and the probe
// (Describe) use the default client id, "krole", and are never cut off.
//
// The timings are itSettings (lease 2s, renew every 400ms, local deadline
// 1.6s, stagger 200ms, transaction timeout 1s) with the default request
// timeout (10s), so a request the cut-off member sends is still in flight
// when the partition heals, and is delivered then.

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/faultnet"
	"github.com/krabka/krole/internal/testcluster"
	"github.com/krabka/krole/processor"
)

// clientIDOf is the client id of a member's transport and view in these
// tests, as election and krole run name them by default.
func clientIDOf(id codec.MemberID) string { return "krole-" + string(id) }

// newPartitionEnv is newEnv on three brokers with faultnet in front of
// them, with role's transaction coordinator and partition leader placed on
// different brokers.
func newPartitionEnv(t *testing.T, role codec.Role) (*env, *faultnet.Net) {
	t.Helper()
	c, fn := testcluster.StartFaulty(t, testcluster.Options{Nodes: 3})
	c.Config.TxnTimeout = itTxnTimeout
	coord := c.Fake.CoordinatorFor(c.Config.TransactionalID(string(role)))
	p := codec.Partition(role, 3) // testcluster's default partitions
	if c.Fake.LeaderFor(c.Config.Topic, p) == coord {
		require.NoError(t, c.Fake.MoveTopicPartition(c.Config.Topic, p, (coord+1)%3))
	}
	require.NotEqual(t, coord, c.Fake.LeaderFor(c.Config.Topic, p), "coordinator and partition leader differ")
	e := &env{t: t, c: c, rec: &recorder{}}
	e.probe = e.transport()
	e.obs = e.view()
	return e, fn
}

// startOwn is start with a transport and a view that use the member's own
// client id (clientIDOf).
func (e *env) startOwn(id codec.MemberID, roles []codec.Role, s processor.Settings, work processor.Work) *node {
	e.t.Helper()
	saved := e.c.Config
	e.c.Config.ClientID = clientIDOf(id)
	defer func() { e.c.Config = saved }()
	return e.start(id, roles, s, work)
}

// cut partitions member id off the cluster and returns the heal function;
// the partition heals at the end of the test at the latest.
func cut(t *testing.T, fn *faultnet.Net, id codec.MemberID) func() {
	t.Helper()
	heal := fn.Partition(clientIDOf(id))
	t.Cleanup(heal)
	return heal
}

// workLog records, for each term of each member, when its work started
// and when its context ended.
type workLog struct {
	mu    sync.Mutex
	stops map[codec.Token]time.Time // by the term's token
}

func (w *workLog) work(ctx context.Context, h processor.Held) error {
	<-ctx.Done()
	now := time.Now()
	w.mu.Lock()
	if w.stops == nil {
		w.stops = map[codec.Token]time.Time{}
	}
	w.stops[h.Token] = now
	w.mu.Unlock()
	return nil
}

func (w *workLog) stopped(tok codec.Token) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	at, ok := w.stops[tok]
	return at, ok
}

// afterRenewal waits until member has just renewed (a successful write
// ended within the last RenewInterval/4) and returns that write, so that a
// cut made now comes before its next renewal begins.
func afterRenewal(t *testing.T, e *env, role codec.Role, member codec.MemberID, s processor.Settings) write {
	t.Helper()
	var w write
	prev, _ := e.rec.lastWrite(role, member)
	await(t, 5*time.Second, member.String()+" renews", func() bool {
		var ok bool
		w, ok = e.rec.lastWrite(role, member)
		return ok && w.End.After(prev.End) && time.Since(w.End) < s.RenewInterval/4
	})
	return w
}

// watchDescribe samples Describe every 50ms until stop is closed and
// returns the distinct tokens seen, in order.
func watchDescribe(e *env, role codec.Role, stop <-chan struct{}) <-chan []codec.Token {
	out := make(chan []codec.Token, 1)
	go func() {
		var seen []codec.Token
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			tok, ok, err := e.probe.Describe(ctx, role)
			cancel()
			if err == nil && ok && (len(seen) == 0 || seen[len(seen)-1] != tok) {
				seen = append(seen, tok)
			}
			select {
			case <-stop:
				out <- seen
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	return out
}

// The holder is cut off by a network partition for three leases while it
// runs on, then the network heals.
//
//   - While cut off, node-a cannot renew: its work's context ends at its
//     local deadline (RenewDeadline after its last successful write
//     began; + slack) and it reports Revoked (lease lost, or token retired
//     when a renewal got no answer), never fenced: it hears nothing.
//   - node-b (rank 0; node-a, named in the lease, ranks last) takes over
//     once node-a's last renewal has been seen for a lease: within
//     LeaseDuration + Stagger (+ slack) of the cut, never before
//     LeaseDuration after node-a's last renewal began. It prunes node-a.
//   - When the network heals, node-a's view is stale: it last saw its own
//     lease, long expired. It confirms before it challenges, sees node-b's
//     renewals, and does not challenge: no token is minted for it, node-b
//     keeps the role under its token (Describe never moves again), node-b
//     and node-c stay registered, and node-a registers again, at the back.
//   - The epoch moved once, for the takeover: node-b's token is node-a's
//     epoch + 1 (the cut came right after a renewal, so node-a had no
//     transaction open for the coordinator to abort on a timeout, which
//     would bump it too). Requests node-a abandoned while cut off are
//     delivered at the heal and bump nothing.
//   - The broker's fence held throughout (checkFence).
func TestIntegrationPartitionedHolderDoesNotFenceItsSuccessor(t *testing.T) {
	role := codec.Role("partitioned-holder") // node-b's split score is higher than node-c's
	require.Equal(t, topScore(role, "node-b", "node-c"), codec.MemberID("node-b"))
	e, fn := newPartitionEnv(t, role)
	s := itSettings()
	var wl workLog
	a := e.startOwn("node-a", []codec.Role{role}, s, wl.work)
	holder, tokA := e.soleHolder(role, 10*time.Second)
	require.Equal(t, a.id, holder)
	b := e.startOwn("node-b", []codec.Role{role}, s, wl.work)
	e.awaitCandidate(role, b.id)
	c := e.startOwn("node-c", []codec.Role{role}, s, wl.work)
	await(t, 5*time.Second, "node-c is a candidate", func() bool { return slices.Contains(e.candidates(role), c.id) })
	await(t, 5*time.Second, "node-a's view shows all three candidates", func() bool {
		st, err := a.src.Role(e.ctx(5*time.Second), role)
		require.NoError(t, err)
		return len(st.Candidates) == 3
	})

	stopDescribe := make(chan struct{})
	described := watchDescribe(e, role, stopDescribe)
	last := afterRenewal(t, e, role, a.id, s)
	heal := cut(t, fn, a.id)
	cutAt := time.Now()
	// A renewal begins RenewInterval after the last began: if the cut
	// came later than that, node-a may have had a transaction open.
	quiet := cutAt.Before(last.Start.Add(s.RenewInterval))

	// node-b takes over within the liveness bound.
	el := awaitElected(t, e.rec, role, b.id, cutAt, s.LeaseDuration+s.Stagger+slack)
	tokB := el.Token
	t.Logf("cut %v after node-a's last renewal began; node-b elected %v after the cut",
		cutAt.Sub(last.Start).Round(time.Millisecond), el.Got.Sub(cutAt).Round(time.Millisecond))
	assert.GreaterOrEqual(t, el.At.Sub(last.Start), s.LeaseDuration,
		"node-b challenged before a lease had passed since node-a's last renewal began")

	// node-a stepped down on its own, while cut off.
	var rev stamped
	await(t, s.RenewDeadline+slack, "node-a revoked while cut off", func() bool {
		evs := e.rec.find(processor.Revoked, role, func(ev stamped) bool { return ev.Member == a.id })
		if len(evs) == 0 {
			return false
		}
		rev = evs[0]
		return true
	})
	assert.Contains(t, []processor.Reason{processor.ReasonLeaseLost, processor.ReasonTokenRetired}, rev.Reason,
		"node-a, cut off, stops on its own (%v)", rev.Err)
	assert.Equal(t, tokA, rev.Token)
	assert.LessOrEqual(t, rev.Got.Sub(last.Start), s.RenewDeadline+slack, "node-a reported Revoked after its local deadline")
	stop, ok := wl.stopped(tokA)
	require.True(t, ok, "node-a's work stopped")
	t.Logf("node-a's work stopped %v after its last renewal began (local deadline %v), %v before node-b's election; revoked: %s",
		stop.Sub(last.Start).Round(time.Millisecond), s.RenewDeadline, el.Got.Sub(stop).Round(time.Millisecond), rev.Reason)
	assert.LessOrEqual(t, stop.Sub(last.Start), s.RenewDeadline+slack, "node-a's work ran past its local deadline")
	assert.Equal(t, tokB, e.describe(role), "the coordinator names node-b's token")
	await(t, 5*time.Second, "node-b pruned node-a", func() bool {
		return slices.Equal(e.candidates(role), []codec.MemberID{"node-b", "node-c"})
	})

	// The partition lasts three leases from the cut; then it heals.
	time.Sleep(time.Until(cutAt.Add(3 * s.LeaseDuration)))
	require.Empty(t, e.rec.find(processor.Elected, role, func(ev stamped) bool { return ev.Member != b.id && ev.Got.After(cutAt) }),
		"only node-b was elected while node-a was cut off")
	heal()
	healed := time.Now()

	// For three leases after the heal (node-a's stale view showed its own
	// lease expired long ago, and the requests it abandoned reach the
	// brokers now), nothing may change hands. Meanwhile node-b and node-c
	// stay candidates, and node-a comes back behind them.
	for time.Since(healed) < 3*s.LeaseDuration {
		if cands := e.candidates(role); !slices.Contains(cands, b.id) || !slices.Contains(cands, c.id) {
			t.Errorf("%v after the heal, the candidates are %v: node-b or node-c was pruned", time.Since(healed).Round(time.Millisecond), cands)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Until(healed.Add(3 * s.LeaseDuration)))
	close(stopDescribe)
	tokens := <-described

	assert.Empty(t, e.rec.find(processor.Elected, role, func(ev stamped) bool { return ev.Member == a.id && ev.Got.After(cutAt) }),
		"node-a challenged after the heal")
	assert.Empty(t, e.rec.find(processor.Revoked, role, func(ev stamped) bool { return ev.Member == b.id }),
		"node-b lost the role")
	assert.Equal(t, map[codec.MemberID]codec.Token{b.id: tokB}, e.rec.holders(role))
	assert.Equal(t, []codec.Token{tokA, tokB}, tokens, "the tokens Describe named from before the cut to three leases after the heal")
	e.rec.mu.Lock()
	var minted []codec.Token
	for _, ac := range e.rec.acquires {
		minted = append(minted, ac.Token)
	}
	e.rec.mu.Unlock()
	assert.Equal(t, []codec.Token{tokA, tokB}, minted, "the tokens minted for a member")
	assert.Equal(t, tokA.ProducerID, tokB.ProducerID)
	if quiet {
		assert.Equal(t, tokA.Epoch+1, tokB.Epoch, "the epoch moved once, for the takeover")
	} else {
		// node-a may have had a renewal's transaction open at the
		// coordinator, which aborts it on its timeout with a bump.
		t.Logf("the cut came %v after node-a's last renewal began: epochs %d -> %d", cutAt.Sub(last.Start), tokA.Epoch, tokB.Epoch)
		assert.LessOrEqual(t, tokB.Epoch, tokA.Epoch+2)
	}
	await(t, 5*time.Second, "node-a registered again, at the back", func() bool {
		return slices.Equal(e.candidates(role), []codec.MemberID{"node-b", "node-c", "node-a"})
	})
	e.agree(role, b.id, tokB)
	e.rec.checkFence(t)
}

// A holder cut off for less than its renewal's timeout (so less than
// RenewDeadline) keeps its role: the renewal that falls due during the cut
// is held by the network and answered when it heals, in time. Three such
// cuts cause no handover: nobody is revoked or elected, no token is
// minted, Describe keeps node-a's token, and the candidates stay as they
// were.
//
// The cut comes right after a renewal (so the next one falls due within
// RenewInterval of it) and lasts RenewInterval + 200ms: the held renewal
// waits at most that long, within its timeout, min(TransactionTimeout,
// RenewDeadline - RenewInterval) = 1s, with 400ms to spare.
func TestIntegrationShortPartitionCausesNoHandover(t *testing.T) {
	role := codec.Role("blip")
	e, fn := newPartitionEnv(t, role)
	s := itSettings()
	a := e.startOwn("node-a", []codec.Role{role}, s, nil)
	holder, tokA := e.soleHolder(role, 10*time.Second)
	require.Equal(t, a.id, holder)
	b := e.startOwn("node-b", []codec.Role{role}, s, nil)
	e.awaitCandidate(role, b.id)
	c := e.startOwn("node-c", []codec.Role{role}, s, nil)
	await(t, 5*time.Second, "node-c is a candidate", func() bool { return slices.Contains(e.candidates(role), c.id) })
	want := []codec.MemberID{"node-a", "node-b", "node-c"}
	require.Equal(t, want, e.candidates(role))

	blip := s.RenewInterval + 200*time.Millisecond
	for i := range 3 {
		afterRenewal(t, e, role, a.id, s)
		heal := cut(t, fn, a.id)
		time.Sleep(blip)
		heal()
		healed := time.Now()
		// The round that fell due during the cut was held, and
		// succeeded after the heal: it was in flight across it.
		afterRenewal(t, e, role, a.id, s)
		e.rec.mu.Lock()
		// (The round's DescribeTransactions was held by the cut; its
		// heartbeat went once it was answered, at the heal.)
		held := slices.ContainsFunc(e.rec.beats, func(b beat) bool {
			return b.hb.Member == a.id && !b.hb.End && b.end.After(healed) && b.start.Before(healed.Add(s.RenewInterval/2))
		})
		e.rec.mu.Unlock()
		assert.True(t, held, "cut %d: the round that fell due during the cut committed its heartbeat at the heal", i)
	}
	// A lease more, for any late effect to show.
	time.Sleep(s.LeaseDuration)
	assert.Empty(t, e.rec.find(processor.Revoked, role, nil), "node-a lost the role")
	assert.Len(t, e.rec.find(processor.Elected, role, nil), 1, "only node-a's first election")
	assert.Equal(t, map[codec.MemberID]codec.Token{a.id: tokA}, e.rec.holders(role))
	assert.Equal(t, tokA, e.describe(role))
	e.rec.mu.Lock()
	assert.Len(t, e.rec.acquires, 1, "no token minted after node-a's")
	e.rec.mu.Unlock()
	assert.Equal(t, want, e.candidates(role))
	e.agree(role, a.id, tokA)
	e.rec.checkFence(t)
}

// A candidate cut off for three leases sees, on its clock, the holder's
// last lease it read expire, and its turn come (it is rank 0). It confirms
// before it challenges: the confirmation cannot reach the partition's
// leader while it is cut off, and once the network heals it shows the
// holder's renewals. It never challenges: the holder keeps the role under
// its token, no token is minted, and nobody is pruned. The requests it
// sent while cut off are delivered at the heal and change nothing.
func TestIntegrationPartitionedCandidateDoesNotFenceTheHolder(t *testing.T) {
	role := codec.Role("isolated")
	e, fn := newPartitionEnv(t, role)
	s := itSettings()
	a := e.startOwn("node-a", []codec.Role{role}, s, nil)
	holder, tokA := e.soleHolder(role, 10*time.Second)
	require.Equal(t, a.id, holder)
	b := e.startOwn("node-b", []codec.Role{role}, s, nil)
	e.awaitCandidate(role, b.id)
	c := e.startOwn("node-c", []codec.Role{role}, s, nil)
	await(t, 5*time.Second, "node-c is a candidate", func() bool { return slices.Contains(e.candidates(role), c.id) })
	await(t, 5*time.Second, "node-b's view shows all three candidates", func() bool {
		st, err := b.src.Role(e.ctx(5*time.Second), role)
		require.NoError(t, err)
		return len(st.Candidates) == 3
	})
	want := []codec.MemberID{"node-a", "node-b", "node-c"}

	stopDescribe := make(chan struct{})
	described := watchDescribe(e, role, stopDescribe)
	heal := cut(t, fn, b.id)
	time.Sleep(3 * s.LeaseDuration)
	heal()
	healed := time.Now()
	for time.Since(healed) < 3*s.LeaseDuration {
		if cands := e.candidates(role); !slices.Equal(want, cands) {
			t.Errorf("%v after the heal, the candidates are %v, not %v", time.Since(healed).Round(time.Millisecond), cands, want)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Until(healed.Add(3 * s.LeaseDuration)))
	close(stopDescribe)

	assert.Equal(t, []codec.Token{tokA}, <-described, "the tokens Describe named")
	assert.Empty(t, e.rec.find(processor.Revoked, role, nil), "node-a lost the role")
	assert.Len(t, e.rec.find(processor.Elected, role, nil), 1, "only node-a's first election")
	assert.Equal(t, map[codec.MemberID]codec.Token{a.id: tokA}, e.rec.holders(role))
	e.rec.mu.Lock()
	assert.Len(t, e.rec.acquires, 1, "no token minted after node-a's")
	e.rec.mu.Unlock()
	e.agree(role, a.id, tokA)
	e.rec.checkFence(t)
}
