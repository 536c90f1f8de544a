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
	"github.com/krabka/krole/internal/faultnet"
	"github.com/krabka/krole/processor"
	"github.com/krabka/krole/view"
)

// startSplit is startOwn with the view under a client id of its own,
// clientIDOf(id)+"-v", so that the transport's requests ("krole-"+id)
// and the view's ("krole-"+id+"-v", its consumers' "...-v-view") are
// told apart.
func (e *env) startSplit(id codec.MemberID, roles []codec.Role, s processor.Settings) *node {
	e.t.Helper()
	saved := e.c.Config
	defer func() { e.c.Config = saved }()
	e.c.Config.ClientID = clientIDOf(id)
	n := e.newNode(id)
	e.c.Config.ClientID = clientIDOf(id) + "-v"
	n.src = e.quietView()
	return e.launch(n, roles, processor.Options{Settings: s, Logger: testLog(string(id)), OnEvent: e.rec.onEvent}, nil, nil)
}

// quietView is e.view without the view's periodic health probe (its
// ListOffsets and catch-up Fetch would land in a step's requests now and
// then).
func (e *env) quietView() *view.View {
	e.t.Helper()
	return e.viewWith(view.Options{HealthInterval: time.Hour})
}

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
	e, fn := newPartitionEnv(t, role)
	coord := e.c.Fake.CoordinatorFor(e.c.Config.TransactionalID(string(role)))
	leader := e.c.Fake.LeaderFor(e.c.Config.Topic, codec.Partition(role, 3))
	s := itSettings()

	a := e.startSplit("rt-a", []codec.Role{role}, s)
	holder, _ := e.soleHolder(role, 10*time.Second)
	require.Equal(t, a.id, holder)
	b := e.startSplit("rt-b", []codec.Role{role}, s)
	e.awaitCandidate(role, b.id)
	require.NoError(t, b.tr.FindCoordinator(e.ctx(5*time.Second), role), "as krole run does at its start")
	time.Sleep(viewWarmup)

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
	time.Sleep(viewWarmup)
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
	row("renewal (every role of the member)", renewalA, len(renewalA), "one member-session round per RenewInterval, whatever the roles held")
	row("release (Withdraw)", release, len(release)-1, "the deregistration runs beside the successor's challenge")
	row("acquisition (Rejoin of a vacant role)", acqA, len(acqA), "registration, confirmation, epoch, lease")
	hand := append(append([]rtStep{}, release[:len(release)-1]...), successor...)
	row("handover (Withdraw to the successor's Elected)", hand, len(hand), "the view's answer to its long poll brings the release: no request")
	t.Logf("round trips per step (coordinator node %d, leader node %d):\n%s", coord, leader, tb.String())
	_ = processor.Elected
}
