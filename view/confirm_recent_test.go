package view

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/testcluster"
)

// awaitCandidates waits until the view shows role's candidates as want.
func awaitCandidates(t *testing.T, v *View, role codec.Role, want ...codec.MemberID) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := v.Role(testCtx(t), role)
		require.NoError(t, err)
		if slices.Equal(members(st.Candidates), want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the view shows candidates %v of %s, not %v", members(st.Candidates), role, want)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestConfirmRecentFromTheConsumersAnswer: right after the view's
// consumer brought a record, ConfirmRecent takes the confirmation from
// that fetch answer: no probe round trip, and the state holds the record
// (and everything committed before it). With maxAge 0 it is Confirm, one
// probe Fetch.
func TestConfirmRecentFromTheConsumersAnswer(t *testing.T) {
	c, m, v := confirmedOnce(t)
	// The consumer's long poll in flight at that Confirm was sent before
	// its probe returned, and is not used after it: the records below are
	// brought by polls sent after it.
	m.Register("db", "m2")
	awaitCandidates(t, v, "db", "m1", "m2")
	lists, fetches := countProbes(t, c)
	l := m.Lease("db", "m1", time.Minute)
	m.Register("db", "m3")
	awaitCandidates(t, v, "db", "m1", "m2", "m3")

	before := v.Stats().ConfirmsFromAnswers
	cf, err := v.ConfirmRecent(testCtx(t), "db", time.Minute)
	require.NoError(t, err)
	require.NotNil(t, cf.State.Lease)
	assert.Equal(t, l, *cf.State.Lease)
	assert.Equal(t, []codec.MemberID{"m1", "m2", "m3"}, members(cf.State.Candidates))
	assert.EqualValues(t, -1, cf.OpenProducerID)
	assert.Equal(t, before+1, v.Stats().ConfirmsFromAnswers, "taken from the consumer's answer")
	assert.Zero(t, fetches.Load()+lists.Load(), "no probe")

	_, err = v.ConfirmRecent(testCtx(t), "db", 0)
	require.NoError(t, err)
	assert.EqualValues(t, 1, fetches.Load(), "maxAge 0: Confirm's Fetch")
	assert.Equal(t, before+1, v.Stats().ConfirmsFromAnswers)
}

// TestConfirmRecentRefusesAnAnswerItCannotStandFor: the consumer's latest
// answer is not used when its request was sent more than maxAge before
// the call (a network that held it), before an earlier confirmation's
// probes returned, when it shows a transaction open, or when the consumer
// had not read up to its last stable offset with it.
func TestConfirmRecentRefusesAnAnswerItCannotStandFor(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	m := c.Members(t)
	m.Register("db", "m1")
	v, _ := runView(t, c.Config, Options{})
	caughtUp(t, v)
	cp := v.glue.consumer.Load()
	require.NotNil(t, cp)
	fc := (*cp).(*fetchConsumer)
	var pc *fetchPartition
	func() {
		fc.mu.Lock()
		defer fc.mu.Unlock()
		pc = fc.partitions[v.topic][0]
	}()
	require.NotNil(t, pc)
	// No answer of the consumer replaces the ones stored below: it is
	// paused, and its long poll in flight has ended.
	fc.PauseAll()
	time.Sleep(3 * fetchMaxWait)
	a := pc.recent.Load()
	require.NotNil(t, a)
	mark := v.progress.marks()[0]
	now := time.Now()
	const maxAge = 50 * time.Millisecond
	fresh := answer{sent: now.Add(-maxAge / 2), lso: a.lso, hwm: a.lso, next: a.lso, last: a.last}
	use := func(x answer) bool {
		pc.recent.Store(&x)
		_, ok := v.recentEnds(0, mark, maxAge, now)
		return ok
	}
	require.True(t, use(fresh), "a fresh answer read to its last stable offset, nothing open")
	old := fresh
	old.sent = now.Add(-2 * maxAge)
	assert.False(t, use(old), "sent more than maxAge before the call")
	open := fresh
	open.hwm = fresh.lso + 2
	assert.False(t, use(open), "a transaction may be open")
	short := fresh
	short.lso, short.hwm = fresh.next+5, fresh.next+5
	assert.False(t, use(short), "the consumer had not read up to the last stable offset")
	v.recent.probed(0, now.Add(-maxAge/4))
	assert.False(t, use(fresh), "sent before an earlier confirmation's probes returned")
}

// TestConfirmRecentAfterACutHoldsWhatWasCommittedDuringIt: the view is
// cut off from the cluster both ways (faultnet) while records are
// committed; the consumer's answer in flight is held and delivered at the
// heal. A confirmation right after the heal holds every record committed
// during the cut: the held answer's request was sent before the cut, more
// than maxAge before, so it is not used for the confirmation.
func TestConfirmRecentAfterACutHoldsWhatWasCommittedDuringIt(t *testing.T) {
	c, fn := testcluster.StartFaulty(t, testcluster.Options{Partitions: 1})
	m := c.Members(t)
	m.Register("db", "m1")
	cfg := c.Config
	cfg.ClientID = "krole-cut"
	v, _ := runView(t, cfg, Options{})
	caughtUp(t, v)
	_, err := v.Confirm(testCtx(t), "db")
	require.NoError(t, err)
	time.Sleep(250 * time.Millisecond) // idle: the consumer's long poll waits at the broker

	const maxAge = 50 * time.Millisecond
	for round := range 3 {
		heal := fn.Partition("krole-cut")
		m.Register("db", codec.MemberID(fmtMember(round, 1))) // answers the poll waiting at the broker; the answer is held
		time.Sleep(3 * maxAge)
		m.Register("db", codec.MemberID(fmtMember(round, 2)))
		time.Sleep(3 * maxAge)
		heal()
		cf, err := v.ConfirmRecent(testCtx(t), "db", maxAge)
		require.NoError(t, err)
		assert.Contains(t, members(cf.State.Candidates), codec.MemberID(fmtMember(round, 2)),
			"round %d: the registration committed during the cut, %v before the confirmation", round, 3*maxAge)
		time.Sleep(250 * time.Millisecond)
	}
}

func fmtMember(round, i int) string {
	return "r" + string(rune('0'+round)) + "-" + string(rune('0'+i))
}
