package view

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/testcluster"
	"github.com/krabka/krole/rolestate"
)

// manualClock is a view clock the test moves by hand.
type manualClock struct{ ns atomic.Int64 }

func (c *manualClock) now() time.Time  { return time.Unix(0, c.ns.Load()) }
func (c *manualClock) set(t time.Time) { c.ns.Store(t.UnixNano()) }

// sessionRoles returns a role and a member whose session records live in
// another partition than the role's.
func sessionRoles(t *testing.T, nparts int32) (codec.Role, codec.MemberID) {
	for _, m := range []codec.MemberID{"m1", "m2", "m3", "m4", "m5", "m6", "m7", "m8"} {
		if codec.SessionPartition(m, nparts) != codec.Partition("sched", nparts) {
			return "sched", m
		}
	}
	t.Fatal("no member found in another partition")
	return "", ""
}

func sessionLease(tok codec.Token, s codec.Session, member codec.MemberID, span time.Duration) codec.Lease {
	now := time.Now().UnixMilli()
	return codec.Lease{Member: member, Token: tok, GrantedAt: now, Deadline: now + span.Milliseconds(), Session: &s}
}

func sessionBeat(s codec.Session, member codec.MemberID, span time.Duration, excluded ...codec.Role) codec.Heartbeat {
	now := time.Now().UnixMilli()
	return codec.Heartbeat{Member: member, Session: s, GrantedAt: now, Deadline: now + span.Milliseconds(), Excluded: excluded}
}

// TestSessionHeartbeatsCarryALeaseOnTheViewsClock: a lease naming its
// holder's session holds for its own span from when the view saw it, and
// for one heartbeat span from when the view saw the session's latest
// heartbeat; a forged heartbeat (a stranger's transaction under another
// transactional id naming the same nonce) extends nothing and is counted;
// a heartbeat that excludes the role, a session end, and a later
// incarnation's heartbeat (for a lease naming the earlier one) each end
// the holding; Confirm covers the session's partition.
func TestSessionHeartbeatsCarryALeaseOnTheViewsClock(t *testing.T) {
	const nparts = 4
	c := testcluster.Start(t, testcluster.Options{Partitions: nparts})
	role, member := sessionRoles(t, nparts)
	tr := c.Transport(t)
	clk := &manualClock{}
	t0 := time.Unix(10_000, 0)
	clk.set(t0)
	v, _ := runView(t, c.Config, Options{Clock: clk.now, Authors: rolestate.NewAuthors(), Describe: tr.Describe})
	ctx := testCtx(t)
	const span = 3 * time.Second

	s, err := tr.StartSession(ctx, member, "inc1")
	require.NoError(t, err)
	tok, err := tr.AcquireEpoch(ctx, role)
	require.NoError(t, err)
	l := sessionLease(tok, s, member, span)
	require.NoError(t, leaseErr(tr.WriteLease(ctx, role, tok, l)))
	caughtUp(t, v)
	held := func(at time.Time) bool {
		t.Helper()
		_, ok, err := v.Holder(ctx, role, at)
		require.NoError(t, err)
		return ok
	}
	assert.True(t, held(t0.Add(span-time.Millisecond)), "the lease's own span")
	assert.False(t, held(t0.Add(span)), "no heartbeat: the lease's own span only")

	// A heartbeat seen at t0+2s carries the lease to t0+5s.
	clk.set(t0.Add(2 * time.Second))
	require.NoError(t, tr.Heartbeat(ctx, sessionBeat(s, member, span)))
	require.Eventually(t, func() bool { _, ok, _ := v.Session(ctx, member); return ok }, 10*time.Second, 5*time.Millisecond)
	assert.True(t, held(t0.Add(5*time.Second-time.Millisecond)))
	assert.False(t, held(t0.Add(5*time.Second)))
	st, err := v.Role(ctx, role)
	require.NoError(t, err)
	require.NotNil(t, st.Session)
	assert.Equal(t, rolestate.Vouched, st.SessionVouch())
	assert.Equal(t, t0.Add(2*time.Second), st.Session.SeenAt)

	// A stranger's heartbeat: a transaction under another role's
	// transactional id, naming its own producer id and epoch (so the batch
	// check passes) and the victim's nonce.
	strangerT := c.Transport(t)
	ftok, err := strangerT.AcquireEpoch(ctx, "other")
	require.NoError(t, err)
	forged := sessionBeat(codec.Session{ProducerID: ftok.ProducerID, Epoch: ftok.Epoch, Nonce: "inc1"}, member, time.Hour)
	val, err := codec.EncodeRecord(codec.Record{Heartbeat: &forged})
	require.NoError(t, err)
	clk.set(t0.Add(4 * time.Second))
	require.NoError(t, strangerT.Transact(ctx, "other", ftok, func(tx *fencing.Txn) error {
		_, err := tx.Produce(c.Config.Topic, codec.SessionPartition(member, nparts), codec.SessionKey(member).Encode(), val)
		return err
	}))
	require.Eventually(t, func() bool { return v.Stats().Skipped[SkipForged] == 1 }, 10*time.Second, 5*time.Millisecond)
	assert.False(t, held(t0.Add(5*time.Second)), "a forged heartbeat keeps nothing alive")

	// Confirm covers the session's partition: a heartbeat committed just
	// before it is in the confirmed state.
	clk.set(t0.Add(6 * time.Second))
	hb := sessionBeat(s, member, span)
	require.NoError(t, tr.Heartbeat(ctx, hb))
	conf, err := v.Confirm(ctx, role)
	require.NoError(t, err)
	require.NotNil(t, conf.State.Session)
	assert.Equal(t, hb, conf.State.Session.Heartbeat)
	assert.True(t, conf.State.Live(t0.Add(9*time.Second-time.Millisecond)))

	// A heartbeat that excludes the role drops it at once.
	clk.set(t0.Add(7 * time.Second))
	require.NoError(t, tr.Heartbeat(ctx, sessionBeat(s, member, span, role)))
	_, err = v.Confirm(ctx, role)
	require.NoError(t, err)
	assert.False(t, held(t0.Add(7*time.Second)), "excluded")

	// Vouched again, then the session ends: dropped.
	require.NoError(t, tr.Heartbeat(ctx, sessionBeat(s, member, span)))
	_, err = v.Confirm(ctx, role)
	require.NoError(t, err)
	assert.True(t, held(t0.Add(8*time.Second)))
	require.NoError(t, tr.Heartbeat(ctx, codec.Heartbeat{Member: member, Session: s, End: true}))
	_, err = v.Confirm(ctx, role)
	require.NoError(t, err)
	assert.False(t, held(t0.Add(7*time.Second)), "the session ended")

	// A later incarnation's heartbeats do not revive the lease of the
	// earlier one: it lives by its own span, counted from when it was seen.
	s2, err := tr.StartSession(ctx, member, "inc2")
	require.NoError(t, err)
	clk.set(t0.Add(20 * time.Second))
	require.NoError(t, tr.Heartbeat(ctx, sessionBeat(s2, member, span)))
	conf, err = v.Confirm(ctx, role)
	require.NoError(t, err)
	assert.Equal(t, s2, conf.State.Session.Heartbeat.Session)
	assert.Equal(t, rolestate.NoVouch, conf.State.SessionVouch())
	assert.False(t, held(t0.Add(20*time.Second)))
}

// TestSessionRecordThatDropsARoleIsPublished: a heartbeat that vouches is
// not a change of the role (followers look the session up when they
// wake), but one that excludes the role, or the session end, is: the
// role's followers hear at once that it is vacant, as of a release.
func TestSessionRecordThatDropsARoleIsPublished(t *testing.T) {
	const nparts = 4
	c := testcluster.Start(t, testcluster.Options{Partitions: nparts})
	role, member := sessionRoles(t, nparts)
	tr := c.Transport(t)
	v, _ := runView(t, c.Config, Options{Authors: tr.Authors(), Describe: tr.Describe})
	ctx := testCtx(t)
	s, err := tr.StartSession(ctx, member, "inc1")
	require.NoError(t, err)
	other := codec.Role("other-role")
	for _, r := range []codec.Role{role, other} {
		tok, err := tr.AcquireEpoch(ctx, r)
		require.NoError(t, err)
		require.NoError(t, leaseErr(tr.WriteLease(ctx, r, tok, sessionLease(tok, s, member, time.Minute))))
	}
	caughtUp(t, v)
	follow := v.Follow(ctx, role)
	next := func() rolestate.State {
		t.Helper()
		select {
		case st := <-follow:
			return st
		case <-time.After(10 * time.Second):
			t.Fatal("no state followed")
		}
		return rolestate.State{}
	}
	first := next()
	require.True(t, first.Live(time.Now()))

	require.NoError(t, tr.Heartbeat(ctx, sessionBeat(s, member, time.Minute)))
	require.NoError(t, tr.Heartbeat(ctx, sessionBeat(s, member, time.Minute, other)))
	caughtUp(t, v)
	select {
	case st := <-follow:
		t.Fatalf("a heartbeat that does not drop the role was published: %+v", st.Session)
	case <-time.After(200 * time.Millisecond):
	}

	require.NoError(t, tr.Heartbeat(ctx, codec.Heartbeat{Member: member, Session: s, End: true}))
	st := next()
	assert.Equal(t, rolestate.Dropped, st.SessionVouch())
	assert.False(t, st.Live(time.Now()), "the session end releases the role")
}

// TestMemberKilledMidHeartbeatHoldsBackItsSessionPartition: a member
// killed in the middle of a heartbeat leaves a transaction open in its
// session partition until the coordinator aborts it, and read_committed
// readers see nothing there after it meanwhile: another member's
// heartbeats in that partition may be hidden. A confirmation of a role
// whose lease names that other member's session reports the open
// transaction (held back: the processor's frozen-partition rule then
// keeps candidates from judging expiry on frozen time); a role whose
// lease names the dead member's own session is not held back by it (no
// later heartbeat of that session can hide behind its own open
// transaction). Once the transaction times out, nothing is held back.
func TestMemberKilledMidHeartbeatHoldsBackItsSessionPartition(t *testing.T) {
	const nparts = 4
	c := testcluster.Start(t, testcluster.Options{Partitions: nparts})
	// Two members whose session records share a partition, and two roles
	// outside it.
	var dead, live codec.MemberID
	for i := 0; i < 64 && live == ""; i++ {
		m := codec.MemberID(fmt.Sprintf("m%d", i))
		switch {
		case dead == "":
			dead = m
		case codec.SessionPartition(m, nparts) == codec.SessionPartition(dead, nparts):
			live = m
		}
	}
	require.NotEmpty(t, live)
	p := codec.SessionPartition(dead, nparts)
	var roles []codec.Role
	for i := 0; i < 64 && len(roles) < 2; i++ {
		if r := codec.Role(fmt.Sprintf("role-%d", i)); codec.Partition(r, nparts) != p {
			roles = append(roles, r)
		}
	}
	liveRole, deadRole := roles[0], roles[1]
	tr := c.Transport(t)
	v, _ := runView(t, c.Config, Options{Authors: tr.Authors(), Describe: tr.Describe})
	ctx := testCtx(t)

	for _, x := range []struct {
		m codec.MemberID
		r codec.Role
	}{{live, liveRole}, {dead, deadRole}} {
		s, err := tr.StartSession(ctx, x.m, "inc")
		require.NoError(t, err)
		tok, err := tr.AcquireEpoch(ctx, x.r)
		require.NoError(t, err)
		require.NoError(t, leaseErr(tr.WriteLease(ctx, x.r, tok, sessionLease(tok, s, x.m, time.Minute))))
		require.NoError(t, tr.Heartbeat(ctx, sessionBeat(s, x.m, time.Minute)))
	}
	caughtUp(t, v)

	// The dead member's process: its session's transactional id, a
	// heartbeat produced and never committed (killed), a 2s timeout.
	cl := stranger(t, c, kgo.TransactionalID(c.Config.SessionTransactionalID(dead)), kgo.TransactionTimeout(2*time.Second))
	require.NoError(t, cl.BeginTransaction())
	pid, _, err := cl.ProducerID(ctx)
	require.NoError(t, err)
	require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: c.Config.Topic, Partition: p,
		Key: codec.SessionKey(dead).Encode(), Value: []byte("half a heartbeat")}).FirstErr())

	conf, err := v.Confirm(ctx, liveRole)
	require.NoError(t, err)
	assert.Equal(t, pid, conf.OpenProducerID, "another member's session partition is frozen: held back")
	assert.GreaterOrEqual(t, conf.OpenOffset, int64(0))
	conf, err = v.Confirm(ctx, deadRole)
	require.NoError(t, err)
	assert.Equal(t, int64(-1), conf.OpenProducerID, "the session's own open transaction hides none of its heartbeats")

	require.Eventually(t, func() bool {
		conf, err := v.Confirm(ctx, liveRole)
		return err == nil && conf.OpenProducerID == -1
	}, 20*time.Second, 100*time.Millisecond, "the coordinator aborts the dead member's heartbeat at its timeout")
}

// TestSessionRecordsSurviveARestartFromTheStateDir: a view restarted from
// its state dir keeps each member's latest session record (credited from
// when it restored it, as a lease is), and a record read after the
// restart replaces it.
func TestSessionRecordsSurviveARestartFromTheStateDir(t *testing.T) {
	const nparts = 4
	c := testcluster.Start(t, testcluster.Options{Partitions: nparts})
	role, member := sessionRoles(t, nparts)
	tr := c.Transport(t)
	dir := t.TempDir()
	ctx := testCtx(t)
	s, err := tr.StartSession(ctx, member, "inc1")
	require.NoError(t, err)
	tok, err := tr.AcquireEpoch(ctx, role)
	require.NoError(t, err)
	require.NoError(t, leaseErr(tr.WriteLease(ctx, role, tok, sessionLease(tok, s, member, time.Minute))))
	hb := sessionBeat(s, member, time.Minute, "excluded-role")
	require.NoError(t, tr.Heartbeat(ctx, hb))

	v, stop := runView(t, c.Config, Options{StateDir: dir, Authors: tr.Authors(), Describe: tr.Describe})
	caughtUp(t, v)
	require.Eventually(t, func() bool { _, ok, _ := v.Session(ctx, member); return ok }, 10*time.Second, 5*time.Millisecond)
	stop()

	restarted := time.Now()
	v2, _ := runView(t, c.Config, Options{StateDir: dir, Authors: tr.Authors(), Describe: tr.Describe})
	caughtUp(t, v2)
	got, ok, err := v2.Session(ctx, member)
	require.NoError(t, err)
	require.True(t, ok, "the session record was restored")
	assert.Equal(t, hb, got.Heartbeat)
	assert.False(t, got.SeenAt.Before(restarted), "credited from the restore")
	st, err := v2.Role(ctx, role)
	require.NoError(t, err)
	assert.Equal(t, rolestate.Vouched, st.SessionVouch())

	end := codec.Heartbeat{Member: member, Session: s, End: true}
	require.NoError(t, tr.Heartbeat(ctx, end))
	require.Eventually(t, func() bool { got, _, _ := v2.Session(ctx, member); return got.Heartbeat.End }, 10*time.Second, 5*time.Millisecond)
	_, held, err := v2.Holder(ctx, role, time.Time{})
	require.NoError(t, err)
	assert.False(t, held)
}

// TestConfirmWaitsForAHeartbeatsVerdict: a heartbeat under a producer id
// the view has not settled does not count until the coordinator has
// answered; a catch-up, and a confirmation of a role whose lease names
// that session, wait for the verdict rather than answer without the
// heartbeat.
func TestConfirmWaitsForAHeartbeatsVerdict(t *testing.T) {
	const nparts = 4
	c := testcluster.Start(t, testcluster.Options{Partitions: nparts})
	role, member := sessionRoles(t, nparts)
	tr := c.Transport(t)
	release := make(chan struct{})
	describe := func(ctx context.Context, r codec.Role) (codec.Token, bool, error) {
		if _, session := rolestate.SessionMember(r); session {
			select {
			case <-release:
			case <-ctx.Done():
				return codec.Token{}, false, ctx.Err()
			}
		}
		return tr.Describe(ctx, r)
	}
	v, _ := runView(t, c.Config, Options{Authors: rolestate.NewAuthors(), Describe: describe})
	caughtUp(t, v) // the empty topic: lookups answer from now on
	ctx := testCtx(t)
	s, err := tr.StartSession(ctx, member, "inc1")
	require.NoError(t, err)
	tok, err := tr.AcquireEpoch(ctx, role)
	require.NoError(t, err)
	require.NoError(t, leaseErr(tr.WriteLease(ctx, role, tok, sessionLease(tok, s, member, time.Minute))))
	hb := sessionBeat(s, member, time.Minute)
	require.NoError(t, tr.Heartbeat(ctx, hb))
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err = v.WaitCaughtUp(short)
	cancel()
	assert.ErrorIs(t, err, ErrNotCaughtUp, "a catch-up waits for the heartbeat's verdict too")
	_, ok, err := v.Session(ctx, member)
	require.NoError(t, err)
	assert.False(t, ok, "an unverified heartbeat does not count")
	short, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = v.Confirm(short, role)
	cancel()
	assert.ErrorIs(t, err, ErrNotCaughtUp, "a confirmation waits for the verdict")

	close(release)
	conf, err := v.Confirm(ctx, role)
	require.NoError(t, err)
	require.NotNil(t, conf.State.Session)
	assert.Equal(t, hb, conf.State.Session.Heartbeat)
}

// TestCompactionKeepsTheLatestSessionRecord: compaction keeps what the
// liveness rule needs, one session record per member (the latest) and
// one lease per role, so a view that starts after it judges the lease as
// one that read every record: held while the latest heartbeat vouches,
// vacant once the latest record is the session end.
func TestCompactionKeepsTheLatestSessionRecord(t *testing.T) {
	if testcluster.External() {
		t.Skip("compacts the embedded cluster's topic")
	}
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	tr := c.Transport(t)
	ctx := testCtx(t)
	const member, role = codec.MemberID("m1"), codec.Role("compacted")
	s, err := tr.StartSession(ctx, member, "inc1")
	require.NoError(t, err)
	tok, err := tr.AcquireEpoch(ctx, role)
	require.NoError(t, err)
	require.NoError(t, leaseErr(tr.WriteLease(ctx, role, tok, sessionLease(tok, s, member, time.Minute))))
	require.NoError(t, tr.Heartbeat(ctx, sessionBeat(s, member, time.Minute)))
	require.NoError(t, tr.Heartbeat(ctx, sessionBeat(s, member, time.Minute, role))) // an exclusion, later superseded
	last := sessionBeat(s, member, time.Minute)
	require.NoError(t, tr.Heartbeat(ctx, last))
	c.Fake.Compact()
	recs, err := tr.ReadSession(ctx, member)
	require.NoError(t, err)
	require.Len(t, recs, 1, "compaction kept one session record of the member")

	fresh := func() (*View, func()) {
		v, stop := runView(t, c.Config, Options{Authors: rolestate.NewAuthors(), Describe: tr.Describe})
		caughtUp(t, v)
		require.Eventually(t, func() bool { _, ok, _ := v.Session(ctx, member); return ok }, 10*time.Second, 5*time.Millisecond)
		return v, stop
	}
	v, stop := fresh()
	got, _, err := v.Session(ctx, member)
	require.NoError(t, err)
	assert.Equal(t, last, got.Heartbeat, "the latest heartbeat survives compaction")
	_, held, err := v.Holder(ctx, role, time.Time{})
	require.NoError(t, err)
	assert.True(t, held)
	stop()

	require.NoError(t, tr.Heartbeat(ctx, codec.Heartbeat{Member: member, Session: s, End: true}))
	c.Fake.Compact()
	v, _ = fresh()
	got, _, err = v.Session(ctx, member)
	require.NoError(t, err)
	assert.True(t, got.Heartbeat.End, "the session end replaces the heartbeats")
	_, held, err = v.Holder(ctx, role, time.Time{})
	require.NoError(t, err)
	assert.False(t, held, "and releases the lease for a view that starts after compaction")
}
