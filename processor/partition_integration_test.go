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
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/processor"
)

// threeOwn starts node-a, which takes role, then node-b and node-c, its
// candidates (node-b first), each under its own client id and with work,
// and returns them with node-a's token.
func threeOwn(e *env, role codec.Role, s processor.Settings, work processor.Work) (a, b, c *node, tok codec.Token) {
	e.t.Helper()
	a, b, tok = e.holderAndCandidate(role, s, ownClientID(), working(work))
	c = e.candidate("node-c", role, s, work, ownClientID())
	return a, b, c, tok
}

// assertKept asserts that holder kept role under tok from its first
// election on: nobody was revoked or elected again, no other token was
// minted, the table agrees, and the broker's fence held.
func assertKept(t *testing.T, e *env, role codec.Role, holder *node, tok codec.Token) {
	t.Helper()
	assert.Empty(t, e.rec.find(processor.Revoked, role, nil), "%s lost the role", holder.id)
	assert.Len(t, e.rec.find(processor.Elected, role, nil), 1, "only %s's first election", holder.id)
	assert.Equal(t, map[codec.MemberID]codec.Token{holder.id: tok}, e.rec.holders(role))
	e.rec.mu.Lock()
	assert.Len(t, e.rec.acquires, 1, "no token minted after %s's", holder.id)
	e.rec.mu.Unlock()
	e.agree(role, holder.id, tok)
	e.rec.checkFence(t)
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
//     local deadline (HeartbeatDeadline after its last successful write
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
	e := newPartitionEnv(t, role)
	s := itSettings()
	var wl workLog
	a, b, c, tokA := threeOwn(e, role, s, wl.work)
	e.awaitSeenBy(a, []codec.Role{role}, 5*time.Second, a.id, b.id, c.id)

	stopDescribe := make(chan struct{})
	described := watchDescribe(e, role, stopDescribe)
	last := afterRenewal(t, e, role, a.id, s)
	heal := cut(t, e.fn, a.id)
	cutAt := time.Now()
	// A renewal begins HeartbeatInterval after the last began: if the cut
	// came later than that, node-a may have had a transaction open.
	quiet := cutAt.Before(last.Start.Add(s.HeartbeatInterval))

	// node-b takes over within the liveness bound.
	el := awaitElected(t, e.rec, role, b.id, cutAt, s.LeaseDuration+s.Stagger+slack)
	tokB := el.Token
	t.Logf("cut %v after node-a's last renewal began; node-b elected %v after the cut",
		cutAt.Sub(last.Start).Round(time.Millisecond), el.Got.Sub(cutAt).Round(time.Millisecond))
	assert.GreaterOrEqual(t, el.At.Sub(last.Start), s.LeaseDuration,
		"node-b challenged before a lease had passed since node-a's last renewal began")

	// node-a stepped down on its own, while cut off.
	rev := awaitRevoked(t, e.rec, role, a.id, s.HeartbeatDeadline+slack, "node-a revoked while cut off")
	assert.Contains(t, []processor.Reason{processor.ReasonLeaseLost, processor.ReasonTokenRetired}, rev.Reason,
		"node-a, cut off, stops on its own (%v)", rev.Err)
	assert.Equal(t, tokA, rev.Token)
	assert.LessOrEqual(t, rev.Got.Sub(last.Start), s.HeartbeatDeadline+slack, "node-a reported Revoked after its local deadline")
	stop, ok := wl.stopped(tokA)
	require.True(t, ok, "node-a's work stopped")
	t.Logf("node-a's work stopped %v after its last renewal began (local deadline %v), %v before node-b's election; revoked: %s",
		stop.Sub(last.Start).Round(time.Millisecond), s.HeartbeatDeadline, el.Got.Sub(stop).Round(time.Millisecond), rev.Reason)
	assert.LessOrEqual(t, stop.Sub(last.Start), s.HeartbeatDeadline+slack, "node-a's work ran past its local deadline")
	assert.Equal(t, tokB, e.describe(role), "the coordinator names node-b's token")
	await(t, 5*time.Second, "node-b pruned node-a", func() bool {
		return slices.Equal(e.candidates(role), []codec.MemberID{"node-b", "node-c"})
	})

	// The partition lasts three leases from the cut (on purpose: a member
	// cut off for that long must still not fence its successor); then it heals.
	time.Sleep(time.Until(cutAt.Add(3 * s.LeaseDuration)))
	require.Empty(t, e.rec.find(processor.Elected, role, func(ev stamped) bool { return ev.Member != b.id && ev.Got.After(cutAt) }),
		"only node-b was elected while node-a was cut off")
	heal()
	healed := time.Now()

	// For three leases after the heal (node-a's stale view showed its own
	// lease expired long ago, and the requests it abandoned reach the
	// brokers now), nothing may change hands. Meanwhile node-b and node-c
	// stay candidates, and node-a comes back behind them.
	throughout(t, healed.Add(3*s.LeaseDuration), "node-b or node-c was pruned after the heal", func() (bool, string) {
		cands := e.candidates(role)
		return slices.Contains(cands, b.id) && slices.Contains(cands, c.id), fmt.Sprintf("%v after the heal, the candidates are %v", time.Since(healed).Round(time.Millisecond), cands)
	})
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
// HeartbeatDeadline) keeps its role: the renewal that falls due during the cut
// is held by the network and answered when it heals, in time. Three such
// cuts cause no handover: nobody is revoked or elected, no token is
// minted, Describe keeps node-a's token, and the candidates stay as they
// were.
//
// The cut comes right after a renewal (so the next one falls due within
// HeartbeatInterval of it) and lasts HeartbeatInterval + 200ms: the held renewal
// waits at most that long, within its timeout, min(TransactionTimeout,
// HeartbeatDeadline - HeartbeatInterval) = 1s, with 400ms to spare.
func TestIntegrationShortPartitionCausesNoHandover(t *testing.T) {
	role := codec.Role("blip")
	e := newPartitionEnv(t, role)
	s := itSettings()
	a, _, _, tokA := threeOwn(e, role, s, nil)
	want := []codec.MemberID{"node-a", "node-b", "node-c"}
	require.Equal(t, want, e.candidates(role))

	blip := s.HeartbeatInterval + 200*time.Millisecond
	for i := range 3 {
		afterRenewal(t, e, role, a.id, s)
		heal := cut(t, e.fn, a.id)
		time.Sleep(blip) // the cut's length, on purpose
		heal()
		healed := time.Now()
		// The round that fell due during the cut was held, and
		// succeeded after the heal: it was in flight across it.
		afterRenewal(t, e, role, a.id, s)
		e.rec.mu.Lock()
		// (The round's DescribeTransactions was held by the cut; its
		// heartbeat went once it was answered, at the heal.)
		held := slices.ContainsFunc(e.rec.beats, func(b beat) bool {
			return b.hb.Member == a.id && !b.hb.End && b.end.After(healed) && b.start.Before(healed.Add(s.HeartbeatInterval/2))
		})
		e.rec.mu.Unlock()
		assert.True(t, held, "cut %d: the round that fell due during the cut committed its heartbeat at the heal", i)
	}
	// A lease more, on purpose: any late effect of the cuts shows within it.
	time.Sleep(s.LeaseDuration)
	assert.Equal(t, tokA, e.describe(role))
	assert.Equal(t, want, e.candidates(role))
	assertKept(t, e, role, a, tokA)
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
	e := newPartitionEnv(t, role)
	s := itSettings()
	a, b, c, tokA := threeOwn(e, role, s, nil)
	e.awaitSeenBy(b, []codec.Role{role}, 5*time.Second, a.id, b.id, c.id)
	want := []codec.MemberID{"node-a", "node-b", "node-c"}

	stopDescribe := make(chan struct{})
	described := watchDescribe(e, role, stopDescribe)
	heal := cut(t, e.fn, b.id)
	time.Sleep(3 * s.LeaseDuration) // the cut's length, on purpose: node-b's turn comes on its clock
	heal()
	healed := time.Now()
	throughout(t, healed.Add(3*s.LeaseDuration), "the candidates changed after the heal", func() (bool, string) {
		cands := e.candidates(role)
		return slices.Equal(want, cands), fmt.Sprintf("%v after the heal, the candidates are %v, not %v", time.Since(healed).Round(time.Millisecond), cands, want)
	})
	close(stopDescribe)

	assert.Equal(t, []codec.Token{tokA}, <-described, "the tokens Describe named")
	assertKept(t, e, role, a, tokA)
}
