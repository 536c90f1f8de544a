package processor_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/processor"
)

// A holder whose lease names its member session keeps the role while the
// session's heartbeats come, without writing a lease again: the
// candidate, judging by its view (the session record looked up at each
// decision, on its own clock), never challenges it. Once the real
// heartbeats stop, heartbeats forged by a stranger (committed under
// another transactional id naming the session's nonce, and a plain
// append naming the real session) keep nothing alive: the candidate is
// elected within a span of the last real heartbeat (+ its view's lag).
// The holder here is driven through the transport by hand, so that the
// test decides when its real heartbeats stop.
func TestIntegrationSessionHeartbeatsKeepAHolderForgedOnesDoNot(t *testing.T) {
	e := newEnv(t, itTxnTimeout)
	role := codec.Role("session-held")
	s := itSettings()
	ctx := e.ctx(60 * time.Second)
	tr := e.transport()
	sess, err := tr.StartSession(ctx, "node-h", "inc1")
	require.NoError(t, err)
	tok, err := tr.AcquireEpoch(ctx, role)
	require.NoError(t, err)
	beat := func(sn codec.Session) codec.Heartbeat {
		now := time.Now().UnixMilli()
		return codec.Heartbeat{Member: "node-h", Session: sn, GrantedAt: now, Deadline: now + s.LeaseDuration.Milliseconds()}
	}
	now := time.Now().UnixMilli()
	require.NoError(t, leaseErr(tr.WriteLease(ctx, role, tok, codec.Lease{Member: "node-h", Token: tok, GrantedAt: now,
		Deadline: now + s.LeaseDuration.Milliseconds(), Session: &sess})))

	b := e.start("node-b", []codec.Role{role}, s, nil)
	e.awaitCandidate(role, b.id)

	// The holder heartbeats every HeartbeatInterval for three lease durations.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var lastBeat time.Time
	var mu sync.Mutex
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(s.HeartbeatInterval)
		defer tick.Stop()
		for {
			if err := tr.Heartbeat(ctx, beat(sess)); err == nil {
				mu.Lock()
				lastBeat = time.Now()
				mu.Unlock()
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	time.Sleep(3 * s.LeaseDuration) // on purpose: a challenge of the live holder shows within it
	assert.Empty(t, e.rec.find(processor.Elected, role, func(stamped) bool { return true }), "nobody challenged a holder whose heartbeats came")
	assert.Equal(t, tok, e.describe(role), "the holder's token was never fenced")

	// The real heartbeats stop; forged ones go on.
	close(stop)
	wg.Wait()
	mu.Lock()
	last := lastBeat
	mu.Unlock()
	f := newForger(t, e, e.c.Config.TransactionalID("other"))
	plain := newForger(t, e, "")
	forge := func(f *forger, hb codec.Heartbeat) {
		f.write(codec.SessionPartition("node-h", f.parts), codec.SessionKey("node-h").Encode(), codec.Record{Heartbeat: &hb})
	}
	deadline := last.Add(s.LeaseDuration + 2*slack)
	for n := 0; ; n++ {
		if el := e.rec.find(processor.Elected, role, func(ev stamped) bool { return ev.Member == b.id }); len(el) > 0 {
			require.Len(t, el, 1)
			assert.Greater(t, n, 2, "forged heartbeats were written while the candidate waited")
			t.Logf("elected %v after the last real heartbeat", el[0].Got.Sub(last))
			assert.GreaterOrEqual(t, el[0].Got.Sub(last), s.LeaseDuration-slack, "not before the last real heartbeat's span")
			assert.Greater(t, e.obs.Stats().Skipped["forged"], int64(0), "the forged heartbeats were skipped and counted")
			return
		}
		require.True(t, time.Now().Before(deadline), "node-b not elected within a span (+ slack) of the last real heartbeat")
		time.Sleep(s.HeartbeatInterval / 2) // the forger's pace, on purpose
		if n%2 == 0 {
			forge(f, beat(codec.Session{ProducerID: f.tok.ProducerID, Epoch: f.tok.Epoch, Nonce: sess.Nonce}))
		} else {
			forge(plain, beat(sess))
		}
	}
}

// leaseErr is the error of a WriteLease, for tests that do not look at
// the offset.
func leaseErr(_ int64, err error) error { return err }
