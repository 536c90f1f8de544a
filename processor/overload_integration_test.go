package processor_test

import (
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/testcluster"
	"github.com/krabka/krole/processor"
)

// TestIntegrationSlowCommitsCostNoHeldRole overloads one member's lease
// writes on purpose: node-a holds 20 roles, node-b is a
// candidate of each, and then the cluster answers every EndTxn under one of
// node-a's role tokens only after 80ms (kfake's SleepControl), so that 20
// per-role renewals would take 1.6s, as long as the heartbeat deadline. Under
// the member session a held role costs no transaction per heartbeat interval:
// node-a keeps every role under the token it had, nothing is handed over
// and nothing is revoked, over several lease durations. Checked through the
// broker (Describe) and the view, not on speed. (A member renewing each
// role in a transaction of its own could not keep them all here: it would
// resign to node-b the roles it could not renew in time.)
func TestIntegrationSlowCommitsCostNoHeldRole(t *testing.T) {
	e := newEnv(t, itTxnTimeout)
	e.c.RequireFake(t)
	roles := roleNames("load-%02d", 20)
	s := itSettings()
	s.MaxInFlight = 2
	a := e.start("node-a", roles, s, nil)
	await(t, 15*time.Second, "node-a holds every role", func() bool { return allHeld(e.rec, roles, a.id) })
	b := e.start("node-b", roles, itSettings(), nil)
	e.awaitSeenBy(a, roles, 15*time.Second, b.id)
	before := map[codec.Role]codec.Token{}
	for _, r := range roles {
		before[r] = e.rec.holders(r)[a.id]
	}

	// From now on node-a's commits under its role tokens take 80ms each
	// at the coordinator.
	slowCommits(t, e, a.id, 80*time.Millisecond)
	time.Sleep(5 * s.LeaseDuration) // on purpose: a role lost to the slow commits shows within it

	for _, r := range roles {
		holder, tok := e.settled(r, 20*time.Second)
		e.agree(r, holder, tok) // Describe and the view name the holder's token
		assert.Equal(t, a.id, holder, "role %s", r)
		assert.Equal(t, before[r], tok, "role %s: never handed over", r)
		assert.Empty(t, e.rec.find(processor.Elected, r, func(ev stamped) bool { return ev.Member == b.id }), "node-b took %s", r)
	}
	assert.Empty(t, revocations(e.rec, a.id), "node-a lost nothing")
	e.rec.checkFence(t)
}

// revocations counts member's Revoked events by reason.
func revocations(r *recorder, member codec.MemberID) map[processor.Reason]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[processor.Reason]int{}
	for _, ev := range r.events {
		if ev.Kind == processor.Revoked && ev.Member == member {
			out[ev.Reason]++
		}
	}
	return out
}

// slowCommits makes the cluster answer each EndTxn under a token that
// member minted only after delay, until the test ends.
func slowCommits(t *testing.T, e *env, member codec.MemberID, delay time.Duration) {
	var (
		mu      sync.Mutex
		stopped bool
	)
	minted := func(pid int64, epoch int16) bool {
		e.rec.mu.Lock()
		defer e.rec.mu.Unlock()
		for _, q := range e.rec.acquires {
			if q.Member == member && q.Token.ProducerID == pid && q.Token.Epoch == epoch {
				return true
			}
		}
		return false
	}
	e.c.Fake.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		e.c.Fake.KeepControl()
		mu.Lock()
		off := stopped
		mu.Unlock()
		if off {
			return nil, nil, false
		}
		if r := req.(*kmsg.EndTxnRequest); minted(r.ProducerID, r.ProducerEpoch) {
			e.c.Fake.SleepControl(func() { time.Sleep(delay) }) // the slow commit itself
		}
		return nil, nil, false
	})
	t.Cleanup(func() {
		mu.Lock()
		stopped = true
		mu.Unlock()
	})
}

// TestIntegrationQueuedCampaignsDoNotPauseTheMember: a member that starts
// with many roles queues their campaigns behind its call slots (here one,
// and every commit 30ms at the coordinator: the last of 40 acquisitions
// waits longer than a heartbeat interval for its slot). That wait is the
// member's own queue, not a sign of an overloaded cluster: the campaigns
// are not paused (no "a challenge timed out" warning), and every role is
// taken. Before, each campaign's wait for its challenge's slot was
// bounded by a heartbeat interval and counted as a timed-out challenge,
// which paused every campaign of the member for up to a lease, again and
// again: a member of 10,000 roles held 7,000 after five minutes.
func TestIntegrationQueuedCampaignsDoNotPauseTheMember(t *testing.T) {
	e := newEnv(t, itTxnTimeout)
	e.c.RequireFake(t)
	roles := roleNames("queue-%02d", 40)
	s := itSettings()
	s.MaxInFlight = 1
	slowCommits(t, e, "node-a", 30*time.Millisecond)
	logs := &testcluster.SyncBuffer{}
	a := e.start("node-a", roles, s, nil, withOptions(func(o *processor.Options) {
		o.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}))
	await(t, 60*time.Second, "node-a holds every role", func() bool { return allHeld(e.rec, roles, a.id) })
	assert.Zero(t, strings.Count(logs.String(), "a challenge timed out"), "the member paused its campaigns")
	assert.Zero(t, strings.Count(logs.String(), "challenge (timed out)"), "challenges counted as timed out")
	assert.Empty(t, revocations(e.rec, a.id), "node-a lost nothing")
	e.rec.checkFence(t)
}
