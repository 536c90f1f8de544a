package rolestate

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/krabka/krole/codec"
)

// Batch is the header of the record batch a record came in (producer id
// -1 for a plain append).
type Batch struct {
	ProducerID    int64
	Epoch         int16
	Transactional bool
}

// ErrForged marks a lease record that CheckLeaseAuthor refuses.
var ErrForged = errors.New("forged lease")

// CheckLeaseAuthor returns nil when a record on a lease key was written in
// a transaction by the producer id and epoch of its own token, else an
// error wrapping ErrForged that says why. The producer id must also be
// the role's own ([Authors]); see docs/DESIGN.md, "Forged records".
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

// Verdict is whether a producer id is the one the role's transactional
// id has at the coordinator.
type Verdict uint8

const (
	Unverified Verdict = iota // not known yet: ask the coordinator
	Own                       // the role's, for good: Kafka never reuses a producer id
	NotOwn                    // another transactional id's, or the role's before a fence
)

// Authors remembers which producer ids are each role's own, as
// DescribeTransactions answered or AcquireEpoch minted them, so a reader
// asks once per (role, producer id). Use [NewAuthors]; safe for
// concurrent use.
type Authors struct {
	mu  sync.Mutex
	own map[codec.Role]int64 // the role's newest own producer id
	// old holds older own producer ids (the id expired or ran out of
	// epochs); not, at most maxNotOwn per role, ids known not the role's.
	old map[roleProducer]struct{}
	not map[codec.Role]map[int64]struct{}
}

type roleProducer struct {
	role codec.Role
	pid  int64
}

// maxNotOwn bounds the NotOwn ids remembered per role; past it they are
// forgotten.
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

// Own records that pid is role's own (minted or described).
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

// Learn records the coordinator's answer for role's transactional id
// (current: its producer id, or -1 for none) and returns pid's verdict.
// With no current id, NotOwn is not remembered: on kfake an expired id
// gets its old producer id back.
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

// NotOwnError wraps ErrForged for a lease whose producer id is not the
// role's own.
func NotOwnError(l codec.Lease, txnID string) error {
	return fmt.Errorf("%w: lease of %s under token %d/%d: producer id %d is not the one transactional id %s has at its coordinator",
		ErrForged, l.Member, l.Token.ProducerID, l.Token.Epoch, l.Token.ProducerID, txnID)
}

// SessionAuthor is member's session's key in [Authors]: "session/<member>"
// (codec.SessionName), never a valid role name.
func SessionAuthor(member codec.MemberID) codec.Role { return codec.Role(codec.SessionName(member)) }

// CheckHeartbeatAuthor is [CheckLeaseAuthor] for a record on a session
// key, against the session it carries; the producer id must also be the
// session's own ([SessionAuthor]).
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

// NotOwnSessionError wraps ErrForged for a heartbeat whose producer id is
// not the one the session's transactional id txnID has.
func NotOwnSessionError(h codec.Heartbeat, txnID string) error {
	return fmt.Errorf("%w: heartbeat of %s under session %s: producer id %d is not the one transactional id %s has at its coordinator",
		ErrForged, h.Member, h.Session, h.Session.ProducerID, txnID)
}

// SessionMember returns the member whose [SessionAuthor] key is.
func SessionMember(key codec.Role) (codec.MemberID, bool) {
	m, ok := strings.CutPrefix(string(key), "session/")
	if !ok || codec.MemberID(m).Validate() != nil {
		return "", false
	}
	return codec.MemberID(m), true
}
