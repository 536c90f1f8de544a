package processor_test

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/faultnet"
	"github.com/krabka/krole/processor"
)

// jumpClock is the system clock that a test moves forward (Jump): a
// process paused for that long, as its own clock sees it when it wakes.
// Its timers fire when their time comes, in real time or by a jump.
type jumpClock struct {
	mu     sync.Mutex
	off    time.Duration
	timers map[*jumpTimer]struct{}
}

type jumpTimer struct {
	c    *jumpClock
	at   time.Time
	real *time.Timer
	ch   chan time.Time // nil for an AfterFunc timer
	f    func()
	done bool // fired or stopped; guarded by c.mu
}

func newJumpClock() *jumpClock { return &jumpClock{timers: map[*jumpTimer]struct{}{}} }

func (c *jumpClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.off)
}

func (c *jumpClock) NewTimer(d time.Duration) processor.Timer {
	return c.start(d, make(chan time.Time, 1), nil)
}

func (c *jumpClock) AfterFunc(d time.Duration, f func()) processor.Timer { return c.start(d, nil, f) }

func (c *jumpClock) start(d time.Duration, ch chan time.Time, f func()) *jumpTimer {
	t := &jumpTimer{c: c, ch: ch, f: f}
	c.mu.Lock()
	defer c.mu.Unlock()
	t.at = time.Now().Add(c.off + d)
	c.timers[t] = struct{}{}
	t.real = time.AfterFunc(d, func() { t.fire(true) })
	return t
}

// Jump moves the clock forward by d, firing every timer that falls due.
func (c *jumpClock) Jump(d time.Duration) {
	c.mu.Lock()
	c.off += d
	now := time.Now().Add(c.off)
	var due []*jumpTimer
	for t := range c.timers {
		t.real.Stop()
		if t.at.After(now) {
			t.real = time.AfterFunc(t.at.Sub(now), func() { t.fire(true) })
			continue
		}
		due = append(due, t)
	}
	c.mu.Unlock()
	for _, t := range due {
		t.fire(false)
	}
}

// fire delivers the timer once: an AfterFunc's f on a goroutine of its
// own (inline when the real timer already runs on one).
func (t *jumpTimer) fire(own bool) {
	c := t.c
	c.mu.Lock()
	if t.done {
		c.mu.Unlock()
		return
	}
	t.done = true
	delete(c.timers, t)
	c.mu.Unlock()
	switch {
	case t.f != nil && own:
		t.f()
	case t.f != nil:
		go t.f()
	default:
		select {
		case t.ch <- c.Now():
		default:
		}
	}
}

func (t *jumpTimer) C() <-chan time.Time { return t.ch }

func (t *jumpTimer) Stop() bool {
	c := t.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.done {
		return false
	}
	t.done = true
	delete(c.timers, t)
	t.real.Stop()
	return true
}

// sessionRecords returns member's session records in the role topic, in
// offset order, as read_committed readers see them.
func sessionRecords(t *testing.T, e *env, member codec.MemberID) []sessionRecord {
	t.Helper()
	p := codec.SessionPartition(member, partitionsOf(t, e))
	key := codec.SessionKey(member).Encode()
	var out []sessionRecord
	for _, m := range e.c.ReadAll(t, e.c.Config.Topic, sarama.ReadCommitted, 10*time.Second) {
		if m.Partition != p || !bytes.Equal(m.Key, key) {
			continue
		}
		rec, err := codec.DecodeRecord(m.Value)
		require.NoError(t, err)
		require.NotNil(t, rec.Heartbeat, "offset %d", m.Offset)
		out = append(out, sessionRecord{off: m.Offset, hb: *rec.Heartbeat})
	}
	return out
}

type sessionRecord struct {
	off int64
	hb  codec.Heartbeat
}

// A member paused past its local deadline while its heartbeat's commit is
// in flight: the coordinator commits the heartbeat after the deadline, as
// Apache Kafka may (it aborts timed-out transactions only at a periodic
// check), and the answer is lost, so the member reads "unknown outcome".
// faultnet holds the session's EndTxn while the member's clock jumps past
// the deadline (the member gives up on it and closes the connection), then
// delivers it; the member's InitProducerId is held until the commit shows,
// so the session's restart comes after it. The late heartbeat must bring
// nothing back to life: the old incarnation writes no heartbeat after it,
// a session end of it follows, and the member holds its role again under
// a new incarnation.
//
// The member's time passes by its clock; the cluster's transaction timeout
// (3s, real time) only has to outlast the few steps between the hold and
// the delivery, or kfake would abort the heartbeat instead.
func TestIntegrationUnansweredLateHeartbeatEndsTheIncarnation(t *testing.T) {
	s := itSettings()
	s.LeaseDuration, s.HeartbeatInterval, s.HeartbeatDeadline, s.TransactionTimeout = 5*time.Second, time.Second, 4*time.Second, 3*time.Second
	e := newEnv(t, s.TransactionTimeout, withFaults())
	role := codec.Role("late-beat")
	clk := newJumpClock()
	a := e.start("node-a", []codec.Role{role}, s, nil, onClock(clk), ownClientID())
	ctx := e.ctx(60 * time.Second)

	el := awaitElected(t, e.rec, role, a.id, time.Time{}, 10*time.Second)
	var last beat
	await(t, 10*time.Second, "node-a heartbeats while it holds the role", func() bool {
		var ok bool
		last, ok = e.rec.lastBeat(a.id)
		return ok && last.start.After(el.Got)
	})
	old := last.hb.Session.Nonce

	// The next heartbeat's commit is held; then the member's clock jumps
	// past its deadline, ending the heartbeat's wait for an answer.
	endTxn := e.fn.Hold(faultnet.Rule{APIKey: int16(kmsg.EndTxn), Node: faultnet.AnyNode, ClientID: clientIDOf(a.id), Count: 1})
	t.Cleanup(endTxn.Release)
	require.NoError(t, endTxn.Wait(ctx, 1), "node-a's next heartbeat commits")
	inits := e.fn.Hold(faultnet.Rule{APIKey: int16(kmsg.InitProducerID), Node: faultnet.AnyNode, ClientID: clientIDOf(a.id)})
	t.Cleanup(inits.Release)
	last, _ = e.rec.lastBeat(a.id)
	clk.Jump(s.HeartbeatDeadline)
	require.NoError(t, endTxn.WaitOrphaned(ctx, 1), "node-a gave up on the commit")
	awaitRevoked(t, e.rec, role, a.id, 5*time.Second, "node-a's holding ends at its deadline")

	// The commit lands after the deadline; its answer goes nowhere.
	endTxn.Release()
	var late int64
	await(t, 10*time.Second, "the held heartbeat commits", func() bool {
		se, ok, err := e.obs.Session(ctx, a.id)
		late = se.Offset
		return err == nil && ok && se.Heartbeat.Session.Nonce == old && !se.Heartbeat.End && se.Heartbeat.GrantedAt > last.hb.GrantedAt
	})
	inits.Release()

	// Until node-a holds the role under a new incarnation that heartbeats,
	// or the old incarnation heartbeats again (the checks below fail).
	var held *codec.Lease
	await(t, 15*time.Second, "node-a holds the role under a new incarnation, or the old one heartbeats again", func() bool {
		se, ok, err := e.obs.Session(ctx, a.id)
		if err != nil || !ok || se.Offset <= late || se.Heartbeat.End {
			return false
		}
		held = e.state(role).Lease
		return se.Heartbeat.Session.Nonce == old || held != nil && !held.Released() && held.Member == a.id &&
			held.Session != nil && held.Session.Nonce == se.Heartbeat.Session.Nonce
	})
	var ended, renewed bool
	for _, r := range sessionRecords(t, e, a.id) {
		if r.off <= late {
			continue
		}
		switch {
		case r.hb.Session.Nonce == old && !r.hb.End:
			t.Errorf("offset %d: a heartbeat of the old incarnation after the late one (late: offset %d)", r.off, late)
		case r.hb.Session.Nonce == old:
			ended = true
		case !r.hb.End:
			assert.True(t, ended, "offset %d: the new incarnation heartbeats only after the old one's end", r.off)
			renewed = true
		}
	}
	assert.True(t, ended, "a session end of the old incarnation follows the late heartbeat")
	assert.True(t, renewed, "the new incarnation heartbeats")
	require.NotNil(t, held)
	require.NotNil(t, held.Session)
	assert.NotEqual(t, old, held.Session.Nonce, "node-a holds the role again under a new incarnation")
	e.rec.checkFence(t)
}
