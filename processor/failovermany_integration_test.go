package processor_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/faultnet"
	"github.com/krabka/krole/processor"
)

// A member that dies holding many roles leaves them all vacant at once,
// and its survivors split them: each role goes to the candidate of the
// highest split score. Here node-b takes its share slowly (each
// AcquireEpoch 400 ms late, five at a time) and node-c quickly; node-c,
// whose turn on node-b's roles comes a Stagger after the vacancy,
// defers to node-b while node-b's member session heartbeats and it takes
// roles, instead of racing it for the ones it has not reached yet.
func TestIntegrationFailoverOfManyRolesIsSplitBySuccessor(t *testing.T) {
	e := newEnv(t, itTxnTimeout)
	s := itSettings()
	roles := roleNames("many-%02d", 20)
	dying := s
	dying.KeepOnExit = true // it writes nothing when it stops: a crash
	a := e.start("node-a", roles, dying, nil)
	for _, r := range roles {
		awaitElected(t, e.rec, r, a.id, time.Time{}, 10*time.Second)
	}
	// node-c starts once node-b is a candidate of every role, so that
	// the two rank in this order however the two starts are scheduled.
	b := e.start("node-b", roles, s, nil, slowAcquire(400*time.Millisecond))
	for _, r := range roles {
		await(t, 10*time.Second, "b is a candidate of "+string(r), func() bool {
			cs := e.candidates(r)
			return len(cs) == 2 && cs[1] == b.id
		})
	}
	c := e.start("node-c", roles, s, nil)
	for _, r := range roles {
		await(t, 10*time.Second, "b and c are candidates of "+string(r), func() bool {
			cs := e.candidates(r)
			return len(cs) == 3 && cs[1] == b.id && cs[2] == c.id
		})
	}

	crashed := time.Now()
	a.stop(t)()
	want := map[codec.Role]codec.MemberID{}
	shares := map[codec.MemberID]int{}
	for _, r := range roles {
		want[r] = topScore(r, b.id, c.id)
		shares[want[r]]++
	}
	require.Len(t, shares, 2, "the roles' names give each survivor a share: %v", shares)
	for _, r := range roles {
		awaitElected(t, e.rec, r, want[r], crashed, 3*s.LeaseDuration+slack)
	}
	for _, r := range roles {
		after := e.rec.find(processor.Elected, r, func(ev stamped) bool { return ev.Got.After(crashed) })
		if assert.Len(t, after, 1, "%s elected once after the crash", r) {
			assert.Equal(t, want[r], after[0].Member, "%s taken by its successor", r)
		}
	}
	e.rec.checkFence(t)
}

// twiceAsLong is s with every duration doubled but the transaction
// timeout: a survivor defers to another for at most a lease after that
// one's last win, and a longer lease outlasts the stalls a loaded machine
// (the race detector on two cores) puts between two wins.
func twiceAsLong(s processor.Settings) processor.Settings {
	s.LeaseDuration *= 2
	s.HeartbeatInterval *= 2
	s.HeartbeatDeadline *= 2
	s.RetryBackoff *= 2
	s.Stagger *= 2
	return s
}

// A member's first heartbeat round comes with its first holding, not at
// its start, where its transaction would contend with the first challenge
// at the coordinator and slow the first acquisition. The lease the
// election writes keeps the role alive until the round vouches for it.
func TestIntegrationFirstHeartbeatFollowsTheFirstElection(t *testing.T) {
	e := newEnv(t, itTxnTimeout)
	role := codec.Role("first-beat")
	s := processor.Settings{LeaseDuration: 10 * time.Second} // a round every 2s: the election comes first
	a := e.start("node-a", []codec.Role{role}, s, nil)
	awaitElected(t, e.rec, role, a.id, time.Time{}, 10*time.Second)
	await(t, 5*time.Second, "a heartbeat of node-a", func() bool { _, ok := e.rec.lastBeat(a.id); return ok })
	e.rec.mu.Lock()
	defer e.rec.mu.Unlock()
	var firstBeat time.Time
	for _, b := range e.rec.beats {
		if b.hb.Member == a.id && (firstBeat.IsZero() || b.start.Before(firstBeat)) {
			firstBeat = b.start
		}
	}
	var leaseWritten time.Time
	for _, w := range e.rec.writes {
		if w.Role == role && w.Member == a.id {
			leaseWritten = w.End
			break
		}
	}
	require.False(t, leaseWritten.IsZero(), "the election's lease write")
	assert.False(t, firstBeat.Before(leaseWritten), "the first heartbeat began %v before the election's lease was written", leaseWritten.Sub(firstBeat))
}

// A member that dies holding many roles leaves them all vacant at once.
// Its survivors split them by split score, and each takes its share one
// role after another, more slowly than a lease in all (each AcquireEpoch
// 600 ms late, five at a time, 40 roles a survivor); a survivor whose
// turn on another's share comes defers while that one makes progress,
// instead of racing it. Read back from the role topic by another client:
// every role is elected exactly once, by its successor, no survivor
// loses a role of its own, and no two members hold a role at once.
func TestIntegrationMassFailoverElectsEachRoleOnce(t *testing.T) {
	for _, survivors := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d survivors", survivors), func(t *testing.T) {
			massFailover(t, 40*survivors, survivors)
		})
	}
}

func massFailover(t *testing.T, k, survivors int) {
	e := newEnv(t, itTxnTimeout)
	s := twiceAsLong(itSettings())
	roles := roleNames("mass-%03d", k)
	dying := s
	dying.KeepOnExit = true // it writes nothing when it stops: a crash
	a := e.start("node-a", roles, dying, nil)
	for _, r := range roles {
		awaitElected(t, e.rec, r, a.id, time.Time{}, 20*time.Second)
	}
	var nodes []*node
	for i := range survivors {
		id := codec.MemberID(fmt.Sprintf("node-%c", 'b'+i))
		own := codec.Role("own-" + string(id))
		n := e.start(id, append([]codec.Role{own}, roles...), s, nil, slowAcquire(600*time.Millisecond))
		awaitElected(t, e.rec, own, n.id, time.Time{}, 10*time.Second)
		nodes = append(nodes, n)
	}
	for _, r := range roles {
		await(t, 10*time.Second, "every survivor a candidate of "+string(r), func() bool { return len(e.candidates(r)) == survivors+1 })
	}
	aLast := map[codec.Role]int64{}
	for _, r := range roles {
		aLast[r] = e.state(r).LeaseOffset
	}

	crashed := time.Now()
	a.stop(t)()
	for _, r := range roles {
		await(t, 30*time.Second, string(r)+" elected after the crash", func() bool {
			return len(e.rec.find(processor.Elected, r, func(ev stamped) bool { return ev.Got.After(crashed) })) > 0
		})
	}
	t.Logf("%d roles held again %v after the crash", k, time.Since(crashed))
	time.Sleep(2 * s.LeaseDuration) // a second winner, if any, shows within this

	ids := make([]codec.MemberID, len(nodes))
	for i, n := range nodes {
		ids[i] = n.id
	}
	won := map[codec.MemberID]int{}
	for _, r := range roles {
		el := e.rec.find(processor.Elected, r, func(ev stamped) bool { return ev.Got.After(crashed) })
		if assert.Len(t, el, 1, "%s elected once after the crash", r) {
			won[el[0].Member]++
			assert.Equal(t, topScore(r, ids...), el[0].Member, "%s taken by its successor", r)
		}
	}
	t.Logf("roles taken per survivor: %v", won)
	assert.Len(t, won, survivors, "every survivor took its share")
	for _, n := range nodes {
		own := codec.Role("own-" + string(n.id))
		assert.Empty(t, e.rec.find(processor.Revoked, own, nil), "%s kept its own role", n.id)
	}
	all := slices.Clone(roles)
	for _, n := range nodes {
		all = append(all, codec.Role("own-"+string(n.id)))
	}
	assert.Zero(t, longestOverlap(e.rec, all), "two members held a role at once")
	for r, toks := range leasesAfter(t, e, aLast) {
		assert.Len(t, toks, 1, "%s: the topic shows one lease token after the crash, got %v", r, toks)
	}
	e.rec.checkFence(t)
}

// longestOverlap returns the longest time two members held one of roles at
// once, as their own Elected and Revoked events say.
func longestOverlap(rec *recorder, roles []codec.Role) time.Duration {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var longest time.Duration
	for _, r := range roles {
		since := map[codec.MemberID]time.Time{}
		for _, ev := range rec.events {
			if ev.Role != r {
				continue
			}
			switch ev.Kind {
			case processor.Elected:
				since[ev.Member] = ev.Got
			case processor.Revoked:
				from := since[ev.Member]
				delete(since, ev.Member)
				for m, t := range since {
					if m != ev.Member {
						start := from
						if t.After(start) {
							start = t
						}
						longest = max(longest, ev.Got.Sub(start))
					}
				}
			}
		}
	}
	return longest
}

// leasesAfter reads the role topic through another client (eachLease)
// and returns, for each role of after, the tokens of the leases (releases
// left out) written at offsets past after's.
func leasesAfter(t *testing.T, e *env, after map[codec.Role]int64) map[codec.Role][]codec.Token {
	t.Helper()
	out := map[codec.Role][]codec.Token{}
	for r := range after {
		out[r] = nil
	}
	eachLease(t, e, func(role codec.Role, off int64, l codec.Lease) {
		from, ok := after[role]
		if !ok || off <= from || l.Released() {
			return
		}
		if !slices.Contains(out[role], l.Token) {
			out[role] = append(out[role], l.Token)
		}
	})
	return out
}

// A member whose session stalls (its commits held past its renew
// deadline, as when its session's coordinator moves) loses every role it
// holds at once, and stays a candidate of all of them, ranked last. Its
// candidate takes them one after another (slowly: longer than a lease in
// all), and the member that lost them defers to it while it does,
// instead of taking some back: each role is elected once, and no two
// members hold one at once.
func TestIntegrationStalledSessionLosesItsRolesToOneMember(t *testing.T) {
	e := newEnv(t, itTxnTimeout, withFaults())
	s := itSettings()
	roles := roleNames("stall-%02d", 80)
	a := e.start("node-a", roles, s, nil, ownClientID())
	for _, r := range roles {
		awaitElected(t, e.rec, r, a.id, time.Time{}, 20*time.Second)
	}
	b := e.start("node-b", roles, s, nil, slowAcquire(150*time.Millisecond))
	for _, r := range roles {
		await(t, 10*time.Second, "node-b a candidate of "+string(r), func() bool { return len(e.candidates(r)) == 2 })
	}

	stalled := time.Now()
	hold := e.fn.Hold(faultnet.Rule{APIKey: int16(kmsg.EndTxn), Node: faultnet.AnyNode, ClientID: clientIDOf(a.id)})
	t.Cleanup(hold.Release)
	for _, r := range roles {
		awaitRevoked(t, e.rec, r, a.id, 10*time.Second, "node-a lost "+string(r))
	}
	hold.Release() // node-a's calls go through again: it could challenge
	for _, r := range roles {
		await(t, 30*time.Second, string(r)+" elected after the stall", func() bool {
			return len(e.rec.find(processor.Elected, r, func(ev stamped) bool { return ev.Got.After(stalled) })) > 0
		})
	}
	time.Sleep(2 * s.LeaseDuration) // a second winner, if any, shows within this
	for _, r := range roles {
		el := e.rec.find(processor.Elected, r, func(ev stamped) bool { return ev.Got.After(stalled) })
		if assert.Len(t, el, 1, "%s elected once after the stall", r) {
			assert.Equal(t, b.id, el[0].Member, "%s taken by the candidate whose session did not stall", r)
		}
	}
	assert.Zero(t, longestOverlap(e.rec, roles), "two members held a role at once")
	e.rec.checkFence(t)
}
