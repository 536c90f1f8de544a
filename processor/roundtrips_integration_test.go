package processor_test

// The round trips of each step of a holding, as krole sends them: a
// faultnet.Recorder in front of every broker records the requests of the
// members (by client id), and the test names them per step. It is both
// the table of docs/BENCHMARKS.md ("Round trips per step"; run with -v to
// print it) and a check that no step sends more than it should.

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/faultnet"
	"github.com/krabka/krole/processor"
	"github.com/krabka/krole/view"
)

// rtStep is one request of a step as the table names it.
type rtStep struct {
	view   bool   // sent by the member's view (else by its transport)
	member string // the member whose client sent it
	what   string // the request, with what it is for
	node   string // "coordinator", "leader" or "other"
	at     time.Time
}

func (s rtStep) String() string {
	by := ""
	if s.view {
		by = " (view)"
	}
	return s.member + by + ": " + s.what + " @" + s.node
}

// rtOf returns the steps of member, only those of its transport unless
// view.
func rtOf(steps []rtStep, member string, view bool) []rtStep {
	var out []rtStep
	for _, s := range steps {
		if s.member == member && (view || !s.view) {
			out = append(out, s)
		}
	}
	return out
}

// rtClassify names the recorded requests of members (client id
// "krole-"+member, and its view's "-view..." clients), in the order they
// were read, leaving out what is not a round trip of the step: the
// connection's own requests (ApiVersions, SASL), metadata lookups, and
// the views' long polls (a Fetch with a wait: it is outstanding all the
// time, and answered at a commit without a request of its own). coord and
// leader are the nodes of the role's transaction coordinator and
// partition leader.
func rtClassify(t *testing.T, reqs []faultnet.Request, coord, leader int32) []rtStep {
	t.Helper()
	var out []rtStep
	for _, r := range reqs {
		member := strings.TrimPrefix(r.ClientID, "krole-")
		fromView := false
		if i := strings.Index(member, "-v"); i >= 0 {
			member, fromView = member[:i], true
		}
		node := "other"
		switch r.Node {
		case coord:
			node = "coordinator"
		case leader:
			node = "leader"
		}
		what := r.Name()
		session := false // a request of the member session's round
		switch kmsg.Key(r.APIKey) {
		case kmsg.ApiVersions, kmsg.SASLHandshake, kmsg.SASLAuthenticate, kmsg.Metadata:
			continue
		case kmsg.Fetch:
			req, err := r.Decode()
			require.NoError(t, err)
			f := req.(*kmsg.FetchRequest)
			if f.MaxWaitMillis > 0 {
				continue // a view's long poll
			}
			if f.IsolationLevel == 1 {
				what = "Fetch (confirmation, read_committed)"
			} else {
				what = "Fetch (open transaction, read_uncommitted)"
			}
		case kmsg.Produce:
			req, err := r.Decode()
			require.NoError(t, err)
			if p := req.(*kmsg.ProduceRequest); p.TransactionID != nil {
				what = "Produce (transactional)"
				session = isSessionTxn(*p.TransactionID)
			} else {
				what = "Produce (plain)"
			}
		case kmsg.EndTxn:
			req, err := r.Decode()
			require.NoError(t, err)
			if req.(*kmsg.EndTxnRequest).Commit {
				what = "EndTxn (commit)"
			} else {
				what = "EndTxn (abort)"
			}
			session = isSessionTxn(req.(*kmsg.EndTxnRequest).TransactionalID)
		case kmsg.AddPartitionsToTxn:
			req, err := r.Decode()
			require.NoError(t, err)
			a := req.(*kmsg.AddPartitionsToTxnRequest)
			session = isSessionTxn(a.TransactionalID)
			for _, tx := range a.Transactions {
				session = session || isSessionTxn(tx.TransactionalID)
			}
		case kmsg.InitProducerID:
			req, err := r.Decode()
			require.NoError(t, err)
			if id := req.(*kmsg.InitProducerIDRequest).TransactionalID; id != nil {
				session = isSessionTxn(*id)
			}
		case kmsg.DescribeTransactions:
			session = true // the round's check of the held roles' tokens
		}
		if session {
			what += " [session]"
			node = "any"
		}
		out = append(out, rtStep{view: fromView, member: member, what: what, node: node, at: r.At})
	}
	return out
}

// isSessionTxn reports whether id is a member session's transactional id
// (fencing.Config.SessionTransactionalID).
func isSessionTxn(id string) bool { return strings.Contains(id, "session/") }

// noSession returns steps without the member session's rounds, which run
// on their own schedule beside every step.
func noSession(steps []rtStep) []rtStep {
	var out []rtStep
	for _, s := range steps {
		if !strings.HasSuffix(s.what, "[session]") {
			out = append(out, s)
		}
	}
	return out
}

func rtNames(steps []rtStep) []string {
	out := make([]string, len(steps))
	for i, s := range steps {
		out[i] = s.String()
	}
	return out
}

// awaitVacant waits until n's view shows role vacant: released, and
// nobody registered.
func awaitVacant(t *testing.T, e *env, role codec.Role, n *node) {
	t.Helper()
	await(t, 5*time.Second, string(n.id)+"'s view shows "+string(role)+" vacant", func() bool {
		st, err := n.src.Role(e.ctx(5*time.Second), role)
		require.NoError(t, err)
		return len(st.Candidates) == 0 && (st.Lease == nil || st.Lease.Released())
	})
}

// rtPair starts rt-a, which takes role, then rt-b, its candidate, which
// looks the role's coordinator up ahead as krole run does; it returns
// once their views have settled.
func rtPair(t *testing.T, e *env, role codec.Role, s processor.Settings) (a, b *node) {
	t.Helper()
	// Without the view's periodic health probe: its ListOffsets and
	// catch-up Fetch would land in a step's requests now and then.
	opts := []nodeOption{splitClientIDs(), viewOptions(view.Options{HealthInterval: time.Hour})}
	a, _ = e.holder("rt-a", role, s, nil, opts...)
	b = e.candidate("rt-b", role, s, nil, opts...)
	require.NoError(t, b.tr.FindCoordinator(e.ctx(5*time.Second), role), "as krole run does at its start")
	e.awaitLive(role, a, b)
	return a, b
}

// The requests of each step, on three brokers with the role's transaction
// coordinator and partition leader on different ones (so each request
// says where it went), members that looked their coordinator up ahead, as
// krole run does:
//
//   - renewal: a holder's lease transaction;
//   - release: Withdraw of the holder (the release transaction, then the
//     deregistration);
//   - handover: from the holder's Withdraw to the successor's Elected, both
//     members' requests;
//   - acquisition: from Rejoin of a member, alone in the queue of a vacant
//     role, to its Elected (its registration, the confirmation, the epoch,
//     the lease transaction).
//
// A serial round trip is a request whose answer the next one waits for;
// every request listed is one, except a plain Produce of the leaving
// holder's deregistration, which runs beside the successor's.
func TestIntegrationRoundTripsPerStep(t *testing.T) {
	role := codec.Role("roundtrips")
	e := newPartitionEnv(t, role)
	fn := e.fn
	coord := e.c.Fake.CoordinatorFor(e.c.Config.TransactionalID(string(role)))
	leader := e.c.Fake.LeaderFor(e.c.Config.Topic, codec.Partition(role, 3))
	s := itSettings()

	a, b := rtPair(t, e, role, s)

	rec := fn.Record("krole-rt-")
	defer rec.Stop()

	// Renewal: the requests between the ends of two rounds of a's member
	// session (for every role it holds: one here).
	afterRenewal(t, e, role, a.id, s)
	rec.Take()
	afterRenewal(t, e, role, a.id, s)
	renewalA := rtOf(rtClassify(t, rec.Take(), coord, leader), "rt-a", false)
	assert.Equal(t, []string{
		"rt-a: DescribeTransactions [session] @any",
		"rt-a: AddPartitionsToTxn [session] @any",
		"rt-a: Produce (transactional) [session] @any",
		"rt-a: EndTxn (commit) [session] @any",
	}, rtNames(renewalA), "a renewal: one member-session round")

	// Release and handover: a withdraws, b takes over.
	afterRenewal(t, e, role, a.id, s)
	rec.Take()
	fromAnswers := b.src.Stats().ConfirmsFromAnswers
	left := time.Now()
	require.NoError(t, a.m.Withdraw(e.ctx(5*time.Second), role))
	awaitElected(t, e.rec, role, b.id, left, s.LeaseDuration)
	await(t, 5*time.Second, "rt-a deregistered", func() bool { return slices.Equal(e.candidates(role), []codec.MemberID{b.id}) })
	handover := rtClassify(t, rec.Take(), coord, leader)
	release, successor := noSession(rtOf(handover, "rt-a", false)), noSession(rtOf(handover, "rt-b", true))
	// The successor's view may probe for its own reasons before the
	// release shows (health); the confirmation comes after the release.
	for len(successor) > 0 && successor[0].at.Before(release[len(release)-2].at) {
		successor = successor[1:]
	}
	require.Equal(t, []string{
		"rt-a: AddPartitionsToTxn @coordinator",
		"rt-a: Produce (transactional) @leader",
		"rt-a: EndTxn (commit) @coordinator",
		"rt-a: Produce (plain) @leader",
	}, rtNames(release), "a release, then the deregistration")
	// After its lease transaction, the successor's view may verify the
	// new lease's author (FindCoordinator, DescribeTransactions): not part
	// of the handover.
	for len(successor) > 0 && successor[len(successor)-1].what != "EndTxn (commit)" {
		successor = successor[:len(successor)-1]
	}
	require.NotEmpty(t, successor)
	// The successor's lease transaction ends its part.
	n := len(successor)
	require.GreaterOrEqual(t, n, 4)
	assert.Equal(t, []string{
		"rt-b: InitProducerID @coordinator",
		"rt-b: AddPartitionsToTxn @coordinator",
		"rt-b: Produce (transactional) @leader",
		"rt-b: EndTxn (commit) @coordinator",
	}, rtNames(successor[n-4:]), "the successor's challenge")
	confirmB := successor[:n-4]
	for _, st := range confirmB {
		assert.Equal(t, "rt-b (view): Fetch", st.String()[:len("rt-b (view): Fetch")], "only the view's fetches before the challenge")
	}
	assert.LessOrEqual(t, len(confirmB), 2, "the confirmation: one fetch, and one more only when a transaction may be open")
	if b.src.Stats().ConfirmsFromAnswers > fromAnswers {
		assert.Empty(t, confirmB, "a confirmation taken from the view's own answer sends nothing")
	} else {
		assert.NotEmpty(t, confirmB, "a confirmation not taken from the view's answer fetches")
	}
	t.Logf("the successor's confirmation came from its view's answer: %v", b.src.Stats().ConfirmsFromAnswers > fromAnswers)

	// Acquisition: b withdraws too (the role is vacant, nobody queues),
	// then a rejoins and takes it.
	require.NoError(t, b.m.Withdraw(e.ctx(5*time.Second), role))
	awaitVacant(t, e, role, a)
	rec.Take()
	joined := time.Now()
	require.NoError(t, a.m.Rejoin(role))
	awaitElected(t, e.rec, role, a.id, joined, s.LeaseDuration)
	acqA := noSession(rtOf(rtClassify(t, rec.Take(), coord, leader), "rt-a", true))
	require.GreaterOrEqual(t, len(acqA), 5)
	assert.Equal(t, "rt-a: Produce (plain) @leader", acqA[0].String(), "the registration first")
	for _, st := range acqA[1 : len(acqA)-4] {
		assert.True(t, st.view && strings.HasPrefix(st.what, "Fetch"), "only the view's fetches between the registration and the challenge: %v", st)
	}
	m := len(acqA)
	assert.Equal(t, []string{
		"rt-a: InitProducerID @coordinator",
		"rt-a: AddPartitionsToTxn @coordinator",
		"rt-a: Produce (transactional) @leader",
		"rt-a: EndTxn (commit) @coordinator",
	}, rtNames(acqA[m-4:]), "the challenge")

	// The table.
	var tb strings.Builder
	row := func(step string, steps []rtStep, serial int, note string) {
		fmt.Fprintf(&tb, "| %s | %s | %d | %s |\n", step, strings.Join(rtNames(steps), ", "), serial, note)
	}
	fmt.Fprintf(&tb, "| step | requests, in order (member: request @broker) | serial round trips | note |\n| --- | --- | --- | --- |\n")
	row("renewal (every role of the member)", renewalA, len(renewalA), "one member-session round per HeartbeatInterval, whatever the roles held")
	row("release (Withdraw)", release, len(release)-1, "the deregistration runs beside the successor's challenge")
	row("acquisition (Rejoin of a vacant role)", acqA, len(acqA), "registration, confirmation, epoch, lease")
	hand := append(append([]rtStep{}, release[:len(release)-1]...), successor...)
	row("handover (Withdraw to the successor's Elected)", hand, len(hand), "the view's answer to its long poll brings the release: no request")
	t.Logf("round trips per step (coordinator node %d, leader node %d):\n%s", coord, leader, tb.String())
	_ = processor.Elected
}

// rtRaw is one recorded request with the name rtClassify gives it.
type rtRaw struct {
	req  faultnet.Request
	step rtStep
}

// rtPick returns the requests of member's transport (not its view) that
// rtClassify keeps and keep accepts, in the order they were read.
func rtPick(t *testing.T, reqs []faultnet.Request, member string, keep func(rtStep) bool) []rtRaw {
	t.Helper()
	var out []rtRaw
	for _, r := range reqs {
		st := rtClassify(t, []faultnet.Request{r}, 0, 0)
		if len(st) == 1 && st[0].member == member && !st[0].view && keep(st[0]) {
			out = append(out, rtRaw{r, st[0]})
		}
	}
	return out
}

// rtLast returns the last n of rs, failing the test when there are fewer.
func rtLast(t *testing.T, rs []rtRaw, n int) []rtRaw {
	t.Helper()
	require.GreaterOrEqual(t, len(rs), n)
	return rs[len(rs)-n:]
}

// rtSerial counts the serial round trips of rs, one client's requests in
// the order it sent them: a request read before the answer to the one
// before it went back (pipelined behind it) shares that one's round trip.
func rtSerial(rec *faultnet.Recorder, rs []rtRaw) int {
	n := 0
	for i, r := range rs {
		if i == 0 {
			n++
			continue
		}
		if at, ok := rec.Answered(rs[i-1].req); !ok || r.req.At.After(at) {
			n++
		}
	}
	return n
}

func rtWhats(rs []rtRaw) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.step.what
	}
	return out
}

// The round trips of each step with pipelined commits (fencing.Config
// Pipeline on), on one broker, where every role's coordinator is its
// partition's leader, counted from when faultnet read each request and
// when it handed each answer back: a commit sent before its produce's
// answer came shares the produce's round trip. The "pipelined" column of
// "Round trips per step" in docs/BENCHMARKS.md (run with -v to print it).
func TestIntegrationPipelinedRoundTripsPerStep(t *testing.T) {
	role := codec.Role("piped")
	e := newEnv(t, itTxnTimeout, withFaults(), withBrokers(1), withConfig(func(c *fencing.Config) { c.Pipeline = fencing.PipelineOn }))
	c, fn := e.c, e.fn
	s := itSettings()

	a, b := rtPair(t, e, role, s)
	// Every produce is answered 50ms late (kfake sleeps it, the cluster
	// goes on), so that what the client sends without waiting for a
	// produce's answer is read before that answer goes back, however
	// fast the cluster is: on loopback an answer can otherwise beat the
	// client's own next write, and the count would say "waited" where
	// the client did not.
	c.Fake.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.Fake.KeepControl()
		c.Fake.SleepControl(func() { time.Sleep(50 * time.Millisecond) })
		return nil, nil, false
	})
	rec := fn.Record("krole-rt-")
	defer rec.Stop()
	session := func(st rtStep) bool { return strings.HasSuffix(st.what, "[session]") }
	txn := func(st rtStep) bool { return !session(st) && st.what != "Produce (plain)" }
	var tb strings.Builder
	fmt.Fprintf(&tb, "| step | requests | serial round trips |\n| --- | --- | --- |\n")
	row := func(step string, rs []rtRaw, serial int) {
		fmt.Fprintf(&tb, "| %s | %s | %d |\n", step, strings.Join(rtWhats(rs), ", "), serial)
	}

	// Renewal: one member-session round, its heartbeat's commit behind
	// the heartbeat.
	afterRenewal(t, e, role, a.id, s)
	rec.Take()
	afterRenewal(t, e, role, a.id, s)
	renewal := rtPick(t, rec.Take(), "rt-a", session)
	require.Equal(t, []string{"DescribeTransactions [session]", "AddPartitionsToTxn [session]", "Produce (transactional) [session]", "EndTxn (commit) [session]"},
		rtWhats(renewal))
	assert.Equal(t, 3, rtSerial(rec, renewal), "the heartbeat's commit goes behind its produce")
	row("renewal", renewal, rtSerial(rec, renewal))

	// Withdraw: a's release, then b's challenge.
	afterRenewal(t, e, role, a.id, s)
	rec.Take()
	left := time.Now()
	require.NoError(t, a.m.Withdraw(e.ctx(5*time.Second), role))
	awaitElected(t, e.rec, role, b.id, left, s.LeaseDuration)
	await(t, 5*time.Second, "rt-a deregistered", func() bool { return slices.Equal(e.candidates(role), []codec.MemberID{b.id}) })
	reqs := rec.Take()
	release := rtPick(t, reqs, "rt-a", txn)
	require.Equal(t, []string{"AddPartitionsToTxn", "Produce (transactional)", "EndTxn (commit)"}, rtWhats(release))
	assert.Equal(t, 2, rtSerial(rec, release), "the release's commit goes behind its produce")
	row("release (Withdraw)", release, rtSerial(rec, release))
	challenge := rtLast(t, rtPick(t, reqs, "rt-b", txn), 4)
	require.Equal(t, []string{"InitProducerID", "AddPartitionsToTxn", "Produce (transactional)", "EndTxn (commit)"}, rtWhats(challenge))
	assert.Equal(t, 3, rtSerial(rec, challenge), "the lease's commit goes behind its produce")
	row("challenge (the successor's)", challenge, rtSerial(rec, challenge))

	// b leaves (its Run ends): its session end releases the role, its
	// deregistration beside it; a, rejoined, takes the role.
	require.NoError(t, a.m.Rejoin(role))
	e.awaitCandidate(role, a.id)
	e.awaitLive(role, a, b)
	afterRenewal(t, e, role, b.id, s)
	rec.Take()
	left = time.Now()
	b.cancel()
	awaitElected(t, e.rec, role, a.id, left, s.LeaseDuration)
	<-b.done
	reqs = rec.Take()
	leaving := rtPick(t, reqs, "rt-b", func(st rtStep) bool { return st.what != "DescribeTransactions [session]" })
	var end []rtRaw
	for _, r := range leaving {
		if session(r.step) {
			end = append(end, r)
		}
	}
	// The session end is b's last transaction (a heartbeat round may
	// have come before it).
	end = rtLast(t, end, 3)
	require.Equal(t, []string{"AddPartitionsToTxn [session]", "Produce (transactional) [session]", "EndTxn (commit) [session]"}, rtWhats(end))
	assert.Equal(t, 2, rtSerial(rec, end), "the session end's commit goes behind its produce")
	row("session end (a member leaving)", leaving, rtSerial(rec, end))
	// (after its lease, a may prune b's registration: a plain produce)
	retake := rtLast(t, rtPick(t, reqs, "rt-a", txn), 4)
	require.Equal(t, []string{"InitProducerID", "AddPartitionsToTxn", "Produce (transactional)", "EndTxn (commit)"}, rtWhats(retake))
	assert.Equal(t, 3, rtSerial(rec, retake))
	row("challenge after a session end", retake, rtSerial(rec, retake))
	t.Logf("pipelined round trips per step (one broker):\n%s", tb.String())
}
