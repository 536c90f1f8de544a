package fencing

import (
	"context"
	"errors"
	"fmt"

	"github.com/IBM/sarama"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/rolestate"
)

// Member sessions (see package processor, "Member sessions"): one
// transactional id per member, <prefix>session/<member>
// ([Config.SessionTransactionalID]), whose heartbeats keep every role the
// member holds alive. The session's producer state is kept like a role's
// token, under the key rolestate.SessionAuthor(member), a name no role
// has; Transact and its errors name that key as the role.

// Described is what [Transport].DescribeMany learned of one role: the
// token that holds it now (Held), or that no member ever held it.
type Described struct {
	Token codec.Token
	Held  bool
}

// SessionTransactionalID returns the transactional id of member's
// session: TxnPrefix + "session/" + member. No role's transactional id
// equals it: a role name never contains '/'.
func (c Config) SessionTransactionalID(member codec.MemberID) string {
	return c.TransactionalID(codec.SessionName(member))
}

// StartSession implements [Transport]: InitProducerId on member's
// session transactional id (fencing the previous incarnation's epoch and
// aborting a heartbeat it left open), with the same retries as
// AcquireEpoch. The session names nonce; the transport keeps the producer
// state the session's token binds, and Heartbeat writes under it.
func (t *BrokerTransport) StartSession(ctx context.Context, member codec.MemberID, nonce string) (codec.Session, error) {
	key := rolestate.SessionAuthor(member)
	if err := member.Validate(); err != nil {
		return codec.Session{}, &Error{Kind: ErrProducer, Role: key, Err: err}
	}
	if err := (codec.Session{Nonce: nonce}).Validate(); err != nil {
		return codec.Session{}, &Error{Kind: ErrProducer, Role: key, Err: err}
	}
	tok, err := t.mint(ctx, key, t.cfg.SessionTransactionalID(member))
	if err != nil {
		return codec.Session{}, err
	}
	return codec.Session{ProducerID: tok.ProducerID, Epoch: tok.Epoch, Nonce: nonce}, nil
}

// Heartbeat implements [Transport]: one transaction under hb.Session that
// produces hb in the member's session partition and commits. Errors: as
// WriteLease ([Transport].Heartbeat says what each means here).
func (t *BrokerTransport) Heartbeat(ctx context.Context, hb codec.Heartbeat) error {
	val, err := codec.EncodeRecord(codec.Record{Heartbeat: &hb})
	key := rolestate.SessionAuthor(hb.Member)
	if err != nil {
		return &Error{Kind: ErrProducer, Role: key, Err: err}
	}
	return t.Transact(ctx, key, hb.Session.Token(), func(tx *Txn) error {
		n, err := t.partitionCount(ctx, t.cfg.Topic, false)
		if err != nil {
			return &Error{Kind: ErrClient, Role: key, Err: err}
		}
		return tx.produceLast(t.cfg.Topic, codec.SessionPartition(hb.Member, n), codec.SessionKey(hb.Member).Encode(), val, nil)
	})
}

// txnIDs returns the transactional ids of roles, in order, and the role of
// each.
func (t *BrokerTransport) txnIDs(roles []codec.Role) ([]string, map[string]codec.Role, error) {
	ids := make([]string, 0, len(roles))
	byID := make(map[string]codec.Role, len(roles))
	for _, r := range roles {
		if err := r.Validate(); err != nil {
			return nil, nil, &Error{Kind: ErrAdmin, Role: r, Err: err}
		}
		id := t.cfg.TransactionalID(string(r))
		ids = append(ids, id)
		byID[id] = r
	}
	return ids, byID, nil
}

// DescribeMany implements [Transport]: DescribeTransactions with the
// transactional ids of roles, one request per coordinator broker (the
// coordinators as the client knows them; a role whose coordinator is not
// known costs one FindCoordinator first). A role missing from the result
// was not answered: err says why (errors.Join of each failure).
func (t *BrokerTransport) DescribeMany(ctx context.Context, roles []codec.Role) (map[codec.Role]Described, error) {
	ids, byID, err := t.txnIDs(roles)
	if err != nil {
		return nil, err
	}
	got, err := t.describeIDs(ctx, ids)
	out := make(map[codec.Role]Described, len(got))
	for id, d := range got {
		out[byID[id]] = d
	}
	return out, err
}

// describeNeeds is what a DescribeTransactions on txnID needs: a refusal
// is an [ErrNotAuthorized] naming it, as for Describe.
func describeNeeds(txnID string) needs { return needs{txnOp: "DESCRIBE", txnID: txnID} }

// describeIDs is DescribeMany for transactional ids. A refusal of an id
// matches [ErrNotAuthorized] (errors.Join of each failure).
func (t *BrokerTransport) describeIDs(ctx context.Context, ids []string) (map[string]Described, error) {
	groups := map[int32][]string{}
	var errs []error
	for _, id := range ids {
		b, err := call(ctx, nil, func() (*sarama.Broker, error) { return t.client.TransactionCoordinator(id) })
		if err != nil {
			errs = append(errs, describeNeeds(id).authz(&Error{Kind: ErrAdmin, Err: fmt.Errorf("finding the coordinator of %s: %w", id, err)}))
			continue
		}
		groups[b.ID()] = append(groups[b.ID()], id)
	}
	out := make(map[string]Described, len(ids))
	for _, g := range groups {
		first := g[0]
		var states []sarama.TransactionState
		kerr, err := t.atTxnCoordinator(ctx, nil, first, func(b *sarama.Broker) (sarama.KError, error) {
			r, err := b.DescribeTransactions(&sarama.DescribeTransactionsRequest{Version: versionDescribeTxns, TransactionalIDs: g})
			if err != nil {
				return 0, err
			}
			states = r.TransactionStates
			for _, s := range r.TransactionStates {
				if s.TransactionalID == first {
					return s.ErrorCode, nil // NOT_COORDINATOR for the group's first id: find it again
				}
			}
			return sarama.ErrNoError, nil
		})
		if err != nil {
			errs = append(errs, describeNeeds(first).authz(&Error{Kind: ErrAdmin, Err: fmt.Errorf("DescribeTransactions on %d transactional ids (%s, ...): %w", len(g), first, err)}))
			continue
		}
		if kerr != sarama.ErrNoError && kerr != kerrTransactionalIDNotFound {
			errs = append(errs, describeNeeds(first).authz(&Error{Kind: ErrAdmin, Err: fmt.Errorf("DescribeTransactions on %s: %w", first, kerrError(kerr))}))
		}
		for _, s := range states {
			switch s.ErrorCode {
			case sarama.ErrNoError:
				held := s.ProducerID >= 0 && s.ProducerEpoch >= 0 && s.TransactionState != "Dead"
				d := Described{Held: held}
				if held {
					d.Token = codec.Token{ProducerID: s.ProducerID, Epoch: s.ProducerEpoch}
				}
				out[s.TransactionalID] = d
			case kerrTransactionalIDNotFound:
				out[s.TransactionalID] = Described{}
			default:
				if s.TransactionalID != first {
					_, _ = call(ctx, nil, func() (struct{}, error) {
						return struct{}{}, t.client.RefreshTransactionCoordinator(s.TransactionalID)
					})
				}
				errs = append(errs, describeNeeds(s.TransactionalID).authz(&Error{Kind: ErrAdmin, Err: fmt.Errorf("DescribeTransactions on %s: %w", s.TransactionalID, kerrError(s.ErrorCode))}))
			}
		}
	}
	return out, errors.Join(errs...)
}

// ReadSession implements [Transport], reading as ReadRoleRecords does and
// counting the records it drops as forged.
func (t *BrokerTransport) ReadSession(ctx context.Context, member codec.MemberID) ([]RoleRecord, error) {
	key := rolestate.SessionAuthor(member)
	if err := member.Validate(); err != nil {
		return nil, &Error{Kind: ErrClient, Role: key, Err: err}
	}
	return t.readRecords(ctx, key, roleReader{role: key, session: member, t: t, aborted: map[int64]bool{}})
}

// verifySession is VerifyAuthor for member's session: whether pid is the
// producer id the session's transactional id has at its coordinator.
func (t *BrokerTransport) verifySession(ctx context.Context, member codec.MemberID, pid int64) (rolestate.Verdict, error) {
	return t.VerifyAuthor(ctx, rolestate.SessionAuthor(member), pid)
}
