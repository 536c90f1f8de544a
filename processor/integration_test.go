package processor_test

// Integration tests of the Member on the real view and transport. The
// kit they run on, and what it records and checks, is in
// kit_integration_test.go.

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
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/processor"
	"github.com/krabka/krole/rolestate"
)

// Three members race for one role through several handovers with a
// Stagger of 1ms, so that neighbouring candidates challenge together and
// the broker, not the schedule, decides who wins. What must hold:
//
//   - the broker's fence: no member's lease write succeeds after a newer
//     token was minted (checkFence). Two members may both hold the role by
//     their own events for a moment (a challenge that wrote its lease and
//     was then fenced by a neighbour's AcquireEpoch), but only one of them
//     can write;
//   - at every sample, at most one member holds the role under the token
//     that Describe names (the current one);
//   - once things settle, exactly one member holds it, under the token
//     Describe names, and the observer's table shows that member and token.
func TestIntegrationOneHolderAtATime(t *testing.T) {
	e := newEnv(t, itTxnTimeout)
	role := codec.Role("leader")
	s := itSettings()
	s.Stagger = time.Millisecond
	ids := []codec.MemberID{"node-a", "node-b", "node-c"}
	nodes := map[codec.MemberID]*node{}
	for _, id := range ids {
		nodes[id] = e.start(id, []codec.Role{role}, s, nil)
	}

	// The sampler: members holding by their events, the coordinator's
	// token, members holding again; a member counts when it held the
	// current token in both readings. It also counts the samples in which
	// more than one member held the role by its own events (a race, or a
	// fenced holder that has not noticed yet): allowed, and reported.
	stop := make(chan struct{})
	var samples, overlaps int
	var samplerDone sync.WaitGroup
	samplerDone.Add(1)
	go func() {
		defer samplerDone.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			before := e.rec.holders(role)
			cur, ok, err := e.probe.Describe(context.Background(), role)
			if err != nil || !ok {
				continue
			}
			after := e.rec.holders(role)
			n := 0
			for m, tok := range before {
				if tok == cur && after[m] == cur {
					n++
				}
			}
			samples++
			if len(before) > 1 {
				overlaps++
			}
			if n > 1 {
				t.Errorf("%d members hold %s under the current token %s", n, role, cur)
			}
		}
	}()
	var stopOnce sync.Once
	stopSampler := func() {
		stopOnce.Do(func() {
			close(stop)
			samplerDone.Wait()
		})
	}
	t.Cleanup(stopSampler) // also when the test fails early

	const rounds = 8
	prev := codec.Token{}
	for i := range rounds {
		holder, tok := e.settled(role, 10*time.Second)
		assert.True(t, later(tok, prev), "round %d: a new term has a newer token (%s after %s)", i, tok, prev)
		prev = tok
		e.agree(role, holder, tok)
		if i == rounds-1 {
			break
		}
		require.NoError(t, nodes[holder].m.Resign(e.ctx(10*time.Second), role), "round %d: %s resigns", i, holder)
		// The next holder is a different term (a resigning member queues
		// again at the back, so it may come back, under a new token).
		await(t, 10*time.Second, "a new term after the resignation", func() bool {
			hs := e.rec.holders(role)
			if len(hs) != 1 {
				return false
			}
			for _, tk := range hs {
				return tk != tok
			}
			return false
		})
	}
	stopSampler()
	assert.Positive(t, samples, "the sampler ran")
	e.rec.checkFence(t)
	// Every member saw its own turns paired: Elected and Revoked alternate.
	for _, id := range ids {
		var open bool
		e.rec.mu.Lock()
		for _, ev := range e.rec.events {
			if ev.Member != id || ev.Role != role {
				continue
			}
			switch ev.Kind {
			case processor.Elected:
				assert.False(t, open, "%s: Elected twice without Revoked", id)
				open = true
			case processor.Revoked:
				assert.True(t, open, "%s: Revoked without Elected", id)
				open = false
			}
		}
		e.rec.mu.Unlock()
	}
	// How often two members held the role at once by their own events
	// (in the order the events were received): allowed, and reported.
	e.rec.mu.Lock()
	overlapping, cur := 0, map[codec.MemberID]bool{}
	for _, ev := range e.rec.events {
		switch ev.Kind {
		case processor.Elected:
			cur[ev.Member] = true
			if len(cur) > 1 {
				overlapping++
			}
		case processor.Revoked:
			delete(cur, ev.Member)
		}
	}
	e.rec.mu.Unlock()
	t.Logf("%d samples (%d with two members holding by their events), %d terms (%d began while another member still held by its events), %d tokens minted",
		samples, overlaps, len(e.rec.find(processor.Elected, role, nil)), overlapping, len(e.rec.acquires))
}

// A holder that crashes (its context ends with KeepOnExit: it writes
// nothing, its lease runs to its deadline) is replaced by its successor
// (the candidate of the highest split score), which challenges once its
// clock passes the deadline: never before the deadline, and within
// Stagger (+ slack) after it, because the crashed member named in the
// lease ranks last and the successor is rank 0.
// The new holder prunes the crashed member's registration. Then the new
// holder crashes too, and the last member takes over: the candidates never
// pile up.
func TestIntegrationCrashFailover(t *testing.T) {
	e := newEnv(t, itTxnTimeout)
	role := codec.Role("scheduler")
	s := itSettings()
	s.KeepOnExit = true
	a, b, _ := e.holderAndCandidate(role, s)
	c := e.candidate("node-c", role, s, nil)

	crash := func(dead, next *node, left []codec.MemberID) {
		t.Helper()
		crashed := time.Now()
		dead.stop(t)()
		last, ok := e.rec.lastWrite(role, dead.id)
		require.True(t, ok)
		deadline := time.UnixMilli(last.Lease.Deadline)
		assert.False(t, last.Lease.Released(), "a member leaving with KeepOnExit writes no release")

		el := awaitElected(t, e.rec, role, next.id, crashed, s.LeaseDuration+s.Stagger+slack)
		took := el.At.Sub(crashed)
		t.Logf("%s crashed; %s elected %v later (lease deadline %v after the crash)", dead.id, next.id, took.Round(time.Millisecond), deadline.Sub(crashed).Round(time.Millisecond))
		// Never before the crashed holder's deadline (one clock here).
		assert.GreaterOrEqual(t, el.At.UnixMilli(), last.Lease.Deadline, "the next holder challenged before the crashed holder's lease deadline")
		// Rank 0 challenges at the deadline: within Stagger + slack.
		assert.LessOrEqual(t, el.At.Sub(deadline), s.Stagger+slack, "the next holder took too long after the deadline")
		// The crashed holder's own deadline lies within a lease of the crash.
		assert.LessOrEqual(t, took, s.LeaseDuration+s.Stagger+slack)
		e.agree(role, next.id, el.Token)
		await(t, 5*time.Second, fmt.Sprintf("candidates %v after pruning %s", left, dead.id), func() bool {
			return slices.Equal(e.candidates(role), left)
		})
	}
	first, second := b, c
	if topScore(role, b.id, c.id) == c.id {
		first, second = c, b
	}
	crash(a, first, []codec.MemberID{"node-b", "node-c"})
	crash(first, second, []codec.MemberID{second.id})
	for _, id := range []codec.MemberID{a.id, first.id} {
		assert.Len(t, e.rec.find(processor.Elected, role, func(ev stamped) bool { return ev.Member == id }), 1, "%s held one term", id)
	}
	e.rec.checkFence(t)
}

// A holder whose context ends normally resigns: it stops, writes the
// release under its token and deregisters, and the next candidate takes
// over at once, before the old lease's deadline (LeaseDuration -
// HeartbeatInterval at least after the leave began).
func TestIntegrationGracefulHandover(t *testing.T) {
	e := newEnv(t, itTxnTimeout)
	role := codec.Role("compactor")
	s := itSettings()
	a, b, _ := e.holderAndCandidate(role, s)
	e.awaitLive(role, a, b) // so the logged handover time is not node-b's view starting

	left := time.Now()
	live, ok := e.rec.lastWrite(role, a.id)
	require.True(t, ok)
	a.stop(t)()
	el := awaitElected(t, e.rec, role, b.id, left, s.LeaseDuration)
	t.Logf("handover took %v", el.Got.Sub(left))
	assert.Less(t, el.At.UnixMilli(), live.Lease.Deadline, "the next holder waited for the old lease's deadline")

	rev := e.rec.find(processor.Revoked, role, func(ev stamped) bool { return ev.Member == a.id })
	require.Len(t, rev, 1)
	assert.Equal(t, processor.ReasonContextEnded, rev[0].Reason)
	assert.False(t, rev[0].At.After(el.At), "the old holder stopped before the new one was elected")
	end, ok := e.rec.lastBeat(a.id)
	require.True(t, ok)
	assert.True(t, end.hb.End, "the leaving holder's last session record is its end, which releases its leases")
	assert.True(t, end.start.Before(el.Got), "the new term began after the session end was sent")
	e.agree(role, b.id, el.Token)
	assert.Equal(t, []codec.MemberID{"node-b"}, e.candidates(role), "the leaving member deregistered")
	e.rec.checkFence(t)
}

// An outsider's AcquireEpoch on the role's transactional id fences the
// holder: the member session's next round (DescribeTransactions) finds
// the token moved, the holder is revoked (fenced) within a HeartbeatInterval
// (+ slack), and its work's context is cancelled no later than the
// Revoked event. The role is taken again, under a token newer than the
// outsider's, once the holder has stopped vouching for it.
func TestIntegrationFencedByOutsideEpoch(t *testing.T) {
	e := newEnv(t, itTxnTimeout)
	role := codec.Role("billing")
	s := itSettings()
	type run struct {
		ctx context.Context
		tok codec.Token
	}
	var mu sync.Mutex
	var runs []run
	started := make(chan struct{}, 8)
	work := func(ctx context.Context, h processor.Held) error {
		mu.Lock()
		runs = append(runs, run{ctx, h.Token})
		mu.Unlock()
		started <- struct{}{}
		<-ctx.Done()
		return nil
	}
	// At the Revoked event (under the recorder's lock), the context of the
	// work under the revoked token must be done already; and so it must be
	// at any member's Elected under a later token. The fenced holder's
	// session cancels the work before its heartbeat stops vouching, which
	// is what lets a successor in; its own Revoked event may come later.
	var atRevoke, atNext []error
	e.rec.hook = func(ev processor.Event) {
		mu.Lock()
		defer mu.Unlock()
		if len(runs) == 0 {
			return
		}
		switch {
		case ev.Kind == processor.Revoked && ev.Member == "node-a":
			for _, r := range runs {
				if r.tok == ev.Token {
					atRevoke = append(atRevoke, r.ctx.Err())
				}
			}
		case ev.Kind == processor.Elected && later(ev.Token, runs[0].tok):
			atNext = append(atNext, runs[0].ctx.Err())
		}
	}
	a, tokA := e.holder("node-a", role, s, work)
	select {
	case <-started:
	case <-time.After(5 * time.Second):
		t.Fatal("work did not start")
	}
	mu.Lock()
	first := runs[0]
	mu.Unlock()
	require.Equal(t, tokA, first.tok)
	b := e.start("node-b", []codec.Role{role}, s, work)
	e.awaitCandidate(role, b.id)

	fencedAt := time.Now()
	tokX, err := e.probe.AcquireEpoch(e.ctx(10*time.Second), role)
	require.NoError(t, err)
	require.True(t, later(tokX, tokA))
	assert.Equal(t, tokX, e.describe(role))

	rev := awaitRevoked(t, e.rec, role, a.id, s.HeartbeatInterval+s.TransactionTimeout+slack, "node-a revoked")
	t.Logf("revoked %v after the outside AcquireEpoch", rev.Got.Sub(fencedAt))
	assert.Equal(t, processor.ReasonFenced, rev.Reason)
	assert.ErrorIs(t, rev.Err, fencing.ErrFenced)
	assert.Equal(t, tokA, rev.Token)
	select {
	case <-first.ctx.Done():
	default:
		t.Error("work's context is not cancelled after Revoked")
	}
	e.rec.mu.Lock()
	mu.Lock()
	assert.Equal(t, []error{context.Canceled}, atRevoke, "work's context at the Revoked event")
	mu.Unlock()
	e.rec.mu.Unlock()

	// The outsider wrote no lease. node-a, fenced, stops vouching for
	// the role (its next heartbeat excludes it), so the role is vacant
	// once node-a has stopped, and a member takes it under a newer token.
	holder, tok := e.soleHolder(role, s.LeaseDuration+s.Stagger+slack)
	assert.True(t, later(tok, tokX), "the next term's token %s is newer than the outsider's %s", tok, tokX)
	el := e.rec.find(processor.Elected, role, func(ev stamped) bool { return ev.Token == tok })
	require.Len(t, el, 1)
	e.rec.mu.Lock()
	mu.Lock()
	assert.Equal(t, []error{context.Canceled}, atNext, "the fenced work's context at the next Elected")
	mu.Unlock()
	e.rec.mu.Unlock()
	e.agree(role, holder, tok)
	e.rec.checkFence(t)
}

// Work runs only while its member holds the role. Guaranteed locally, and
// asserted here:
//
//   - work starts after its member's Elected for the token it is given;
//   - its context is cancelled before the member reports Revoked (for any
//     reason): at the Revoked event, the context is done;
//   - a member never runs two works of a role at once: the next term's
//     work starts only after the previous one returned;
//   - on a resignation the member waits for work to return (up to its
//     local deadline) before it writes the release, and the next member
//     challenges only after reading the release: the old work has
//     returned before the new holder is elected, across members.
//
// Not guaranteed, and not asserted: on a fence or a crash, that the old
// work has stopped before another member's work starts. The old work's
// context is cancelled by HeartbeatDeadline after its last successful write
// at the latest, which is before the lease deadline when the clocks agree,
// but a work that ignores its context runs on; only the broker's fence
// (held.Token with every write) stops its writes.
func TestIntegrationWorkOnlyWhileHolding(t *testing.T) {
	e := newEnv(t, itTxnTimeout)
	role := codec.Role("indexer")
	s := itSettings()
	type run struct {
		member      codec.MemberID
		tok         codec.Token
		ctx         context.Context
		start, stop time.Time
	}
	var mu sync.Mutex
	var runs []*run
	work := func(member codec.MemberID) processor.Work {
		return func(ctx context.Context, h processor.Held) error {
			r := &run{member: member, tok: h.Token, ctx: ctx, start: time.Now()}
			assert.Equal(t, member, h.Member)
			mu.Lock()
			runs = append(runs, r)
			mu.Unlock()
			<-ctx.Done()
			mu.Lock()
			r.stop = time.Now()
			mu.Unlock()
			return nil
		}
	}
	var violations []string
	e.rec.hook = func(ev processor.Event) {
		if ev.Kind != processor.Revoked {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		for _, r := range runs {
			if r.member == ev.Member && r.tok == ev.Token && r.ctx.Err() == nil {
				violations = append(violations, fmt.Sprintf("%s's work under %s still running at Revoked (%s)", ev.Member, ev.Token, ev.Reason))
			}
		}
	}
	nodes := map[codec.MemberID]*node{}
	for _, id := range []codec.MemberID{"node-a", "node-b", "node-c"} {
		nodes[id] = e.start(id, []codec.Role{role}, s, work(id))
		e.soleHolder(role, 10*time.Second)
	}
	await(t, 5*time.Second, "three candidates", func() bool { return len(e.candidates(role)) == 3 })

	// Two resignations, then a fence.
	type term struct {
		member codec.MemberID
		tok    codec.Token
	}
	var resigned []term
	for range 2 {
		h, tok := e.soleHolder(role, 10*time.Second)
		// Resign once the term's work runs: a holding that ends before its
		// work could start gets no call (Work's doc), and this test checks
		// that the work returned before the next term (the race
		// detector's run resigned one before its work started).
		await(t, 5*time.Second, "the term's work started", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return slices.ContainsFunc(runs, func(r *run) bool { return r.member == h && r.tok == tok })
		})
		require.NoError(t, nodes[h].m.Resign(e.ctx(10*time.Second), role))
		resigned = append(resigned, term{h, tok})
		await(t, 10*time.Second, "a new term", func() bool {
			hs := e.rec.holders(role)
			return len(hs) == 1 && hs[h] == codec.Token{}
		})
	}
	h, tok := e.soleHolder(role, 10*time.Second)
	tokX, err := e.probe.AcquireEpoch(e.ctx(10*time.Second), role)
	require.NoError(t, err)
	await(t, s.HeartbeatInterval+s.TransactionTimeout+slack, "the fenced holder revoked", func() bool {
		return len(e.rec.find(processor.Revoked, role, func(ev stamped) bool { return ev.Member == h && ev.Token == tok })) == 1
	})
	_, last := e.soleHolder(role, s.LeaseDuration+s.Stagger+slack)
	assert.True(t, later(last, tokX), "the term after the fence is newer than the outsider's token")
	// Wait for the last term's work to start, then stop everything.
	await(t, 5*time.Second, "the last term's work started", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.ContainsFunc(runs, func(r *run) bool { return r.tok == last })
	})
	for _, n := range nodes {
		n.stop(t)()
	}

	mu.Lock()
	defer mu.Unlock()
	e.rec.mu.Lock()
	assert.Empty(t, violations)
	elected := map[term]stamped{}
	for _, ev := range e.rec.events {
		if ev.Kind == processor.Elected {
			elected[term{ev.Member, ev.Token}] = ev
		}
	}
	e.rec.mu.Unlock()
	// At most one run per term: a term lost before its run could start
	// (its member's previous run had not returned yet) gets none.
	require.LessOrEqual(t, len(runs), len(elected), "at most one run of work per term")
	byMember := map[codec.MemberID][]*run{}
	ran := map[term]bool{}
	for _, r := range runs {
		assert.False(t, ran[term{r.member, r.tok}], "%s's work under %s ran twice", r.member, r.tok)
		ran[term{r.member, r.tok}] = true
		el, ok := elected[term{r.member, r.tok}]
		if assert.True(t, ok, "%s's work under %s has no Elected", r.member, r.tok) {
			assert.False(t, r.start.Before(el.Got), "%s's work under %s started before its Elected", r.member, r.tok)
		}
		assert.False(t, r.stop.IsZero(), "%s's work under %s returned", r.member, r.tok)
		byMember[r.member] = append(byMember[r.member], r)
	}
	for m, rs := range byMember {
		for i := 1; i < len(rs); i++ {
			assert.True(t, rs[i].start.After(rs[i-1].stop), "%s ran two works at once", m)
		}
	}
	// After each resignation the old work had returned before the next
	// term was elected.
	for _, rt := range resigned {
		var old *run
		for _, r := range runs {
			if r.member == rt.member && r.tok == rt.tok {
				old = r
			}
		}
		require.NotNil(t, old)
		e.rec.mu.Lock()
		var nextEl *stamped
		for i, ev := range e.rec.events {
			if ev.Kind == processor.Elected && later(ev.Token, rt.tok) {
				nextEl = &e.rec.events[i]
				break
			}
		}
		e.rec.mu.Unlock()
		if assert.NotNil(t, nextEl) {
			assert.True(t, old.stop.Before(nextEl.At),
				"%s's work under %s returned at %s, after the next term was elected at %s", rt.member, rt.tok, old.stop.Format("15:04:05.000"), nextEl.At.Format("15:04:05.000"))
		}
	}
	e.rec.checkFence(t)
}

// A holder killed in the middle of a lease write leaves its transaction
// open, and read_committed readers of the partition (the view) stop at the
// transaction's first offset, for every role in the partition, until the
// coordinator aborts it after the transaction timeout. Here node-k holds
// role "killed", which shares a partition with role "busy" held by node-a,
// and dies (KeepOnExit) after beginning a lease write that it never ends.
// node-a goes on renewing "busy"; its renewals are hidden from the views
// meanwhile (checked while the transaction timeout has not passed), and
// show within the transaction timeout (+ slack) of the transaction's
// start. Because the timeout is below LeaseDuration - HeartbeatInterval,
// node-b (a candidate of "busy") never sees node-a's lease expire, and
// node-a is never revoked.
//
// The bound is kfake's, which aborts at the timeout exactly. Apache Kafka
// checks for timed-out transactions every
// transaction.abort.timed.out.transaction.cleanup.interval.ms (10s by
// default), so there the stall lasts up to the timeout plus that interval
// and exceeds the lease used here: the test needs the embedded cluster.
func TestIntegrationKilledMidTransactionDoesNotStallTheView(t *testing.T) {
	txnTimeout := 1500 * time.Millisecond
	e := newEnv(t, txnTimeout)
	e.c.RequireFake(t)
	s := processor.Settings{
		LeaseDuration:      3 * time.Second,
		HeartbeatInterval:  600 * time.Millisecond,
		HeartbeatDeadline:  2400 * time.Millisecond,
		RetryBackoff:       50 * time.Millisecond,
		Stagger:            200 * time.Millisecond,
		TransactionTimeout: txnTimeout,
	}
	busy := codec.Role("busy")
	// The killed member's role shares a partition with node-a's member
	// session, whose heartbeats renew node-a's lease of busy.
	p := codec.SessionPartition("node-a", 3)
	killed := roleIn("killed-%d", p, 3)

	a, tokA := e.holder("node-a", busy, s, nil)
	b := e.start("node-b", []codec.Role{busy}, s, nil)
	ks := s
	ks.KeepOnExit = true
	k, tokK := e.holder("node-k", killed, ks, nil)
	e.awaitCandidate(busy, b.id)

	// node-k dies in the middle of a lease write: its member is gone
	// (nothing written on the way out), and a transaction it began under
	// its token stays open: the record is produced, EndTxn never sent.
	k.stop(t)()
	l := codec.Lease{Member: k.id, Token: tokK, GrantedAt: time.Now().UnixMilli(), Deadline: time.Now().Add(s.LeaseDuration).UnixMilli()}
	began := time.Now()
	openAt := e.openLeaseWrite(k.tr, killed, p, l)
	// The renewal the view shows: node-a's lease, or the latest heartbeat
	// of the session it names.
	granted := func(st rolestate.State) int64 {
		if st.Lease == nil || st.Lease.Member != a.id {
			return 0
		}
		if st.Session != nil && !st.Session.Heartbeat.End && st.Session.Heartbeat.GrantedAt > st.Lease.GrantedAt {
			return st.Session.Heartbeat.GrantedAt
		}
		return st.Lease.GrantedAt
	}

	// While the transaction is open the views hold back node-a's renewals
	// (checked only if the timeout cannot have passed yet): once a second
	// renewal begun after it has committed, the first has had a heartbeat
	// interval to reach the views.
	poll(time.Until(began.Add(txnTimeout-50*time.Millisecond)), func() bool {
		e.rec.mu.Lock()
		defer e.rec.mu.Unlock()
		n := 0
		for _, bt := range e.rec.beats {
			if bt.hb.Member == a.id && !bt.hb.End && bt.start.After(openAt) {
				n++
			}
		}
		return n >= 2
	})
	st, err := e.obs.Role(e.ctx(5*time.Second), busy)
	require.NoError(t, err)
	checked := time.Now()
	if checked.Before(began.Add(txnTimeout - 50*time.Millisecond)) {
		w, ok := e.rec.lastWrite(busy, a.id)
		require.True(t, ok)
		assert.True(t, w.Start.After(openAt), "node-a renewed while the transaction was open")
		assert.LessOrEqual(t, granted(st), openAt.UnixMilli(), "the view shows a renewal written after the open transaction began")
	} else {
		t.Logf("the stall check ran %v after the transaction began; skipped", checked.Sub(began))
	}

	// The coordinator aborts at the timeout, and the views move on.
	var seen time.Time
	await(t, txnTimeout+slack+time.Second, "the view shows a renewal of node-a after the open transaction", func() bool {
		st, err := e.obs.Role(e.ctx(5*time.Second), busy)
		require.NoError(t, err)
		if granted(st) > openAt.UnixMilli() {
			seen = time.Now()
			return true
		}
		return false
	})
	t.Logf("the view was held back %v after the transaction opened (timeout %v)", seen.Sub(openAt).Round(time.Millisecond), txnTimeout)
	assert.LessOrEqual(t, seen.Sub(began), txnTimeout+slack, "the view was held back longer than the transaction timeout")
	tokNow, ok, err := e.probe.Describe(e.ctx(5*time.Second), killed)
	require.NoError(t, err)
	t.Logf("after the timeout abort the killed role's token is %s (was %s)", tokNow, tokK)
	assert.True(t, ok)

	// Once node-b's view is past the stall too, check that nothing
	// changed hands.
	await(t, 5*time.Second, "node-b's view shows a renewal of node-a after the open transaction", func() bool {
		st, err := b.src.Role(e.ctx(5*time.Second), busy)
		require.NoError(t, err)
		return granted(st) > openAt.UnixMilli()
	})
	assert.Equal(t, map[codec.MemberID]codec.Token{a.id: tokA}, e.rec.holders(busy), "node-a holds throughout")
	assert.Empty(t, e.rec.find(processor.Revoked, busy, nil), "node-a was never revoked")
	assert.Empty(t, e.rec.find(processor.Elected, busy, func(ev stamped) bool { return ev.Member == b.id }), "node-b never took the role")
	e.rec.checkFence(t)
}

// One member holds many roles; a second member campaigns for the same
// roles. Every role ends up with exactly one holder, under the token
// Describe names, as the observer's table shows it.
func TestIntegrationManyRoles(t *testing.T) {
	e := newEnv(t, itTxnTimeout)
	const n = 20
	roles := roleNames("shard-%02d", n)
	s := itSettings()
	a := e.start("node-a", roles, s, nil)
	await(t, 10*time.Second, "node-a holds every role", func() bool { return allHeld(e.rec, roles, a.id) })
	b := e.start("node-b", roles, s, nil)
	// node-a's own view must show node-b, or node-a (seeing no one else)
	// takes back a role it has just released.
	e.awaitSeenBy(a, roles, 10*time.Second, b.id)
	// Hand half of the roles to node-b.
	for _, r := range roles[:n/2] {
		require.NoError(t, a.m.Resign(e.ctx(10*time.Second), r))
	}
	for i, r := range roles {
		holder, tok := e.soleHolder(r, 10*time.Second)
		want := a.id
		if i < n/2 {
			want = b.id // node-a queued again behind node-b
		}
		assert.Equal(t, want, holder, "%s", r)
		e.agree(r, holder, tok)
	}
	e.rec.checkFence(t)
}
