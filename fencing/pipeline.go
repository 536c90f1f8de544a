package fencing

// Pipelined commits (package doc, "Pipelined commits"): a one-record
// transaction sends its commit right behind its produce on one connection.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/IBM/sarama"
)

// Pipelining reports whether this transport pipelines commits where it
// can ([Config].Pipeline).
func (t *BrokerTransport) Pipelining() bool { return t.pipeline }

// behindProduce is a produce written to the coordinator's connection
// whose answer the commit behind it will collect.
type behindProduce struct {
	tp     topicPartition
	b      *sarama.Broker
	recs   []*sarama.Record
	seq    int32
	after  int32
	answer <-chan produceAnswer
	off    *int64 // where the record's offset goes; nil: not wanted
}

// produceLast appends one record as the transaction's last write. Where
// it can pipeline it only writes the produce, and the commit goes behind
// it (commitBehind); otherwise it is Produce. off, when not nil, gets the
// record's offset once answered; an acknowledgement without an offset
// fails the transaction (aborted, or ErrUnknownOutcome when the commit
// went behind it).
func (tx *Txn) produceLast(topic string, partition int32, key, value []byte, off *int64) error {
	if tx.err != nil {
		return tx.err
	}
	if !tx.t.pipeline {
		o, err := tx.Produce(topic, partition, key, value)
		if err == nil {
			err = tx.gotOffset(off, o)
		}
		return err
	}
	tp := topicPartition{topic, partition}
	if err := tx.addPartitions([]topicPartition{tp}); err != nil {
		tx.err = err
		return err
	}
	recs := []*sarama.Record{{Key: key, Value: value}}
	b := tx.t.sameBroker(tx.ctx, tx.txnID, tp)
	cands := tx.h.next.get(tp)
	if b == nil || len(cands) > 1 {
		return tx.doom(tx.producePlain(tp, recs, off))
	}
	seq := int32(0)
	if len(cands) == 1 {
		seq = cands[0]
	}
	h, t := tx.h, tx.t
	req := &sarama.ProduceRequest{
		TransactionalID: &tx.txnID,
		RequiredAcks:    sarama.WaitForAll,
		Timeout:         int32(t.cfg.RequestTimeout / time.Millisecond),
		Version:         versionProduce,
	}
	req.AddBatch(tp.topic, tp.partition, newRecordBatch(h.token.ProducerID, h.token.Epoch, seq, true, recs))
	answer, err := send(tx.ctx, t, &h.inflight, b, func() (<-chan produceAnswer, error) { return produceAsync(b, req, t.pipes.gate(b.Addr())) })
	switch {
	case err != nil && !noAnswer(err):
		// Nothing was written: the plain path finds the leader again
		// (or returns ctx's error).
		return tx.doom(tx.producePlain(tp, recs, off))
	case err != nil:
		h.next.set(tp, []int32{seq, incrementSequence(seq, len(recs))})
		tx.err = tx.fail("Produce", 0, err)
		return tx.err
	}
	tx.behind = &behindProduce{tp: tp, b: b, recs: recs, seq: seq, after: incrementSequence(seq, len(recs)), answer: answer, off: off}
	return nil
}

// producePlain is produceRecords, with the offset (when it appended)
// given to off as gotOffset does.
func (tx *Txn) producePlain(tp topicPartition, recs []*sarama.Record, off *int64) error {
	o, err := tx.produceRecords(tp, recs)
	if err != nil {
		return err
	}
	return tx.gotOffset(off, o)
}

// gotOffset stores the offset o of an appended record in *off (when off
// is not nil), and dooms the transaction when the broker gave none (-1:
// a duplicate answered without it), before its commit is sent.
func (tx *Txn) gotOffset(off *int64, o int64) error {
	if off == nil {
		return nil
	}
	*off = o
	if o < 0 {
		tx.err = &Error{Kind: ErrProducer, Role: tx.role, Err: fmt.Errorf("the broker acknowledged the record under token %s without its offset", tx.h.token)}
		return tx.err
	}
	return nil
}

// offsetOf returns the offset the answer a gives p's record, -1 when it
// gives none.
func (p *behindProduce) offsetOf(a produceAnswer) int64 {
	if a.res == nil {
		return -1
	}
	blk := a.res.GetBlock(p.tp.topic, p.tp.partition)
	if blk == nil || blk.Err != sarama.ErrNoError {
		return -1
	}
	return blk.Offset
}

// doom makes err, when not nil, the transaction's error, as Produce does.
func (tx *Txn) doom(err error) error {
	if err != nil && tx.err == nil {
		tx.err = err
	}
	return err
}

// sameBroker returns the broker that is both txnID's coordinator and tp's
// leader, as the client knows them now, or nil.
func (t *BrokerTransport) sameBroker(ctx context.Context, txnID string, tp topicPartition) *sarama.Broker {
	c, err := call(ctx, nil, func() (*sarama.Broker, error) { return t.client.TransactionCoordinator(txnID) })
	if err != nil {
		return nil
	}
	l, err := call(ctx, nil, func() (*sarama.Broker, error) { return t.client.Leader(tp.topic, tp.partition) })
	if err != nil || l != c {
		return nil
	}
	return c
}

// outcome maps the answer to a produce of one partition as produce does:
// the broker's code (ErrNoError for a duplicate), or err when no definite
// answer came.
func (p *behindProduce) outcome(a produceAnswer) (sarama.KError, error) {
	if a.err != nil {
		return 0, a.err
	}
	blk := a.res.GetBlock(p.tp.topic, p.tp.partition)
	switch {
	case blk == nil:
		return 0, fmt.Errorf("leader %s answered without %s/%d", p.b.Addr(), p.tp.topic, p.tp.partition)
	case blk.Err == sarama.ErrDuplicateSequenceNumber:
		return sarama.ErrNoError, nil
	case blk.Err == sarama.ErrRequestTimedOut, blk.Err == sarama.ErrNotEnoughReplicasAfterAppend:
		return 0, fmt.Errorf("no definite answer for %s/%d: %w", p.tp.topic, p.tp.partition, blk.Err)
	}
	return blk.Err, nil
}

// commit commits the transaction: behind its last produce when that one
// is still unanswered (commitBehind), else with end.
func (tx *Txn) commit(ctx context.Context) error {
	p := tx.behind
	if p == nil {
		return tx.end(ctx, true)
	}
	tx.behind = nil
	select {
	case a := <-p.answer:
		// Answered already: nothing to gain, and the plain rules apply.
		if err := tx.settle(p, a); err != nil {
			return err
		}
		return tx.end(ctx, true)
	default:
	}
	return tx.commitBehind(ctx, p)
}

// settle records the answer a to p, come before any commit was sent, as
// produceRecords would.
func (tx *Txn) settle(p *behindProduce, a produceAnswer) error {
	kerr, err := p.outcome(a)
	switch {
	case err != nil:
		tx.h.next.set(p.tp, []int32{p.seq, p.after})
		tx.err = tx.fail("Produce", 0, noAnswerError{err})
		return tx.err
	case kerr == sarama.ErrNoError:
		tx.h.next.set(p.tp, []int32{p.after})
		return tx.gotOffset(p.off, p.offsetOf(a))
	case leaderMoved(kerr):
		tx.t.refreshMetadata(tx.ctx, p.tp.topic)
		tx.h.next.set(p.tp, []int32{p.seq})
		return tx.doom(tx.producePlain(p.tp, p.recs, p.off))
	case kerr == sarama.ErrOutOfOrderSequenceNumber:
		// The one candidate refused: the sequence state is lost, and only
		// a new epoch restarts it (as in produceRecords).
		tx.t.forget(tx.role, tx.h)
	}
	tx.h.next.set(p.tp, []int32{p.seq})
	tx.err = tx.fail("Produce", kerr, nil)
	return tx.err
}

// settleBehind waits for the answer to the produce still out behind
// which no commit was sent (the transaction aborts instead) and records
// it, so that the next transaction's sequence number is right.
func (tx *Txn) settleBehind() {
	if p := tx.behind; p != nil {
		tx.behind = nil
		_ = tx.settle(p, <-p.answer)
	}
}

// commitBehind sends the commit on p's connection before p's answer came,
// then reads both answers. What each pair means: docs/DESIGN.md,
// "Fencing: pipelined commits".
func (tx *Txn) commitBehind(ctx context.Context, p *behindProduce) error {
	t, h := tx.t, tx.h
	h.dirty = true // until the coordinator confirms
	kerr, err := send(ctx, t, &h.inflight, p.b, func() (sarama.KError, error) { return tx.endTxnAt(p.b, true) })
	if err != nil && !noAnswer(err) {
		// The commit was not written: ctx ended first, or the connection
		// is gone (then the produce's answer, an error at worst, is on
		// its way and settles what comes next).
		if ctx.Err() != nil {
			h.next.set(p.tp, []int32{p.seq, p.after})
			return tx.fail("Produce", 0, noAnswerError{ctx.Err()})
		}
		if serr := tx.settle(p, <-p.answer); serr != nil {
			return serr
		}
		return tx.end(ctx, true)
	}
	if err != nil {
		h.next.set(p.tp, []int32{p.seq, p.after})
		t.retire(tx.role, h)
		return &Error{Kind: ErrUnknownOutcome, Role: tx.role, Err: fmt.Errorf("EndTxn commit, sent behind the produce under token %s, got no answer: the transaction may have committed; the token is retired: %w", h.token, err)}
	}
	var a produceAnswer
	select {
	case a = <-p.answer:
	default:
		// The commit's answer comes after the produce's on the one
		// connection, so this does not happen; if it did, the produce's
		// outcome would be unknown.
		a = produceAnswer{err: errors.New("no answer read before the commit's")}
	}
	pk, perr := p.outcome(a)
	switch {
	case fenceCode(kerr):
		h.dirty = false // a later epoch aborted it
		return tx.fail("EndTxn commit", kerr, nil)
	case kerr != sarama.ErrNoError:
		// Refused: nothing committed.
		if serr := tx.settle(p, a); serr != nil {
			return serr
		}
		return tx.end(ctx, true)
	}
	h.dirty = false
	switch {
	case perr == nil && pk == sarama.ErrNoError:
		h.next.set(p.tp, []int32{p.after})
		if p.off == nil {
			return nil
		}
		if *p.off = p.offsetOf(a); *p.off >= 0 {
			return nil
		}
		t.retire(tx.role, h)
		return &Error{Kind: ErrUnknownOutcome, Role: tx.role, Err: fmt.Errorf("the produce under token %s committed, but the broker acknowledged it without its offset; the token is retired", h.token)}
	case perr == nil && fenceCode(pk):
		h.next.set(p.tp, []int32{p.seq})
		return tx.fail("Produce", pk, nil)
	case perr == nil:
		perr = kerrError(pk)
	}
	return tx.rewrite(ctx, p, perr)
}

// rewrite resends p's batch under the same sequence number in a
// transaction of its own, after p's transaction committed without a
// definite answer to p: the broker dedups it or appends it now. A failure
// is [ErrUnknownOutcome], the token retired.
func (tx *Txn) rewrite(ctx context.Context, p *behindProduce, cause error) error {
	h := tx.h
	h.next.set(p.tp, []int32{p.seq})
	tx.added, tx.started, tx.err = map[topicPartition]bool{}, false, nil
	err := tx.addPartitions([]topicPartition{p.tp})
	if err == nil {
		err = tx.producePlain(p.tp, p.recs, p.off)
	}
	if err == nil {
		if err = tx.end(ctx, true); err == nil {
			return nil
		}
	} else if !ends(err) {
		_ = tx.abort(ctx)
	}
	tx.t.retire(tx.role, h)
	tx.err = &Error{Kind: ErrUnknownOutcome, Role: tx.role, Err: fmt.Errorf("the produce under token %s, committed behind without a definite answer (%w), and its rewrite failed: the record may show; the token is retired: %w", h.token, cause, err)}
	return tx.err
}
