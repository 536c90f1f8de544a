package processor_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/processor"
)

// TestIntegrationOverloadKeepsWhatItCanRenew overloads one member on
// purpose (issue 13): node-a holds 20 roles, node-b is a candidate of each,
// and then the cluster answers every EndTxn under one of node-a's tokens
// only after a delay (kfake's SleepControl), so that node-a's lease writes
// go one at a time at 80ms each: 20 renewals take 1.6s, as long as the
// renew deadline, where each role must renew every 400ms. node-a cannot
// keep all its roles. It must keep the roles it can renew (same token,
// never handed over), resign the others with a release so that node-b
// takes them, and not lose everything to expiry. Everything is checked
// through the broker (Describe) and the view, not on speed.
//
// On the code before issue 13 (no call limiter, no capacity estimate)
// every renewal of node-a queued behind all the others in the client:
// they timed out, node-a lost every role (lease lost, token retired) and
// kept challenging them back.
func TestIntegrationOverloadKeepsWhatItCanRenew(t *testing.T) {
	e := newEnv(t, itTxnTimeout)
	e.c.RequireFake(t)
	const n = 20
	roles := make([]codec.Role, n)
	for i := range roles {
		roles[i] = codec.Role(fmt.Sprintf("load-%02d", i))
	}
	s := itSettings()
	s.MaxInFlight = 2
	a := e.start("node-a", roles, s, nil)
	await(t, 15*time.Second, "node-a holds every role", func() bool {
		for _, r := range roles {
			if _, ok := e.rec.holders(r)[a.id]; !ok {
				return false
			}
		}
		return true
	})
	b := e.start("node-b", roles, itSettings(), nil)
	await(t, 15*time.Second, "node-a's view shows node-b as a candidate of every role", func() bool {
		for _, r := range roles {
			st, err := a.src.Role(e.ctx(5*time.Second), r)
			require.NoError(t, err)
			if st.Rank(b.id) < 0 {
				return false
			}
		}
		return true
	})
	before := map[codec.Role]codec.Token{}
	for _, r := range roles {
		before[r] = e.rec.holders(r)[a.id]
	}

	// From now on node-a's commits take 80ms each at the coordinator.
	slowCommits(t, e, a.id, 80*time.Millisecond)

	// Wait for node-a to settle under the load: it resigned roles for
	// node-b, and holds the rest.
	await(t, 30*time.Second, "node-a resigned roles it cannot renew in time", func() bool {
		return revocations(e.rec, a.id)[processor.ReasonOverloaded] > 0
	})
	// Several lease durations under the load.
	settle := time.Now().Add(5 * s.LeaseDuration)
	for time.Now().Before(settle) {
		time.Sleep(50 * time.Millisecond)
	}

	var keptA, retookA, tookB int
	for _, r := range roles {
		holder, tok := e.settled(r, 20*time.Second)
		e.agree(r, holder, tok) // Describe and the view name the holder's token
		switch {
		case holder == a.id && tok == before[r]:
			keptA++ // never handed over
		case holder == a.id:
			retookA++
		case holder == b.id:
			tookB++
		}
	}
	assert.Positive(t, keptA, "node-a keeps roles it can renew, under the token it had before the overload")
	assert.Positive(t, tookB, "node-b took the roles node-a could not keep")

	// What node-a lost, it lost by resigning, not by expiry: each role
	// it let go was released for node-b.
	lost := revocations(e.rec, a.id)
	t.Logf("node-a keeps %d roles (and took back %d), node-b took %d; node-a's revocations: %v", keptA, retookA, tookB, lost)
	assert.Positive(t, lost[processor.ReasonOverloaded])
	assert.Less(t, lost[processor.ReasonLeaseLost]+lost[processor.ReasonTokenRetired]+lost[processor.ReasonFenced], lost[processor.ReasonOverloaded],
		"node-a resigns the roles it cannot keep rather than lose them to expiry")
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

// TestIntegrationOverloadAloneKeepsAStableSet overloads a member that has
// nobody to hand roles to (issue 13): node-a alone holds 20 roles, then
// the cluster answers each EndTxn under one of node-a's tokens only after
// 80ms, as in TestIntegrationOverloadKeepsWhatItCanRenew. node-a cannot
// renew all 20 in time. It must let go of the roles it cannot keep by
// releasing them ([processor.ReasonOverloaded]), not by losing them to
// their deadlines (nor to a retired token or a fence: at most two, for a
// stall of the whole machine), keep the rest, and then hold a stable set:
// over several lease durations it keeps the roles it holds under the same
// tokens (Describe and the view agree) and lets at most two go (after its
// pause it may take a released role back, and let one go if that was one
// too many). Checked on the member's events and the broker, not on speed.
//
// Before the fix a lone member never let a role go (no other candidate
// to shed to): the renewals it could not fit in came too late, and 16 of
// its 20 roles ran out at their deadlines.
func TestIntegrationOverloadAloneKeepsAStableSet(t *testing.T) {
	e := newEnv(t, itTxnTimeout)
	e.c.RequireFake(t)
	const n = 20
	roles := make([]codec.Role, n)
	for i := range roles {
		roles[i] = codec.Role(fmt.Sprintf("alone-%02d", i))
	}
	s := itSettings()
	s.MaxInFlight = 2
	a := e.start("node-a", roles, s, nil)
	await(t, 15*time.Second, "node-a holds every role", func() bool {
		for _, r := range roles {
			if _, ok := e.rec.holders(r)[a.id]; !ok {
				return false
			}
		}
		return true
	})

	slowCommits(t, e, a.id, 80*time.Millisecond)

	// node-a lets go of what it cannot renew in time, then settles.
	e.rec.mu.Lock()
	onset := len(e.rec.events)
	e.rec.mu.Unlock()
	settle := time.Now().Add(5 * s.LeaseDuration)
	for time.Now().Before(settle) {
		time.Sleep(50 * time.Millisecond)
	}
	kept := map[codec.Role]codec.Token{}
	for _, r := range roles {
		if tok, ok := e.rec.holders(r)[a.id]; ok {
			kept[r] = tok
		}
	}
	require.NotEmpty(t, kept, "node-a keeps roles")
	require.Less(t, len(kept), n, "node-a cannot keep all its roles under the load")
	e.rec.mu.Lock()
	from := len(e.rec.events)
	e.rec.mu.Unlock()

	window := time.Now().Add(5 * s.LeaseDuration)
	for time.Now().Before(window) {
		time.Sleep(50 * time.Millisecond)
	}
	count := func(evs []stamped) (map[processor.Reason]int, int) {
		lost, elected := map[processor.Reason]int{}, 0
		for _, ev := range evs {
			switch {
			case ev.Kind == processor.Revoked && ev.Member == a.id:
				lost[ev.Reason]++
			case ev.Kind == processor.Elected && ev.Member == a.id:
				elected++
			}
		}
		return lost, elected
	}
	e.rec.mu.Lock()
	all, _ := count(e.rec.events[onset:])
	inWindow, elections := count(e.rec.events[from:])
	e.rec.mu.Unlock()
	still := 0
	for r, tok := range kept {
		if e.rec.holders(r)[a.id] == tok {
			still++
			e.agree(r, a.id, tok)
		}
	}
	t.Logf("node-a kept %d of %d roles, %d of them still under the same token %v later; revocations since the overload began %v, in the window %v; elections in the window %d",
		len(kept), n, still, 5*s.LeaseDuration, all, inWindow, elections)
	assert.Positive(t, all[processor.ReasonOverloaded], "node-a released the roles it could not keep")
	// A stall of the whole process longer than a renew deadline (the
	// 2-core CI machine runs other packages' tests beside this one) loses
	// a lease however the member plans; one such stall may cost a role or
	// two. Before the fix, 16 of the 20 ran out.
	lapsed := all[processor.ReasonLeaseLost] + all[processor.ReasonTokenRetired] + all[processor.ReasonFenced]
	assert.LessOrEqual(t, lapsed, 2, "node-a loses no role it holds to its deadline: it releases what it cannot keep")
	assert.Greater(t, all[processor.ReasonOverloaded], lapsed, "node-a lets go by releasing, not by lapsing")
	shed := 0
	for _, c := range inWindow {
		shed += c
	}
	assert.LessOrEqual(t, shed, 2, "node-a does not churn: it keeps what it holds (it may take a role more after its pause, and let one go; a stall may cost one more)")
	assert.GreaterOrEqual(t, still, len(kept)-2, "node-a keeps a stable set")
	e.rec.checkFence(t)
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
			e.c.Fake.SleepControl(func() { time.Sleep(delay) })
		}
		return nil, nil, false
	})
	t.Cleanup(func() {
		mu.Lock()
		stopped = true
		mu.Unlock()
	})
}
