package rolestate

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/krabka/krole/codec"
)

// Batch is what a reader knows of the record batch a record came in: the
// producer id and epoch that wrote it (-1 for a plain append without
// them) and whether it was written in a transaction.
type Batch struct {
	ProducerID    int64
	Epoch         int16
	Transactional bool
}

// ErrForged marks a lease record that CheckLeaseAuthor refuses.
var ErrForged = errors.New("forged lease")

// CheckLeaseAuthor decides whether a record on a lease key counts: only
// a lease written in a transaction by the producer id and epoch of its
// own token does (a tombstone names no token, and krole writes none). It
// returns nil or an error wrapping ErrForged that says why. This is the
// batch half of the check; the producer id must also be the role's own
// ([Authors]) before the lease counts (see docs/DESIGN.md, "Forged
// records").
func CheckLeaseAuthor(rec codec.Record, b Batch) error {
	switch {
	case rec.Lease == nil:
		return fmt.Errorf("%w: a tombstone on a lease key: krole never writes one, and it names no token", ErrForged)
	case !b.Transactional:
		return fmt.Errorf("%w: lease of %s under token %d/%d not written in a transaction (batch producer id %d)",
			ErrForged, rec.Lease.Member, rec.Lease.Token.ProducerID, rec.Lease.Token.Epoch, b.ProducerID)
	case b.ProducerID != rec.Lease.Token.ProducerID || b.Epoch != rec.Lease.Token.Epoch:
		return fmt.Errorf("%w: lease of %s names token %d/%d but was written by producer id %d epoch %d",
			ErrForged, rec.Lease.Member, rec.Lease.Token.ProducerID, rec.Lease.Token.Epoch, b.ProducerID, b.Epoch)
	}
	return nil
}

// Verdict is what a reader knows of whether a producer id is a role's
// own: the producer id of the role's transactional id (<prefix><role>)
// at the transaction coordinator.
type Verdict uint8

const (
	// Unverified: not known yet; the reader asks the coordinator
	// (DescribeTransactions on the role's transactional id).
	Unverified Verdict = iota
	// Own: the role's transactional id had this producer id, which stays
	// its own for good (Kafka never gives one producer id to two ids).
	Own
	// NotOwn: the coordinator named another producer id for the role's
	// transactional id (this one is another id's, or the role's before a
	// producer-id change, which fenced every lease under it).
	NotOwn
)

// Authors remembers, per role, which producer ids are its own, as
// DescribeTransactions answered (or AcquireEpoch minted) them, so a
// reader asks once per new (role, producer id). A lease counts only when
// CheckLeaseAuthor accepts it and its producer id is Own. Use
// [NewAuthors]; safe for concurrent use.
type Authors struct {
	mu  sync.Mutex
	own map[codec.Role]int64 // the role's newest own producer id
	// old holds further own producer ids of a role (rare: the role's
	// transactional id expired or ran out of epochs); not holds producer
	// ids known not to be the role's, at most maxNotOwn per role.
	old map[roleProducer]struct{}
	not map[codec.Role]map[int64]struct{}
}

type roleProducer struct {
	role codec.Role
	pid  int64
}

// maxNotOwn bounds the producer ids remembered as not a role's own; past
// it the set is forgotten and each is asked about again.
const maxNotOwn = 1024

// NewAuthors returns an empty Authors.
func NewAuthors() *Authors {
	return &Authors{own: map[codec.Role]int64{}, old: map[roleProducer]struct{}{}, not: map[codec.Role]map[int64]struct{}{}}
}

// Verdict returns what a knows of pid for role.
func (a *Authors) Verdict(role codec.Role, pid int64) Verdict {
	a.mu.Lock()
	defer a.mu.Unlock()
	if p, ok := a.own[role]; ok && p == pid {
		return Own
	}
	if _, ok := a.old[roleProducer{role, pid}]; ok {
		return Own
	}
	if _, ok := a.not[role][pid]; ok {
		return NotOwn
	}
	return Unverified
}

// Own records that pid is role's own: the coordinator minted it for the
// role's transactional id (AcquireEpoch), or named it (Describe).
func (a *Authors) Own(role codec.Role, pid int64) {
	if pid < 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if p, ok := a.own[role]; ok && p != pid {
		a.old[roleProducer{role, p}] = struct{}{}
	}
	a.own[role] = pid
	delete(a.not[role], pid)
}

// Learn records the coordinator's answer for role's transactional id:
// current is its producer id, or -1 when it has none (never used, or
// expired). It returns pid's verdict. A producer id other than a current
// one is NotOwn and remembered so; with no current producer id, pid is
// NotOwn but not remembered (on kfake a transactional id that expired
// gets its old producer id back).
func (a *Authors) Learn(role codec.Role, pid, current int64) Verdict {
	if current >= 0 {
		a.Own(role, current)
	}
	if v := a.Verdict(role, pid); v == Own {
		return v
	}
	if current >= 0 {
		a.mu.Lock()
		n := a.not[role]
		if n == nil || len(n) >= maxNotOwn {
			n = map[int64]struct{}{}
			a.not[role] = n
		}
		n[pid] = struct{}{}
		a.mu.Unlock()
	}
	return NotOwn
}

// NotOwnError is CheckLeaseAuthor's sequel: the error, wrapping
// ErrForged, for a lease whose producer id is not role's own.
func NotOwnError(l codec.Lease, txnID string) error {
	return fmt.Errorf("%w: lease of %s under token %d/%d: producer id %d is not the one transactional id %s has at its coordinator",
		ErrForged, l.Member, l.Token.ProducerID, l.Token.Epoch, l.Token.ProducerID, txnID)
}

// SessionAuthor is the key under which [Authors] (and the transport's
// producer state) keep member's session: "session/<member>", the suffix
// of the session's transactional id (codec.SessionName). It is not a
// valid role name, so it never meets a role's.
func SessionAuthor(member codec.MemberID) codec.Role { return codec.Role(codec.SessionName(member)) }

// CheckHeartbeatAuthor is [CheckLeaseAuthor] for a record on a session
// key: it counts only when written in a transaction by the producer id
// and epoch of the session it carries, and that producer id must also be
// the session's own ([SessionAuthor] in [Authors]).
func CheckHeartbeatAuthor(rec codec.Record, b Batch) error {
	h := rec.Heartbeat
	switch {
	case h == nil:
		return fmt.Errorf("%w: a record on a session key that is not a heartbeat: krole never writes one", ErrForged)
	case !b.Transactional:
		return fmt.Errorf("%w: heartbeat of %s under session %s not written in a transaction (batch producer id %d)",
			ErrForged, h.Member, h.Session, b.ProducerID)
	case b.ProducerID != h.Session.ProducerID || b.Epoch != h.Session.Epoch:
		return fmt.Errorf("%w: heartbeat of %s names session %s but was written by producer id %d epoch %d",
			ErrForged, h.Member, h.Session, b.ProducerID, b.Epoch)
	}
	return nil
}

// NotOwnSessionError is CheckHeartbeatAuthor's sequel: the error,
// wrapping ErrForged, for a heartbeat whose producer id is not the one
// the session's transactional id txnID has.
func NotOwnSessionError(h codec.Heartbeat, txnID string) error {
	return fmt.Errorf("%w: heartbeat of %s under session %s: producer id %d is not the one transactional id %s has at its coordinator",
		ErrForged, h.Member, h.Session, h.Session.ProducerID, txnID)
}

// SessionMember returns the member whose session key ([SessionAuthor])
// key is, and whether it is one.
func SessionMember(key codec.Role) (codec.MemberID, bool) {
	m, ok := strings.CutPrefix(string(key), "session/")
	if !ok || codec.MemberID(m).Validate() != nil {
		return "", false
	}
	return codec.MemberID(m), true
}
