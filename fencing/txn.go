package fencing

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/krabka/krole/codec"
)

type topicPartition struct {
	topic     string
	partition int32
}

// holder is the producer state a minted token binds: the token, and per
// partition the next batch's sequence number (the transactional id is
// the role's, Config.TransactionalID, made again per transaction). After
// a produce without a definite answer, next keeps both candidates,
// ascending; the next produce tries the highest first, which a broker
// expecting the lower refuses (OUT_OF_ORDER_SEQUENCE_NUMBER) unappended.
type holder struct {
	token codec.Token

	// sem admits one transaction of this token at a time. A transaction
	// whose caller left (ctx ended) keeps it until its abort is done. It
	// exists only while a transaction holds it or waits for it (users of
	// them), so that an idle token keeps no channel; both are guarded by
	// BrokerTransport.mu (see acquire).
	sem   chan struct{}
	users int32
	// inflight counts broker calls of this token that a caller abandoned
	// and that have not been answered yet.
	inflight sync.WaitGroup

	// Guarded by sem.
	next  seqs
	dirty bool // a transaction may be open at the coordinator: abort it before the next one

	// retired is set, under BrokerTransport.mu, when a request under the
	// token got no answer: nothing more is sent under it.
	retired bool
}

func newHolder(tok codec.Token) *holder { return &holder{token: tok} }

// acquire waits for h's turn to run a transaction, and returns the
// function that ends it; ok is false when ctx ended first.
func (t *BrokerTransport) acquire(ctx context.Context, h *holder) (release func(), ok bool) {
	t.mu.Lock()
	if h.sem == nil {
		h.sem = make(chan struct{}, 1)
	}
	sem := h.sem
	h.users++
	t.mu.Unlock()
	leave := func() {
		t.mu.Lock()
		if h.users--; h.users == 0 {
			h.sem = nil // nobody holds or waits for it: the next gets a new one
		}
		t.mu.Unlock()
	}
	select {
	case sem <- struct{}{}:
		return func() { <-sem; leave() }, true
	case <-ctx.Done():
		leave()
		return nil, false
	}
}

// seqs holds, per partition, the sequence numbers the broker may expect
// next of a token (see holder): the first partition inline, since a
// role's token writes to one partition almost always, and a map only for
// more, so that a held role costs no map.
type seqs struct {
	tp   topicPartition
	cand []int32
	more map[topicPartition][]int32
}

func (s *seqs) get(tp topicPartition) []int32 {
	if s.cand != nil && s.tp == tp {
		return s.cand
	}
	return s.more[tp]
}

func (s *seqs) set(tp topicPartition, cand []int32) {
	switch {
	case s.cand == nil || s.tp == tp:
		s.tp, s.cand = tp, cand
	default:
		if s.more == nil {
			s.more = map[topicPartition][]int32{}
		}
		s.more[tp] = cand
	}
}

// current returns the holder of role if its token is tok, else an
// ErrNotHeld error.
func (t *BrokerTransport) current(role codec.Role, tok codec.Token) (*holder, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	h := t.holders[role]
	switch {
	case h == nil && t.retired[role] == tok:
		return nil, &Error{Kind: ErrNotHeld, Role: role, Err: fmt.Errorf("token %s was %w: a request under it got no definite answer", tok, ErrRetired)}
	case h == nil:
		return nil, &Error{Kind: ErrNotHeld, Role: role}
	case h.token != tok:
		return nil, &Error{Kind: ErrNotHeld, Role: role, Err: fmt.Errorf("token %s is not the newest this transport minted (%s)", tok, h.token)}
	}
	return h, nil
}

// forget drops h, if it is still the role's holder: later calls with its
// token get ErrNotHeld.
func (t *BrokerTransport) forget(role codec.Role, h *holder) {
	t.mu.Lock()
	if t.holders[role] == h {
		delete(t.holders, role)
	}
	t.mu.Unlock()
}

// retire forgets h after a request under its token got no definite answer,
// remembering the token as retired; nothing more is sent under it.
func (t *BrokerTransport) retire(role codec.Role, h *holder) {
	t.mu.Lock()
	h.retired = true
	if t.holders[role] == h {
		delete(t.holders, role)
		t.retired[role] = h.token
	}
	t.mu.Unlock()
}

// isRetired reports whether h was retired.
func (t *BrokerTransport) isRetired(h *holder) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return h.retired
}

// WriteLease implements [Transport]: one transaction under token that
// produces the lease and commits, returning its offset.
func (t *BrokerTransport) WriteLease(ctx context.Context, role codec.Role, token codec.Token, lease codec.Lease) (off int64, err error) {
	defer func() {
		err = needs{txnOp: "WRITE", txnID: t.cfg.TransactionalID(string(role)), topicOp: "WRITE", topic: t.cfg.Topic}.authz(err)
		if err != nil {
			off = -1
		}
	}()
	val, err := codec.EncodeRecord(codec.Record{Lease: &lease})
	if err != nil {
		return -1, &Error{Kind: ErrProducer, Role: role, Err: err}
	}
	off = -1
	err = t.Transact(ctx, role, token, func(tx *Txn) error {
		p, err := t.partitionOf(ctx, role)
		if err != nil {
			return err
		}
		return tx.produceLast(t.cfg.Topic, p, codec.LeaseKey(role).Encode(), val, &off)
	})
	return off, err
}

// Txn is one transaction under a role's token, valid only inside the
// function passed to [BrokerTransport.Transact], not for concurrent use.
// Its methods send at once; records show at commit.
type Txn struct {
	ctx    context.Context
	t      *BrokerTransport
	role   codec.Role
	txnID  string // the role's transactional id
	h      *holder
	added  map[topicPartition]bool
	groups map[string]bool
	// started is set once a request that can begin the transaction at the
	// coordinator has been sent: from then on ending it needs an EndTxn.
	started bool
	// err is the first failure of a Txn method; it dooms the transaction.
	err error
	// behind is the last produce when it was written without waiting for
	// its answer (produceLast): the commit goes behind it.
	behind *behindProduce
}

// Role returns the role whose token the transaction writes under.
func (tx *Txn) Role() codec.Role { return tx.role }

// Token returns the token the transaction writes under.
func (tx *Txn) Token() codec.Token { return tx.h.token }

// Produce appends one record (nil value: a tombstone) to topic/partition
// and returns its offset. Its errors ([ErrFenced], [ErrProducer]) doom the
// transaction; a fence a leader answers otherwise (kfake:
// INVALID_TXN_STATE) shows at the abort, and Transact returns [ErrFenced].
func (tx *Txn) Produce(topic string, partition int32, key, value []byte) (int64, error) {
	if tx.err != nil {
		return -1, tx.err
	}
	off, err := tx.produce(topic, partition, key, value)
	if err != nil {
		tx.err = err
	}
	return off, err
}

func (tx *Txn) produce(topic string, partition int32, key, value []byte) (int64, error) {
	tp := topicPartition{topic, partition}
	if err := tx.addPartitions([]topicPartition{tp}); err != nil {
		return -1, err
	}
	return tx.produceRecords(tp, []*sarama.Record{{Key: key, Value: value}})
}

// addPartitions adds to the transaction, in one AddPartitionsToTxn, those
// of tps it does not hold yet.
func (tx *Txn) addPartitions(tps []topicPartition) error {
	t, h := tx.t, tx.h
	want := map[string][]int32{}
	n := 0
	for _, tp := range tps {
		if !tx.added[tp] && !slices.Contains(want[tp.topic], tp.partition) {
			want[tp.topic] = append(want[tp.topic], tp.partition)
			n++
		}
	}
	if n == 0 {
		return nil
	}
	tx.started = true
	kerr, err := t.atTxnCoordinator(tx.ctx, &h.inflight, tx.txnID, func(b *sarama.Broker) (sarama.KError, error) {
		r, err := b.AddPartitionsToTxn(&sarama.AddPartitionsToTxnRequest{
			Version:         versionAddPartitions,
			TransactionalID: tx.txnID,
			ProducerID:      h.token.ProducerID,
			ProducerEpoch:   h.token.Epoch,
			TopicPartitions: want,
		})
		if err != nil {
			return 0, err
		}
		// One partition's failure fails the request; the others are
		// answered OPERATION_NOT_ATTEMPTED. Report the cause, a fence
		// first.
		answer := sarama.ErrNoError
		for topic, ps := range want {
			for _, p := range ps {
				var pe *sarama.PartitionError
				for _, e := range r.Errors[topic] {
					if e.Partition == p {
						pe = e
						break
					}
				}
				switch {
				case pe == nil:
					return 0, permanent(fmt.Errorf("AddPartitionsToTxn answered without %s/%d", topic, p))
				case fenceCode(pe.Err):
					return pe.Err, nil
				case pe.Err == sarama.ErrNoError:
				case answer == sarama.ErrNoError || answer == sarama.ErrOperationNotAttempted:
					answer = pe.Err
				}
			}
		}
		return answer, nil
	})
	if err := tx.fail("AddPartitionsToTxn", kerr, err); err != nil {
		return err
	}
	for topic, ps := range want {
		for _, p := range ps {
			tx.added[topicPartition{topic, p}] = true
		}
	}
	return nil
}

// produceRecords appends recs, in one record batch, to tp, which the
// transaction holds already, and returns the offset of the first (-1 when
// the broker reports the batch a duplicate of one it appended before).
func (tx *Txn) produceRecords(tp topicPartition, recs []*sarama.Record) (int64, error) {
	t, h := tx.t, tx.h
	cands := h.next.get(tp)
	if len(cands) == 0 {
		cands = []int32{0}
	}
	for i := len(cands) - 1; i >= 0; i-- {
		seq := cands[i]
		batch := newRecordBatch(h.token.ProducerID, h.token.Epoch, seq, true, recs)
		off, kerr, err := t.produce(tx.ctx, &h.inflight, &tx.txnID, tp.topic, tp.partition, batch)
		after := incrementSequence(seq, len(recs))
		switch {
		case err != nil:
			// No definite answer: the broker expects seq or after next.
			h.next.set(tp, append(slices.Clone(cands[:i+1]), after))
			return -1, tx.fail("Produce", 0, err)
		case kerr == sarama.ErrOutOfOrderSequenceNumber && i > 0:
			continue // seq was not the broker's expectation; nothing appended
		case kerr == sarama.ErrNoError:
			h.next.set(tp, []int32{after})
			return off, nil
		default:
			h.next.set(tp, slices.Clone(cands[:i+1]))
			if kerr == sarama.ErrOutOfOrderSequenceNumber {
				// Every candidate refused: the sequence state is lost, and
				// only a new epoch restarts it.
				tx.t.forget(tx.role, h)
			}
			return -1, tx.fail("Produce", kerr, nil)
		}
	}
	return -1, tx.fail("Produce", sarama.ErrOutOfOrderSequenceNumber, nil)
}

// CommitOffsets commits a consumer group's offsets (the next to read) in
// the transaction: they count when it commits, never if it aborts. The
// group needs no members. Errors: as Produce.
func (tx *Txn) CommitOffsets(group string, offsets map[string]map[int32]int64) error {
	if tx.err != nil {
		return tx.err
	}
	if err := tx.commitOffsets(group, offsets); err != nil {
		tx.err = err
		return err
	}
	return nil
}

func (tx *Txn) commitOffsets(group string, offsets map[string]map[int32]int64) error {
	t, h := tx.t, tx.h
	if group == "" {
		return &Error{Kind: ErrProducer, Role: tx.role, Err: errors.New("CommitOffsets: empty group id")}
	}
	if !tx.groups[group] {
		tx.started = true
		kerr, err := t.atTxnCoordinator(tx.ctx, &h.inflight, tx.txnID, func(b *sarama.Broker) (sarama.KError, error) {
			r, err := b.AddOffsetsToTxn(&sarama.AddOffsetsToTxnRequest{
				Version:         versionAddOffsets,
				TransactionalID: tx.txnID,
				ProducerID:      h.token.ProducerID,
				ProducerEpoch:   h.token.Epoch,
				GroupID:         group,
			})
			if err != nil {
				return 0, err
			}
			return r.Err, nil
		})
		if err := tx.fail("AddOffsetsToTxn", kerr, err); err != nil {
			return err
		}
		tx.groups[group] = true
	}
	topics := make(map[string][]*sarama.PartitionOffsetMetadata, len(offsets))
	for topic, ps := range offsets {
		for p, off := range ps {
			topics[topic] = append(topics[topic], &sarama.PartitionOffsetMetadata{Partition: p, Offset: off, LeaderEpoch: -1})
		}
	}
	if len(topics) == 0 {
		return nil
	}
	kerr, err := t.atGroupCoordinator(tx.ctx, &h.inflight, group, func(b *sarama.Broker) (sarama.KError, error) {
		r, err := b.TxnOffsetCommit(&sarama.TxnOffsetCommitRequest{
			Version:         versionTxnOffsetCommit,
			TransactionalID: tx.txnID,
			GroupID:         group,
			ProducerID:      h.token.ProducerID,
			ProducerEpoch:   h.token.Epoch,
			Topics:          topics,
		})
		if err != nil {
			return 0, err
		}
		// The first error of any partition stands for the request; a
		// retry resends every partition, which is harmless.
		for _, pes := range r.Topics {
			for _, pe := range pes {
				if pe.Err != sarama.ErrNoError {
					return pe.Err, nil
				}
			}
		}
		return sarama.ErrNoError, nil
	})
	return tx.fail("TxnOffsetCommit", kerr, err)
}

// fail turns a transactional request's outcome into the Txn's error,
// retiring the token without an answer and forgetting it when fenced.
func (tx *Txn) fail(what string, kerr sarama.KError, err error) error {
	switch {
	case noAnswer(err):
		tx.t.retire(tx.role, tx.h)
		return &Error{Kind: ErrUnknownOutcome, Role: tx.role, Err: fmt.Errorf("%s under token %s got no answer; the token is retired: %w", what, tx.h.token, err)}
	case err != nil:
		return &Error{Kind: ErrProducer, Role: tx.role, Err: fmt.Errorf("%s under token %s: %w", what, tx.h.token, err)}
	case fenceCode(kerr):
		tx.t.forget(tx.role, tx.h)
		return Fenced(tx.role, fmt.Errorf("%s under token %s: %w", what, tx.h.token, kerrError(kerr)))
	case kerr != sarama.ErrNoError:
		return &Error{Kind: ErrProducer, Role: tx.role, Err: fmt.Errorf("%s under token %s: %w", what, tx.h.token, kerrError(kerr))}
	}
	return nil
}

// Transact runs fn in one transaction under token, the newest this
// transport minted for role (else [ErrNotHeld], unsent): it commits when
// fn returns nil, else aborts and returns the error. Errors: [Fenced],
// [ErrUnknownOutcome] (package doc, "When a request gets no answer"). When
// ctx ends with no request out it returns at once and aborts in the
// background. Transactions of one token run one at a time.
func (t *BrokerTransport) Transact(ctx context.Context, role codec.Role, token codec.Token, fn func(tx *Txn) error) (err error) {
	// The topics and groups are fn's; the transactional id is the role's.
	defer func() {
		err = needs{txnOp: "WRITE", txnID: t.cfg.TransactionalID(string(role)), topicOp: "WRITE", groupOp: "READ"}.authz(err)
	}()
	h, err := t.current(role, token)
	if err != nil {
		return err
	}
	release, ok := t.acquire(ctx, h)
	if !ok {
		return &Error{Kind: ErrProducer, Role: role, Err: fmt.Errorf("waiting for the previous transaction of token %s: %w", token, ctx.Err())}
	}
	// A newer AcquireEpoch, or a fence or unknown outcome seen by the
	// previous transaction, may have replaced h while this one waited.
	if _, err := t.current(role, token); err != nil {
		release()
		return err
	}
	tx := &Txn{ctx: ctx, t: t, role: role, txnID: t.cfg.TransactionalID(string(role)), h: h, added: map[topicPartition]bool{}, groups: map[string]bool{}}
	if h.dirty {
		// The previous transaction of this token may still be open.
		if err := tx.abort(ctx); err != nil {
			release()
			return err
		}
	}

	ferr := func() error {
		defer func() {
			if p := recover(); p != nil {
				t.abortLater(ctx, tx, release)
				panic(p)
			}
		}()
		return fn(tx)
	}()
	if ferr == nil && tx.err == nil {
		if !tx.started {
			release()
			return nil
		}
		cerr := tx.commit(ctx)
		if cerr == nil {
			release()
			return nil
		}
		if ends(cerr) {
			release()
			return cerr
		}
		tx.err = cerr
	}
	tx.settleBehind()
	if tx.err != nil && ends(tx.err) {
		release()
		return tx.err
	}
	result := ferr
	if tx.err != nil {
		result = tx.err
	}
	if ctx.Err() != nil {
		t.abortLater(ctx, tx, release)
		if errors.Is(result, ctx.Err()) {
			return result
		}
		return &Error{Kind: ErrProducer, Role: role, Err: errors.Join(result, ctx.Err())}
	}
	aerr := tx.abort(ctx)
	release()
	switch {
	case IsFenced(aerr):
		return Fenced(role, errors.Join(result, errors.Unwrap(aerr)))
	case errors.Is(aerr, ErrUnknownOutcome):
		return &Error{Kind: ErrUnknownOutcome, Role: role, Err: errors.Join(result, errors.Unwrap(aerr))}
	}
	return result
}

// ends reports whether err ends the token's holding: a fence, or an
// unknown outcome that retired it.
func ends(err error) bool { return IsFenced(err) || errors.Is(err, ErrUnknownOutcome) }

// abortLater aborts tx in the background, then calls release: the cleanup
// of a transaction whose caller left or whose function panicked.
func (t *BrokerTransport) abortLater(ctx context.Context, tx *Txn, release func()) {
	t.bgMu.Lock()
	defer t.bgMu.Unlock()
	if t.closed.Load() || t.isRetired(tx.h) {
		// The connections are closing, or nothing may be sent under the
		// token: the coordinator aborts the transaction when its timeout
		// passes, or the next holder's epoch does.
		release()
		return
	}
	t.bg.Add(1)
	go func() {
		defer t.bg.Done()
		defer release()
		tx.h.inflight.Wait()
		if t.isRetired(tx.h) {
			return
		}
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.cfg.RequestTimeout)
		defer cancel()
		_ = tx.abort(actx)
	}()
}

// EndTxnsSent counts the EndTxn requests (commits, aborts, resends) this
// transport has sent.
func (t *BrokerTransport) EndTxnsSent() (commits, aborts uint64) {
	return t.endTxns[1].Load(), t.endTxns[0].Load()
}

// end sends EndTxn and maps its answer. An unanswered abort retires the
// token; an unanswered commit is resent until answered or ctx ends, and
// then only a success is definite: any other end is ErrUnknownOutcome.
// Either way an unanswered commit retires the token.
func (tx *Txn) end(ctx context.Context, commit bool) error {
	h := tx.h
	what := "EndTxn abort"
	if commit {
		what = "EndTxn commit"
	}
	h.dirty = true // until the coordinator confirms
	endTxn := func() (sarama.KError, error) {
		return tx.t.atTxnCoordinator(ctx, &h.inflight, tx.txnID, func(b *sarama.Broker) (sarama.KError, error) {
			return tx.endTxnAt(b, commit)
		})
	}
	kerr, err := endTxn()
	if commit && noAnswer(err) {
		lost := err
		backoff := retryBackoffFirst
		for err != nil && ctx.Err() == nil {
			timer := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				timer.Stop()
			case <-timer.C:
			}
			backoff = min(2*backoff, retryBackoffMax)
			if ctx.Err() != nil {
				break
			}
			kerr, err = endTxn()
		}
		if err == nil && kerr == sarama.ErrNoError {
			// Committed. The unanswered commit may still reach the
			// coordinator, and would then commit whatever the token's
			// next transaction had written by then: so nothing more is
			// sent under the token.
			h.dirty = false
			tx.t.retire(tx.role, h)
			return nil
		}
		if err == nil {
			err = kerrError(kerr)
		}
		tx.t.retire(tx.role, h)
		return &Error{Kind: ErrUnknownOutcome, Role: tx.role, Err: fmt.Errorf("%s under token %s got no answer, and no success since: the transaction may have committed; the token is retired: %w", what, h.token, errors.Join(lost, err))}
	}
	if err == nil && (kerr == sarama.ErrNoError || (!commit && kerr == sarama.ErrInvalidTxnState)) {
		// An abort answered INVALID_TXN_STATE finds no transaction open
		// (it ended before, or never began): nothing is left to end.
		h.dirty = false
		return nil
	}
	if err == nil && fenceCode(kerr) {
		h.dirty = false // a later epoch aborted it
	}
	return tx.fail(what, kerr, err)
}

// endTxnAt sends EndTxn (commit or abort) under the transaction's token
// to b, counting it, and returns the broker's code.
func (tx *Txn) endTxnAt(b *sarama.Broker, commit bool) (sarama.KError, error) {
	h, ended := tx.h, 0
	if commit {
		ended = 1
	}
	tx.t.endTxns[ended].Add(1)
	r, err := b.EndTxn(&sarama.EndTxnRequest{
		Version:           versionEndTxn,
		TransactionalID:   tx.txnID,
		ProducerID:        h.token.ProducerID,
		ProducerEpoch:     h.token.Epoch,
		TransactionResult: commit,
	})
	if err != nil {
		return 0, err
	}
	return r.Err, nil
}

// abort ends the transaction with EndTxn abort if it may be open.
func (tx *Txn) abort(ctx context.Context) error {
	if !tx.started && !tx.h.dirty {
		return nil
	}
	return tx.end(ctx, false)
}

// CheckToken implements [TokenChecker], asking nothing of the cluster.
func (t *BrokerTransport) CheckToken(role codec.Role, tok codec.Token) error {
	_, err := t.current(role, tok)
	return err
}
