package fencing

import (
	"context"
	"errors"
	"fmt"

	"github.com/IBM/sarama"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/kafkalog"
	"github.com/krabka/krole/rolestate"
)

// ReadRoleRecords implements [Transport].
//
// It reads with raw read_committed fetches from the partition leader, not
// sarama's consumer, which hides control records and so never reports
// reaching a partition that ends in a marker. The first answer's last
// stable offset fixes the end of the read; control batches count like
// any other; a fetch that brings no batch at or past the next offset ends
// it. So every fetch advances or ends the read, each bounded by
// cfg.RequestTimeout and ctx.
//
// Aborted batches are dropped the way Kafka's own consumer does it: a
// transactional batch of producer P is aborted when an aborted transaction
// of P begins at or before it and P's abort marker has not come yet.
func (t *BrokerTransport) ReadRoleRecords(ctx context.Context, role codec.Role) (_ []RoleRecord, err error) {
	if err := role.Validate(); err != nil {
		return nil, &Error{Kind: ErrClient, Role: role, Err: err}
	}
	return t.readRecords(ctx, role, roleReader{role: role, t: t, aborted: map[int64]bool{}})
}

// readRecords reads the partition of role (a role, or the key of a
// session: rolestate.SessionAuthor) with r; see ReadRoleRecords.
func (t *BrokerTransport) readRecords(ctx context.Context, role codec.Role, r roleReader) (_ []RoleRecord, err error) {
	defer func() { err = needs{topicOp: "READ", topic: t.cfg.Topic}.authz(err) }()
	p, err := t.partitionOf(ctx, role)
	if err != nil {
		return nil, err
	}
	topic := t.cfg.Topic
	next, end := int64(0), int64(-1)
	resetOnce := false
	for {
		blk, err := t.fetch(ctx, topic, p, next)
		if err != nil {
			return nil, &Error{Kind: ErrClient, Role: role, Err: fmt.Errorf("fetch %s/%d at offset %d: %w", topic, p, next, err)}
		}
		switch blk.Err {
		case sarama.ErrNoError:
		case sarama.ErrOffsetOutOfRange:
			// The log no longer starts at next (records were deleted):
			// start again at the log start offset, once.
			if resetOnce {
				return nil, &Error{Kind: ErrClient, Role: role, Err: fmt.Errorf("fetch %s/%d at offset %d: %w", topic, p, next, blk.Err)}
			}
			resetOnce = true
			start, err := t.logStart(ctx, topic, p)
			if err != nil {
				return nil, &Error{Kind: ErrClient, Role: role, Err: fmt.Errorf("log start of %s/%d: %w", topic, p, err)}
			}
			if start > next {
				next = start
			}
			continue
		default:
			return nil, &Error{Kind: ErrClient, Role: role, Err: fmt.Errorf("fetch %s/%d at offset %d: %w", topic, p, next, blk.Err)}
		}
		if end < 0 {
			end = blk.LastStableOffset
			if end < 0 {
				end = blk.HighWaterMarkOffset
			}
		}
		if next >= end {
			return r.verify(ctx)
		}
		advanced, err := r.take(blk, &next, end)
		if err != nil {
			return nil, err
		}
		if !advanced || next >= end {
			return r.verify(ctx)
		}
	}
}

// verify drops the lease records whose producer id is not the role's own
// ([BrokerTransport.VerifyAuthor]; at most one Describe per read, none
// when every producer id read was settled before) and counts them as
// forged. When the principal may not Describe the role's transactional
// id, the leases are kept by the batch rule alone and counted in
// UnverifiedLeasesKept; any other failure to ask fails the read.
func (r *roleReader) verify(ctx context.Context) ([]RoleRecord, error) {
	out := r.out[:0]
	for _, rec := range r.out {
		var v rolestate.Verdict
		var err error
		switch {
		case rec.Key.Kind == codec.KindLease && rec.Record.Lease != nil:
			v, err = r.t.VerifyAuthor(ctx, r.role, rec.Record.Lease.Token.ProducerID)
		case rec.Record.Heartbeat != nil:
			v, err = r.t.verifySession(ctx, r.session, rec.Record.Heartbeat.Session.ProducerID)
		default:
			out = append(out, rec)
			continue
		}
		switch {
		case IsNotAuthorized(err):
			r.t.unverified.Add(1)
		case err != nil:
			return nil, fmt.Errorf("verifying the author of the %s record at offset %d: %w", rec.Key.Kind, rec.Offset, err)
		case v != rolestate.Own:
			r.t.forgedSkipped.Add(1)
			continue
		}
		out = append(out, rec)
	}
	return out, nil
}

// roleReader collects the records of one role from fetched batches.
type roleReader struct {
	t       *BrokerTransport
	role    codec.Role
	session codec.MemberID // set: read the session records of this member, not a role's
	aborted map[int64]bool // producers inside an aborted transaction at the current offset
	out     []RoleRecord
}

// take consumes the batches of one fetch answer that lie in [*next, end),
// moving *next past each. It reports whether *next moved.
func (r *roleReader) take(blk *sarama.FetchResponseBlock, next *int64, end int64) (bool, error) {
	abortedTxns := append([]*sarama.AbortedTransaction(nil), blk.AbortedTransactions...)
	kafkalog.SortAborted(abortedTxns)
	start := *next
	for _, recs := range blk.RecordsSet {
		if recs == nil {
			continue
		}
		rb := recs.RecordBatch
		if rb == nil {
			if recs.MsgSet != nil && len(recs.MsgSet.Messages) > 0 {
				return false, &Error{Kind: ErrClient, Role: r.role, Err: errors.New("the broker sent the legacy message format (magic < 2); krole needs Kafka 0.11 record batches")}
			}
			continue
		}
		if rb.FirstOffset >= end {
			break
		}
		if rb.LastOffset() < *next {
			continue
		}
		for len(abortedTxns) > 0 && abortedTxns[0].FirstOffset <= rb.LastOffset() {
			r.aborted[abortedTxns[0].ProducerID] = true
			abortedTxns = abortedTxns[1:]
		}
		switch {
		case rb.Control:
			if kafkalog.IsAbortMarker(rb) {
				delete(r.aborted, rb.ProducerID)
			}
		case rb.IsTransactional && r.aborted[rb.ProducerID]:
			// aborted data
		default:
			for _, rec := range rb.Records {
				off := rb.FirstOffset + rec.OffsetDelta
				if off < *next || off >= end {
					continue
				}
				if err := r.add(off, rec, rolestate.Batch{ProducerID: rb.ProducerID, Epoch: rb.ProducerEpoch, Transactional: rb.IsTransactional}); err != nil {
					return false, err
				}
			}
		}
		*next = rb.LastOffset() + 1
	}
	return *next > start, nil
}

// add keeps rec when its key is a krole key of the role, except a lease
// record that its batch b says was not written by its own token
// (rolestate.CheckLeaseAuthor): that one is skipped and counted. Whether
// the producer id is the role's own is checked at the end of the read
// (verify).
func (r *roleReader) add(off int64, rec *sarama.Record, b rolestate.Batch) error {
	key, err := codec.DecodeKey(rec.Key)
	switch {
	case err != nil:
		return nil // another application's record
	case r.session != "" && (key.Kind != codec.KindSession || key.Member != r.session):
		return nil // another member's, or a role's
	case r.session == "" && (key.Kind == codec.KindSession || key.Role != r.role):
		return nil // another role's, or a session's
	}
	val, err := codec.DecodeRecord(rec.Value)
	var newer *codec.UnknownVersionError
	if errors.As(err, &newer) {
		r.t.newerSkipped.Add(1)
		return nil
	}
	if err == nil {
		err = codec.CheckPair(key, val)
	}
	if err != nil {
		return &Error{Kind: ErrRecord, Role: r.role, Err: fmt.Errorf("offset %d, key %s: %w", off, key, err)}
	}
	if key.Kind == codec.KindLease && rolestate.CheckLeaseAuthor(val, b) != nil ||
		key.Kind == codec.KindSession && rolestate.CheckHeartbeatAuthor(val, b) != nil {
		r.t.forgedSkipped.Add(1)
		return nil
	}
	r.out = append(r.out, RoleRecord{Offset: off, Key: key, Record: val})
	return nil
}
