package check

// The checks of transactions, on the scratch role: the fence, read_committed,
// Describe, the broker's clock, the latency of a lease write, and the
// clean-up.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/IBM/sarama"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/processor"
	"github.com/krabka/krole/rolestate"
)

// fenceCodes are the answers fencing reads as a fence (fencing/request.go,
// fenceCode).
var fenceCodes = []sarama.KError{90, 47, 49, 105, 59}

// fenceCodeIn returns the first fence code err carries.
func fenceCodeIn(err error) (sarama.KError, bool) {
	for _, k := range fenceCodes {
		if errors.Is(err, k) {
			return k, true
		}
	}
	return 0, false
}

// registration is the record the transactional checks write: the scratch
// member's registration of the scratch role, on its registration key.
// They write no lease: krole never writes a lease tombstone (readers count
// one as forged, rolestate.CheckLeaseAuthor), so a lease record would stay
// on the topic for good, while a registration is removed by the tombstone
// every deregistration writes. A transaction of one registration costs
// what a lease write costs (AddPartitionsToTxn, Produce, EndTxn), and the
// fence does not look at keys.
func (r *runner) registration() (key, value []byte) {
	v, err := codec.EncodeRecord(codec.Record{Registration: &codec.Registration{Member: r.member, RegisteredAt: time.Now().UnixMilli()}})
	if err != nil {
		panic(err) // a valid member always encodes
	}
	return codec.RegistrationKey(r.role, r.member).Encode(), v
}

// partition returns the scratch role's partition of the role topic.
func (r *runner) partition(ctx context.Context) (int32, error) {
	ps, err := call(ctx, func() ([]int32, error) { return r.client.Partitions(r.cfg.Topic) })
	if err != nil {
		return -1, fmt.Errorf("partitions of %s: %s", r.cfg.Topic, r.explain(err))
	}
	return codec.Partition(r.role, int32(len(ps))), nil
}

// stable asks the partition's leader for its last stable offset with a
// read_committed fetch from offset.
func (r *runner) stable(ctx context.Context, p int32, offset int64) (int64, error) {
	leader, err := call(ctx, func() (*sarama.Broker, error) { return r.client.Leader(r.cfg.Topic, p) })
	if err != nil {
		return -1, err
	}
	leader = r.opened(ctx, leader)
	res, err := call(ctx, func() (*sarama.FetchResponse, error) {
		req := &sarama.FetchRequest{Version: 11, MaxWaitTime: 0, MinBytes: 1, MaxBytes: 1 << 20,
			Isolation: sarama.ReadCommitted, SessionEpoch: -1}
		req.AddBlock(r.cfg.Topic, p, offset, 1<<20, -1)
		return leader.Fetch(req)
	})
	if err != nil {
		return -1, err
	}
	blk := res.GetBlock(r.cfg.Topic, p)
	if blk == nil {
		return -1, errors.New("the leader answered without the partition")
	}
	if blk.Err != sarama.ErrNoError {
		return -1, blk.Err
	}
	return blk.LastStableOffset, nil
}

// clockReading is the coordinator's start time of a transaction and the
// local times around the request that began it.
type clockReading struct {
	brokerMS int64 // -1 when the coordinator reported none
	before   time.Time
	after    time.Time
	err      error
}

// readClock asks the scratch id's coordinator for the start time of its
// open transaction (DescribeTransactions), which the coordinator stamps
// on its own clock when the transaction's first AddPartitionsToTxn
// arrives, between before and after.
func (r *runner) readClock(ctx context.Context, before, after time.Time) *clockReading {
	c := &clockReading{brokerMS: -1, before: before, after: after}
	b, err := call(ctx, func() (*sarama.Broker, error) { return r.client.TransactionCoordinator(r.txnID) })
	if err != nil {
		c.err = err
		return c
	}
	b = r.opened(ctx, b)
	res, err := call(ctx, func() (*sarama.DescribeTransactionsResponse, error) {
		return b.DescribeTransactions(&sarama.DescribeTransactionsRequest{Version: 0, TransactionalIDs: []string{r.txnID}})
	})
	if err != nil {
		c.err = err
		return c
	}
	for _, s := range res.TransactionStates {
		if s.TransactionalID == r.txnID {
			if s.ErrorCode != sarama.ErrNoError {
				c.err = s.ErrorCode
				return c
			}
			if s.TransactionStartTime > 0 {
				c.brokerMS = s.TransactionStartTime
			}
		}
	}
	return c
}

// scenarioResult is what the fence scenario saw.
type scenarioResult struct {
	step string // the step it was at when it stopped; "" when it ran to the end

	tokA, tokB, tokC codec.Token
	p                int32
	oA, oB, oC       int64 // offsets of the open (A), fenced-commit (B) and committed (C) writes; -1 when none
	lsoOpen          int64 // the LSO while A's transaction was open
	staleProduceErr  error // the produce under A's fenced epoch
	txnAErr          error // what A's Transact returned
	txnBErr          error // what B's Transact (the commit under the fenced epoch) returned
	lsoAfter         int64 // the LSO once the aborts were done
	shown            []int64
	err              error // why it stopped
}

// fenceScenario runs the fence scenario on the scratch role's lease key
// and returns the results of transactions.fence and
// transactions.read-committed:
//
//  1. A (the token of transactions.init) opens a transaction and writes
//     the scratch registration: a read_committed fetch must report the
//     last stable offset at or before it, and the coordinator's start
//     time of it is the clock check's reading (the transaction stays
//     open for these two requests and step 2 only: it holds back the
//     readers of its partition as a lease write does);
//  2. B takes a new epoch (InitProducerId), which fences A and aborts
//     its transaction;
//  3. A writes again in its open transaction: the partition's leader
//     must refuse it, and krole must read the write as fenced;
//  4. B opens a transaction and writes; C takes a new epoch; B commits:
//     the coordinator must refuse the commit, and krole must read it as
//     fenced;
//  5. C commits a write: it must show to krole's read_committed reader
//     (fencing's ReadRoleRecords, what a member reads with), and
//     neither A's nor B's ever may.
func (r *runner) fenceScenario(ctx context.Context) []Result {
	if r.current == nil || !r.initOK {
		why := "not run: transactions.init minted no token"
		return []Result{fail(NameTxnFence, "see transactions.init", "%s", why), fail(NameTxnReadCommit, "see transactions.init", "%s", why)}
	}
	s := r.scenario(ctx)
	return []Result{r.fenceResult(s), r.readCommittedResult(s)}
}

func (r *runner) scenario(ctx context.Context) *scenarioResult {
	s := &scenarioResult{oA: -1, oB: -1, oC: -1, lsoOpen: -1, lsoAfter: -1}
	stop := func(step string, err error) *scenarioResult {
		s.step, s.err = step, err
		return s
	}
	topic := r.cfg.Topic
	p, err := r.partition(ctx)
	if err != nil {
		return stop("finding the scratch role's partition", err)
	}
	s.p = p
	tB, err := r.transport(ctx)
	if err != nil {
		return stop("connecting a second transport", err)
	}
	tC, err := r.transport(ctx)
	if err != nil {
		return stop("connecting a third transport", err)
	}
	a := r.current
	s.tokA = a.tok
	key, value := r.registration()
	var fenced bool
	s.txnAErr = a.t.Transact(ctx, r.role, a.tok, func(tx *fencing.Txn) error {
		done := r.writing()
		before := r.opts.now()
		off, err := tx.Produce(topic, p, key, value)
		after := r.opts.now()
		done(err)
		if err != nil {
			s.step, s.err = "writing in A's transaction", err
			return err
		}
		s.oA = off
		r.clock = r.readClock(ctx, before, after)
		if s.lsoOpen, err = r.stable(ctx, p, off); err != nil {
			s.step, s.err = "fetching read_committed while A's transaction is open", err
			return err
		}
		s.tokB, err = tB.AcquireEpoch(ctx, r.role)
		r.noteAcquire(err)
		if err != nil {
			s.step, s.err = "the second InitProducerId (B)", err
			return err
		}
		fenced = true
		_, s.staleProduceErr = tx.Produce(topic, p, key, value)
		if s.staleProduceErr == nil {
			return errors.New("the produce under the fenced epoch was accepted")
		}
		return s.staleProduceErr
	})
	if !fenced {
		if s.err == nil {
			s.step, s.err = "A's transaction", s.txnAErr
		}
		return s
	}
	r.current = &holding{t: tB, tok: s.tokB}
	committed := false
	s.txnBErr = tB.Transact(ctx, r.role, s.tokB, func(tx *fencing.Txn) error {
		off, err := tx.Produce(topic, p, key, value)
		if err != nil {
			s.step, s.err = "writing in B's transaction", err
			return err
		}
		s.oB = off
		s.tokC, err = tC.AcquireEpoch(ctx, r.role)
		r.noteAcquire(err)
		if err != nil {
			s.step, s.err = "the third InitProducerId (C)", err
			return err
		}
		committed = true
		return nil // commit under B's fenced epoch
	})
	if !committed {
		return s
	}
	r.current = &holding{t: tC, tok: s.tokC}
	err = tC.Transact(ctx, r.role, s.tokC, func(tx *fencing.Txn) error {
		off, err := tx.Produce(topic, p, key, value)
		s.oC = off
		return err
	})
	if err != nil {
		return stop("C's committed write", err)
	}
	// The coordinator writes the markers after it answers; wait for the
	// partition's LSO to pass C's write, then read as krole does.
	for {
		lso, err := r.stable(ctx, p, max(s.oA, 0))
		if err == nil && lso > s.oC {
			s.lsoAfter = lso
			break
		}
		if ctx.Err() != nil {
			return stop("waiting for the last stable offset to pass the committed write", fmt.Errorf("the LSO stayed at %d, at or below offset %d", lso, s.oC))
		}
		time.Sleep(20 * time.Millisecond)
	}
	recs, err := tC.ReadRoleRecords(ctx, r.role)
	if err != nil {
		return stop("reading the scratch role after the aborts", err)
	}
	for _, rec := range recs {
		s.shown = append(s.shown, rec.Offset)
	}
	return s
}

func (r *runner) fenceResult(s *scenarioResult) Result {
	const name = NameTxnFence
	unsafe := "do not rely on krole's fence on this cluster: its brokers do not refuse a fenced producer (see docs/CHECK.md)"
	switch {
	case s.tokB == (codec.Token{}) && fencing.AuthorizationOf(s.err, fencing.AuthorizationError{}) != nil:
		return fail(name, "see the acl.* checks", "%s failed: %s", s.step, r.explain(s.err))
	case s.tokB == (codec.Token{}):
		return fail(name, "see the error; on Redpanda, enable_transactions must be true", "%s failed: %s", s.step, r.explain(s.err))
	case s.tokB == s.tokA:
		return fail(name, unsafe, "a second InitProducerId on %s answered the same token %s: it fenced nothing", r.txnID, s.tokA)
	case s.staleProduceErr == nil:
		return fail(name, unsafe, "after a second InitProducerId minted %s, a produce under the fenced token %s was accepted: the partition leader does not refuse a fenced producer", s.tokB, s.tokA)
	case !fencing.IsFenced(s.txnAErr):
		return fail(name, "report it: krole must read this refusal as fenced", "a produce under the fenced token %s was refused (%s), but krole did not read the write as fenced: %s", s.tokA, r.explain(s.staleProduceErr), r.explain(s.txnAErr))
	case s.tokC == (codec.Token{}):
		return fail(name, "see the error", "%s failed: %s", s.step, r.explain(s.err))
	case s.txnBErr == nil:
		return fail(name, unsafe, "after InitProducerId minted %s, the coordinator committed a transaction under the fenced token %s", s.tokC, s.tokB)
	case !fencing.IsFenced(s.txnBErr):
		return fail(name, "report it: krole must read this refusal as fenced", "a commit under the fenced token %s was refused, but krole did not read it as fenced: %s", s.tokB, r.explain(s.txnBErr))
	}
	produce := "refused"
	if k, ok := codeOf(s.staleProduceErr); ok {
		produce = "refused with " + codeName(k)
	}
	if !fencing.IsFenced(s.staleProduceErr) {
		end := ""
		if k, ok := fenceCodeIn(s.txnAErr); ok {
			end = " " + codeName(k)
		}
		produce += fmt.Sprintf(" (not a fence code: kfake's answer; Apache Kafka and Redpanda answer INVALID_PRODUCER_EPOCH (47)), and the abort that followed with%s, which krole reads as fenced", end)
	} else {
		produce += ", which krole reads as fenced"
	}
	commit := "refused"
	if k, ok := fenceCodeIn(s.txnBErr); ok {
		commit = "refused with " + codeName(k)
		// The commit's own answer, when it was no fence and the abort
		// that followed revealed the fence.
		for _, o := range codesIn(s.txnBErr) {
			if !slices.Contains(fenceCodes, o) {
				commit = fmt.Sprintf("refused with %s (not a fence code), and the abort that followed with %s", codeName(o), codeName(k))
				break
			}
		}
	}
	return pass(name, "InitProducerId on %s minted %s, a second one %s: a produce under %s was %s; after a third minted %s, a commit under %s was %s, which krole reads as fenced",
		r.txnID, s.tokA, s.tokB, s.tokA, produce, s.tokC, s.tokB, commit)
}

func (r *runner) readCommittedResult(s *scenarioResult) Result {
	const name = NameTxnReadCommit
	unsafe := "do not rely on krole on this cluster: its read_committed fetches show uncommitted or aborted writes (see docs/CHECK.md)"
	where := fmt.Sprintf("%s/%d (the scratch member's registration key)", r.cfg.Topic, s.p)
	switch {
	case s.oA < 0:
		return fail(name, "see transactions.fence", "%s failed: %s", s.step, r.explain(s.err))
	case s.lsoOpen > s.oA:
		return fail(name, unsafe, "on %s, a read_committed fetch reported the last stable offset %d past the open transaction's write at %d", where, s.lsoOpen, s.oA)
	case s.oC < 0 || s.lsoAfter < 0:
		return fail(name, "see the error", "%s failed: %s", s.step, r.explain(s.err))
	}
	for _, o := range s.shown {
		if o == s.oA || o == s.oB {
			return fail(name, unsafe, "on %s, krole's read_committed reader returned the aborted write at offset %d", where, o)
		}
	}
	if !slices.Contains(s.shown, s.oC) {
		return fail(name, "see docs/CHECK.md", "on %s, the committed write at offset %d did not show to krole's read_committed reader (the last stable offset is %d)", where, s.oC, s.lsoAfter)
	}
	return pass(name, "on %s: an open transaction's write at %d held read_committed readers back (last stable offset %d); it and the fenced commit's write at %d never showed once aborted; a committed write at %d showed",
		where, s.oA, s.lsoOpen, s.oB, s.oC)
}

func (r *runner) txnInit(ctx context.Context) Result {
	const name = NameTxnInit
	if err := r.fresh(ctx); err != nil {
		return fail(name, r.freshFix(err), "%s", r.explain(err))
	}
	t, err := r.transport(ctx)
	if errors.Is(err, fencing.ErrBrokerSettings) {
		return fail(name, fmt.Sprintf("raise the brokers' %s, or run with a shorter --lease-duration", fencing.BrokerMaxTxnTimeout),
			"the transaction timeout %v (lease %v / 2) is refused: %s", r.txnTimeout(), r.opts.LeaseDuration, r.explain(err))
	}
	if err != nil {
		return fail(name, "see reachability", "%s", r.explain(err))
	}
	tok, err := t.AcquireEpoch(ctx, r.role)
	r.noteAcquire(err)
	if res := refused(name, r.txnFix("Write"), err); res != nil {
		return *res
	}
	if err != nil {
		fix := "use a cluster with transactions: Apache Kafka, Confluent Cloud, MSK, or Redpanda with enable_transactions=true"
		switch k, _ := codeOf(err); k {
		case 50:
			fix = fmt.Sprintf("raise the brokers' %s, or run with a shorter --lease-duration", fencing.BrokerMaxTxnTimeout)
		}
		return fail(name, fix, "InitProducerId on %s (transaction timeout %v) failed: %s", r.txnID, r.txnTimeout(), r.explain(err))
	}
	r.initOK = true
	r.current = &holding{t: t, tok: tok}
	return pass(name, "InitProducerId on the scratch transactional id %s (transaction timeout %v) answered token %s", r.txnID, r.txnTimeout(), tok)
}

// writing records that a write of the scratch registration is under way,
// so that the cleanup tombstones it even if the check ends in the middle
// (a timeout, a panic); done(err) undoes that when the write was refused
// for want of an ACL, which appended nothing and leaves the cleanup
// nothing to tombstone (nor, without Write on the topic, a way to).
func (r *runner) writing() (done func(err error)) {
	was := r.registered
	r.registered = true
	return func(err error) {
		if err != nil && fencing.AuthorizationOf(err, fencing.AuthorizationError{}) != nil {
			r.registered = was
		}
	}
}

// noteAcquire records that an InitProducerId on the scratch id may have
// minted a token (it answered one, or its outcome is unknown), so that
// the cleanup ends what may be open under it. A definite refusal (an ACL,
// a version the broker lacks, an error code) minted nothing.
func (r *runner) noteAcquire(err error) {
	if err == nil || !(fencing.IsNotAuthorized(err) || errors.Is(err, sarama.ErrUnsupportedVersion) || errors.Is(err, fencing.ErrProducer)) {
		r.usedTxn = true
	}
}

func (r *runner) describe(ctx context.Context) Result {
	const name = NameDescribe
	tok, held, err := r.main.Describe(ctx, r.role)
	if res := refused(name, r.txnFix("Describe"), err); res != nil {
		return *res
	}
	if err != nil {
		return fail(name, "krole describe needs DescribeTransactions (Apache Kafka 3.0 or later, Redpanda)", "DescribeTransactions on %s failed: %s", r.txnID, r.explain(err))
	}
	switch {
	case r.current == nil && !held:
		return pass(name, "DescribeTransactions answers for the prefix %s: %s holds no token", r.cfg.TxnPrefix, r.txnID)
	case r.current == nil:
		return pass(name, "DescribeTransactions answers for the prefix %s: %s holds token %s", r.cfg.TxnPrefix, r.txnID, tok)
	case !held:
		return fail(name, "krole describe would show no holder on this cluster", "DescribeTransactions on %s answered no token, but InitProducerId minted %s", r.txnID, r.current.tok)
	case tok != r.current.tok:
		return fail(name, "krole describe would show a stale holder on this cluster", "DescribeTransactions on %s answered token %s, but InitProducerId minted %s last", r.txnID, tok, r.current.tok)
	}
	return pass(name, "DescribeTransactions on %s answered token %s, the one InitProducerId minted last", r.txnID, tok)
}

func (r *runner) clockCheck(context.Context) Result {
	const name = NameClock
	c := r.clock
	if c == nil {
		return warn(name, "see transactions.fence", "not measured: the fence scenario opened no transaction")
	}
	if c.err != nil || c.brokerMS <= 0 {
		why := "no start time"
		if c.err != nil {
			why = r.explain(c.err)
		}
		return warn(name, "", "not measured: DescribeTransactions of the open transaction gave %s", why)
	}
	mid := c.before.Add(c.after.Sub(c.before) / 2)
	offset := time.UnixMilli(c.brokerMS).Sub(mid)
	unc := c.after.Sub(c.before)/2 + time.Millisecond // the stamp is in whole milliseconds
	way := "ahead of"
	if offset < 0 {
		way = "behind"
	}
	detail := fmt.Sprintf("the transaction coordinator's clock is %d ms %s this machine's (±%v, from the start time it stamped on the open transaction); safety never rests on clocks, and leases are judged by durations on each member's own clock, but deadlines and timestamps shown (krole table, records) are in the writer's clock",
		offset.Abs().Milliseconds(), way, unc.Round(10*time.Microsecond))
	if offset.Abs()-unc > r.opts.ClockWarn {
		return warn(name, "synchronise the clocks of the members and the brokers (NTP, chrony)", "%s; more than %v", detail, r.opts.ClockWarn)
	}
	return pass(name, "%s", detail)
}

func (r *runner) latency(ctx context.Context) Result {
	const name = NameLatency
	if r.current == nil {
		return fail(name, "see transactions.init", "not run: no token of the scratch role")
	}
	cur := r.current
	n := r.opts.Burst
	durs := make([]time.Duration, 0, n)
	p, err := r.partition(ctx)
	if err != nil {
		return fail(name, "see the error", "%s", r.explain(err))
	}
	for i := 0; i < n; i++ {
		key, value := r.registration()
		start := time.Now()
		done := r.writing()
		err := cur.t.Transact(ctx, r.role, cur.tok, func(tx *fencing.Txn) error {
			_, err := tx.Produce(r.cfg.Topic, p, key, value)
			return err
		})
		done(err)
		if err != nil {
			return fail(name, "see the error", "transaction %d of %d under %s failed: %s", i+1, n, cur.tok, r.explain(err))
		}
		durs = append(durs, time.Since(start))
	}
	slices.Sort(durs)
	pct := func(q float64) time.Duration {
		i := int(q*float64(len(durs))+0.999999) - 1
		return durs[max(0, min(i, len(durs)-1))]
	}
	p50, p99 := pct(0.50), pct(0.99)
	// A member's heartbeat round goes every lease/5 and a holder gives up
	// at 4/5 of the lease after the last round that vouched for it: the
	// 3/5 between must hold the next rounds (each a DescribeTransactions
	// and a heartbeat; a failed one is not retried, the next comes lease/5
	// later), about ten writes at p99 (docs/CHECK.md, "latency").
	safe := (p99 * 50 / 3).Round(10 * time.Millisecond)
	if safe < 10*time.Millisecond {
		safe = 10 * time.Millisecond
	}
	s := processor.Settings{LeaseDuration: r.opts.LeaseDuration}.WithDefaults()
	detail := fmt.Sprintf("%d transactions of one record, as a lease write or a member session's heartbeat writes them (AddPartitionsToTxn, Produce, EndTxn), on the scratch role: p50 %v, p99 %v; the smallest safe lease on this network is about %v (heartbeat deadline - heartbeat interval = 3/5 of it holds ten writes at p99); the lease is %v",
		n, p50.Round(10*time.Microsecond), p99.Round(10*time.Microsecond), safe, s.LeaseDuration)
	if s.LeaseDuration < safe {
		return warn(name, fmt.Sprintf("run the members with --lease-duration %v or longer", safe), "%s: too short", detail)
	}
	return pass(name, "%s", detail)
}

// cleanup tombstones what the run wrote to the scratch role and checks
// that the role reads empty.
func (r *runner) cleanup(ctx context.Context) Result {
	const name = NameCleanup
	if r.main == nil {
		return pass(name, "nothing written")
	}
	if r.freshErr != nil {
		return pass(name, "nothing written: %s", r.explain(r.freshErr))
	}
	if !r.registered && !r.usedTxn {
		return pass(name, "nothing written (no check wrote to the scratch role)")
	}
	var done []string
	if r.registered {
		if err := r.main.Deregister(ctx, r.role, r.member); err != nil {
			return r.cleanupFail(fmt.Errorf("tombstoning the registration: %w", err))
		}
		done = append(done, "registration of "+string(r.member))
	}
	if r.usedTxn {
		// A fresh epoch aborts any transaction a check left open (one cut
		// short by its timeout), so no reader stays held back, and fences
		// every token of the run.
		if _, err := r.main.AcquireEpoch(ctx, r.role); err != nil {
			what := "nothing to tombstone"
			if len(done) > 0 {
				what = "tombstoned the " + strings.Join(done, " and ")
			}
			return r.cleanupFail(fmt.Errorf("%s, but InitProducerId to end the scratch id's transactions failed, so one may stay open, holding back read_committed readers of its partition, until the coordinator aborts it (transaction timeout %v + the abort interval): %w",
				what, r.txnTimeout(), err))
		}
	}
	// Read back as a view would: nothing of the scratch role is left.
	var last error
	for {
		recs, err := r.main.ReadRoleRecords(ctx, r.role)
		if err == nil {
			st := rolestate.Fold(r.role, recs)
			if st.Lease == nil && len(st.Candidates) == 0 {
				break
			}
			err = fmt.Errorf("the scratch role still reads %d candidate(s) and lease %v", len(st.Candidates), st.Lease != nil)
		}
		if ctx.Err() != nil {
			if last == nil {
				last = err
			}
			return r.cleanupFail(last)
		}
		last = err
		time.Sleep(20 * time.Millisecond)
	}
	what := "nothing to tombstone"
	if len(done) > 0 {
		what = "tombstoned its " + strings.Join(done, " and ")
	}
	txn := ""
	if r.usedTxn {
		txn = fmt.Sprintf("; the transactional id %s stays known to its coordinator until transactional.id.expiration.ms (7 days by default) passes unused", r.txnID)
	}
	return pass(name, "wrote only to the scratch role %s (no other role read or written) and %s; it reads empty%s", r.role, what, txn)
}

func (r *runner) cleanupFail(err error) Result {
	return fail(NameCleanup, fmt.Sprintf("remove it by hand: krole resign %s --member %s (its records are registrations of a scratch member: no member acts on them)", r.role, r.member),
		"the scratch role %s may keep records: %s", r.role, r.explain(err))
}
