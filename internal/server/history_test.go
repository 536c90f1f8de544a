package server

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/testcluster"
	"github.com/krabka/krole/rolestate"
	"github.com/krabka/krole/view"
)

func heldRow(role codec.Role, m codec.MemberID, epoch int16) Row {
	return Row{Role: role, Holder: &Holder{Member: m, Token: codec.Token{ProducerID: 7, Epoch: epoch}, Fence: 10 * int64(epoch), GrantedAt: 1000, Deadline: 11000, VouchedAt: 1000}}
}

// TestHistoryKinds: the history names each change of holder by what
// preceded it, ignores renewals, and stays within its window and its
// bound of transitions, keeping the holder at the window's start.
func TestHistoryKinds(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	h := NewHistory(time.Minute, 6, func() time.Time { return now })
	step := func(r Row) { now = now.Add(time.Second); h.record(r, false) }

	h.record(heldRow("db", "m1", 0), true)
	step(heldRow("db", "m1", 0)) // a renewal: nothing
	released := heldRow("db", "m1", 0)
	released.Holder.GrantedAt, released.Holder.Deadline, released.Holder.Expired = 0, 1, true
	step(released)
	step(heldRow("db", "m2", 1))
	expired := heldRow("db", "m2", 1)
	expired.Holder.Expired = true
	step(expired)
	step(heldRow("db", "m3", 2))
	step(heldRow("db", "m1", 3)) // a new token while m3 looked live
	kinds := func() []string {
		var ks []string
		for _, tr := range h.Role("db").Transitions {
			ks = append(ks, tr.Kind)
		}
		return ks
	}
	assert.Equal(t, []string{TransitionInitial, TransitionReleased, TransitionHandover, TransitionExpired, TransitionFailover, TransitionTakeover}, kinds())
	rh := h.Role("db")
	assert.Nil(t, rh.Transitions[1].Holder)
	assert.Equal(t, &HistoryHolder{Member: "m3", Token: codec.Token{ProducerID: 7, Epoch: 2}, Fence: 20}, rh.Transitions[4].Holder)

	step(Row{Role: "db"}) // the lease record went away
	assert.Equal(t, TransitionVacant, kinds()[len(kinds())-1])
	assert.Len(t, kinds(), 6, "at most 6 transitions")

	// Two minutes later the window holds nothing new: only the holder at
	// its start remains.
	now = now.Add(2 * time.Minute)
	assert.Equal(t, []string{TransitionVacant}, kinds())
	assert.Equal(t, now.Add(-time.Minute).UnixMilli(), h.Role("db").Since)

	h.record(Row{Role: "quiet"}, false)
	assert.Empty(t, h.Role("quiet").Transitions, "a role never held has no history")
}

// TestHistoryEndpoint: GET /v1/roles/{role}/history answers the history
// a History following the view recorded: the failover the test causes.
func TestHistoryEndpoint(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	m := c.Members(t)
	m.Register("db", "m1")
	m.Register("db", "m2")
	l1 := m.Lease("db", "m1", time.Second)
	f1 := m.LastLease
	v := runView(t, c)
	caughtUp(t, v)
	hist := NewHistory(time.Hour, 0, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- hist.Run(ctx, v) }()
	t.Cleanup(func() { cancel(); assert.NoError(t, <-done) })
	h := newHandler(t, v, Options{History: hist, Source: Source{Brokers: c.Config.Brokers, Topic: c.Config.Topic}})

	var rh RoleHistory
	require.Eventually(t, func() bool { // m1's lease runs out
		rec := get(t, h, "/v1/roles/db/history")
		require.Equal(t, http.StatusOK, rec.Code)
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &rh))
		return len(rh.Transitions) == 2
	}, 20*time.Second, 20*time.Millisecond)
	l2 := m.Lease("db", "m2", time.Hour)
	f2 := m.LastLease
	require.Greater(t, f2, f1)
	require.Eventually(t, func() bool {
		require.NoError(t, json.Unmarshal(get(t, h, "/v1/roles/db/history").Body.Bytes(), &rh))
		return len(rh.Transitions) == 3
	}, 20*time.Second, 20*time.Millisecond)
	assert.Equal(t, codec.Role("db"), rh.Role)
	assert.Equal(t, TransitionInitial, rh.Transitions[0].Kind)
	assert.Equal(t, &HistoryHolder{Member: "m1", Token: l1.Token, Fence: f1}, rh.Transitions[0].Holder)
	assert.Equal(t, TransitionExpired, rh.Transitions[1].Kind)
	tr := rh.Transitions[2]
	assert.Equal(t, Transition{At: tr.At, Kind: TransitionFailover, Cause: CauseFailover,
		Holder: &HistoryHolder{Member: "m2", Token: l2.Token, Fence: f2}, From: &HistoryHolder{Member: "m1", Token: l1.Token, Fence: f1},
		UnheldMS: tr.At - rh.Transitions[1].At, VouchedAt: tr.At, LeaseMS: rolestate.MaxLeaseSpan.Milliseconds()}, tr)
	assert.Equal(t, []Outage{}, rh.Outages)

	var src sourceBody
	require.NoError(t, json.Unmarshal(get(t, h, "/v1/source").Body.Bytes(), &src))
	assert.Equal(t, sourceBody{Source: Source{Brokers: c.Config.Brokers, Topic: c.Config.Topic}, HistoryWindowMS: 3_600_000}, src)
	assert.Equal(t, http.StatusNotFound, get(t, newHandler(t, v, Options{}), "/v1/roles/db/history").Code)
}

// TestHistoryCauses: each change of holder names the holder before it,
// its cause (failover, handover, step-down, fenced) and how long the role
// was unheld; a holding notes its last renewal; a release that follows
// the removal of the holder's registration is a step-down, one that
// precedes it (a member leaving) a handover; the same holder and token
// after its lease looked run out is "resumed", not a failover; a new
// token in the last quarter of an unrenewed lease is a failover, before
// that a fence.
func TestHistoryCauses(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	h := NewHistory(time.Hour, 0, func() time.Time { return now })
	at := func(ms int64, r Row) { now = time.UnixMilli(1_000_000 + ms); h.record(r, false) }
	held := func(m codec.MemberID, epoch int16, granted int64, cands ...codec.MemberID) Row {
		r := heldRow("db", m, epoch)
		r.Holder.GrantedAt, r.Holder.Deadline, r.Holder.VouchedAt = granted, granted+3000, granted
		for i, c := range cands {
			r.Candidates = append(r.Candidates, rolestate.Candidate{Member: c, Offset: int64(i), Rank: i})
		}
		return r
	}
	released := func(m codec.MemberID, epoch int16, cands ...codec.MemberID) Row {
		r := held(m, epoch, 0, cands...)
		r.Holder.Deadline, r.Holder.Expired = 1, true
		return r
	}
	expired := func(m codec.MemberID, epoch int16, cands ...codec.MemberID) Row {
		r := held(m, epoch, 5, cands...)
		r.Holder.Expired = true
		return r
	}
	h.record(held("m1", 0, 10, "m1", "m2"), true)
	at(600, held("m1", 0, 610, "m1", "m2")) // renewals
	at(1200, held("m1", 0, 1210, "m1", "m2"))
	at(4200, expired("m1", 0, "m1", "m2"))    // m1 died: its lease ran out
	at(4500, held("m2", 1, 4500, "m1", "m2")) // m2 takes over after 300 ms
	at(5000, held("m2", 1, 4500, "m2"))       // m2 pruned m1: no renewal
	at(6000, held("m2", 1, 4500, "m3", "m2")) // m2's registration removed (the operator's step-down)...
	at(6000, held("m2", 1, 4500, "m3"))       // ... m2 no longer a candidate while it holds
	at(6010, released("m2", 1, "m3"))
	at(6030, held("m3", 2, 6030, "m3", "m2"))
	at(7000, released("m3", 2, "m3", "m2")) // m3 leaves: it releases, then deregisters
	at(7010, released("m3", 2, "m2"))
	at(7020, held("m2", 3, 7020, "m2"))
	at(8000, held("m1", 4, 8000, "m2", "m1"))   // a newer token while m2's lease looked live
	at(12000, expired("m1", 4, "m2", "m1"))     // m1's renewals not seen (a stalled view) ...
	at(13000, held("m1", 4, 12500, "m2", "m1")) // ... then one under the same token
	at(14000, held("m1", 4, 14000, "m2", "m1")) // a renewal
	at(16300, held("m2", 5, 16300, "m2", "m1")) // m1 silent 2.3 s of its 3 s: m2's view saw the lease run out first

	rh := h.Role("db")
	type got struct {
		Kind, Cause string
		From, To    codec.MemberID
		UnheldMS    int64
	}
	var gots []got
	for _, tr := range rh.Transitions {
		g := got{Kind: tr.Kind, Cause: tr.Cause, UnheldMS: tr.UnheldMS}
		if tr.From != nil {
			g.From = tr.From.Member
		}
		if tr.Holder != nil {
			g.To = tr.Holder.Member
		}
		gots = append(gots, g)
	}
	assert.Equal(t, []got{
		{Kind: TransitionInitial, To: "m1"},
		{Kind: TransitionExpired, Cause: CauseFailover, From: "m1"},
		{Kind: TransitionFailover, Cause: CauseFailover, From: "m1", To: "m2", UnheldMS: 300},
		{Kind: TransitionReleased, Cause: CauseStepDown, From: "m2"},
		{Kind: TransitionHandover, Cause: CauseStepDown, From: "m2", To: "m3", UnheldMS: 20},
		{Kind: TransitionReleased, Cause: CauseHandover, From: "m3"},
		{Kind: TransitionHandover, Cause: CauseHandover, From: "m3", To: "m2", UnheldMS: 20},
		{Kind: TransitionTakeover, Cause: CauseFenced, From: "m2", To: "m1"},
		{Kind: TransitionExpired, Cause: CauseFailover, From: "m1"},
		{Kind: TransitionResumed, Cause: CauseResumed, From: "m1", To: "m1", UnheldMS: 1000},
		{Kind: TransitionTakeover, Cause: CauseFailover, From: "m1", To: "m2"},
	}, gots)
	first := rh.Transitions[0]
	assert.Equal(t, int64(1_001_200), first.VouchedAt, "m1's last renewal seen")
	assert.Equal(t, int64(600), first.RenewMS, "between its last two renewals")
	assert.Equal(t, int64(3000), first.LeaseMS)
	assert.Equal(t, int64(1_004_500), rh.Transitions[2].VouchedAt, "m2's lease was never renewed: its grant")
	assert.Zero(t, rh.Transitions[2].RenewMS)
	assert.False(t, rh.Transitions[1].DuringOutage, "no outage")
	assert.Equal(t, []Outage{}, rh.Outages)
}

// TestHistoryOutages: the history notes when the view could not reach the
// cluster, from its last contact to the next, and marks the leases that
// ran out meanwhile as judged during the outage.
func TestHistoryOutages(t *testing.T) {
	start := time.UnixMilli(1_000_000)
	now := start
	h := NewHistory(time.Minute, 0, func() time.Time { return now })
	h.started = start
	h.noteHealth(view.Health{Healthy: true, LastContact: now})
	h.record(heldRow("db", "m1", 0), true)
	now = start.Add(time.Second)
	h.record(heldRow("cron", "c1", 0), false) // a lease of 10s

	now = start.Add(8 * time.Second) // no contact since 2s: unreachable
	lost := start.Add(2 * time.Second)
	expired := heldRow("db", "m1", 0)
	expired.Holder.Expired = true
	h.record(expired, false) // m1's lease ran out as this server saw it, at 8s
	h.noteHealth(view.Health{Unreachable: true, LastContact: lost})
	rh := h.Role("db")
	assert.Equal(t, []Outage{{From: lost.UnixMilli()}}, rh.Outages, "an outage under way since the last contact")
	require.Len(t, rh.Transitions, 2)
	assert.True(t, rh.Transitions[1].DuringOutage, "the lease ran out while the cluster was unreachable")

	now = start.Add(20 * time.Second)
	h.noteHealth(view.Health{Unreachable: true, LastContact: lost}) // still
	back := start.Add(19 * time.Second)
	h.noteHealth(view.Health{Healthy: true, LastContact: back})
	h.record(heldRow("db", "m1", 0), false) // m1 renewed under the same token
	rh = h.Role("db")
	assert.Equal(t, []Outage{{From: lost.UnixMilli(), To: back.UnixMilli()}}, rh.Outages)
	assert.Equal(t, TransitionResumed, rh.Transitions[2].Kind, "not a failover")
	assert.Equal(t, rh.Outages, h.Role("other").Outages, "the same outages for every role")

	// cron's holder, last seen renewing before the outage, is replaced
	// after it, before this server saw its lease run out: a failover
	// whose silence overlaps the outage, so not a holder seen dying.
	now = start.Add(21 * time.Second)
	h.record(heldRow("cron", "c2", 1), false)
	cron := h.Role("cron")
	require.Len(t, cron.Transitions, 2)
	assert.Equal(t, CauseFailover, cron.Transitions[1].Cause, "c1 was silent for 20s of its 10s lease")
	assert.True(t, cron.Transitions[1].DuringOutage, "c1's silence, from 1s to 21s, overlaps the outage")
	assert.False(t, rh.Transitions[0].DuringOutage)

	now = start.Add(2 * time.Minute) // the outage is out of the window
	assert.Equal(t, []Outage{}, h.Role("db").Outages)
	h.noteHealth(view.Health{Healthy: true, LastContact: now})
	assert.Empty(t, h.outages, "dropped once out of the window")
}

// TestSessionEndIsARelease: a lease whose holder's member session ended
// (the record a leaving member writes instead of a release per role) is
// a release in a row (Dropped, Released, expired) and in the history (a
// handover, not a failover).
func TestSessionEndIsARelease(t *testing.T) {
	sess := codec.Session{ProducerID: 9, Epoch: 0, Nonce: "n1"}
	l := codec.Lease{Member: "m1", Token: codec.Token{ProducerID: 7, Epoch: 1}, GrantedAt: 1000, Deadline: 4000, Session: &sess}
	st := rolestate.State{Role: "db", Lease: &l, LeaseSeenAt: time.UnixMilli(1000),
		Session: &rolestate.SessionSeen{Heartbeat: codec.Heartbeat{Member: "m1", Session: sess, End: true}, SeenAt: time.UnixMilli(1500)}}
	r := NewRow(st, time.UnixMilli(1600))
	require.NotNil(t, r.Holder)
	assert.True(t, r.Holder.Dropped)
	assert.True(t, r.Holder.Released())
	assert.True(t, r.Holder.Expired)

	st.Session.Heartbeat = codec.Heartbeat{Member: "m1", Session: sess, GrantedAt: 1400, Deadline: 4400}
	live := NewRow(st, time.UnixMilli(1600))
	assert.False(t, live.Holder.Dropped, "a heartbeat that vouches")
	assert.False(t, live.Holder.Released())

	now := time.UnixMilli(1600)
	h := NewHistory(time.Hour, 0, func() time.Time { return now })
	h.record(live, true)
	now = time.UnixMilli(1700)
	h.record(r, false)
	ts := h.Role("db").Transitions
	require.Len(t, ts, 2)
	assert.Equal(t, TransitionReleased, ts[1].Kind)
	assert.Equal(t, CauseHandover, ts[1].Cause)
}

// TestHistoryCountsHeartbeats: a holding renewed by its member session's
// heartbeats alone (the lease record never written again) notes each
// renewal the rows bring, by when the view saw it; a holder that dies is
// silent from its last heartbeat, not from its lease record.
func TestHistoryCountsHeartbeats(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	h := NewHistory(time.Hour, 0, func() time.Time { return now })
	row := func(renewed, seen int64, expired bool) Row {
		r := heldRow("db", "m1", 0) // the lease: granted at 1000
		r.Holder.VouchedAt, r.Holder.Renewed, r.Holder.Expired = renewed, time.UnixMilli(seen), expired
		return r
	}
	h.record(row(1000, 1_000_000, false), true)
	for _, ms := range []int64{10_000, 20_000, 30_000} {
		now = time.UnixMilli(1_000_000 + ms)
		h.record(row(1000+ms, 1_000_000+ms-500, false), false) // a heartbeat seen 500ms before the row
	}
	tr := h.Role("db").Transitions
	require.Len(t, tr, 1)
	assert.Equal(t, int64(1_029_500), tr[0].VouchedAt, "the latest heartbeat, when the view saw it")
	assert.Equal(t, int64(10_000), tr[0].RenewMS)

	// m1 dies after one more heartbeat, seen at 1_035_000; its lease runs
	// out ten seconds later, and m2 takes over.
	now = time.UnixMilli(1_045_000)
	h.record(row(36_000, 1_035_000, true), false)
	now = time.UnixMilli(1_045_300)
	h.record(heldRow("db", "m2", 1), false)
	tr = h.Role("db").Transitions
	require.Len(t, tr, 3)
	assert.Equal(t, int64(1_035_000), tr[0].VouchedAt, "m1's last heartbeat, from the row that showed it run out")
	assert.Equal(t, TransitionFailover, tr[2].Kind)
	assert.Equal(t, int64(10_300), tr[2].At-tr[0].VouchedAt, "m1 silent about a lease, not since its lease record")
}
