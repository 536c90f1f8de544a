package codec

import (
	"fmt"
	"strings"
)

// SessionVersion is the format version of the records a member session
// writes: a lease that names its holder's session ([Lease].Session), a
// heartbeat and a session end. It is the newest version this package
// reads; an older reader skips such records as newer (counted).
const SessionVersion = 3

// sessionPrefix starts the key of a member's session records.
const sessionPrefix = "krole/session/"

// SessionKey is the key of member's session records (its heartbeats and
// its session end): one key per member, so that compaction keeps the
// latest heartbeat of each member.
func SessionKey(member MemberID) Key { return Key{Kind: KindSession, Member: member} }

// SessionPartition returns the partition of member's session records among
// n partitions: 32-bit FNV-1a of "session/<member>", a name no role can
// have (a role never contains '/'), so that it depends on the member id
// alone, as [Partition] depends on the role name alone.
func SessionPartition(member MemberID, n int32) int32 {
	return Partition(Role(SessionName(member)), n)
}

// SessionName is "session/<member>": the suffix of a member session's
// transactional id (after the transactional id prefix, as a role's name
// is) and the name its partition is hashed from. A role name never
// contains '/', so no role's transactional id, <prefix><role>, equals a
// session's, <prefix>session/<member>, whatever the role names.
func SessionName(member MemberID) string { return "session/" + string(member) }

// MaxNonceLen is the longest incarnation nonce a session carries.
const MaxNonceLen = 64

// Session names one incarnation of a member session: the producer id and
// epoch of the session's transactional id (minted by the coordinator, as a
// role's token is) and a random nonce the member drew when it began the
// incarnation. A lease names the session that keeps it alive; a heartbeat
// carries the session it was written under.
type Session struct {
	ProducerID int64  `json:"producer_id"`
	Epoch      int16  `json:"epoch"`
	Nonce      string `json:"nonce"`
}

// Token returns the session's producer id and epoch as a token.
func (s Session) Token() Token { return Token{ProducerID: s.ProducerID, Epoch: s.Epoch} }

// String renders s as "producer_id/epoch/nonce".
func (s Session) String() string { return s.Token().String() + "/" + s.Nonce }

// Validate checks the session's producer id, epoch and nonce (1 to
// [MaxNonceLen] characters of [0-9A-Za-z]).
func (s Session) Validate() error {
	if err := s.Token().Validate(); err != nil {
		return &InvalidError{What: "session", Value: s.String(), Rule: err.(*InvalidError).Rule}
	}
	if len(s.Nonce) == 0 || len(s.Nonce) > MaxNonceLen {
		return &InvalidError{What: "session", Value: clipName(s.Nonce), Rule: fmt.Sprintf("the nonce must be 1-%d characters", MaxNonceLen)}
	}
	for i := 0; i < len(s.Nonce); i++ {
		if c := s.Nonce[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return &InvalidError{What: "session", Value: clipName(s.Nonce), Rule: fmt.Sprintf("the nonce is [0-9A-Za-z]: %q at byte %d is not allowed", c, i)}
		}
	}
	return nil
}

// Keeps reports whether a heartbeat of session h keeps alive a lease
// naming session l: the same producer id and nonce, and an epoch at least
// the lease's. The session's epoch may move during one incarnation (the
// member re-initializes the session's transactional id after a heartbeat
// got no answer), its producer id and nonce may not.
func (h Session) Keeps(l Session) bool {
	return h.ProducerID == l.ProducerID && h.Nonce == l.Nonce && h.Epoch >= l.Epoch
}

// Heartbeat is a member session's record, written in a transaction under
// the session's producer id and epoch: it keeps every lease naming the
// session alive for one more span ([Heartbeat.Span]) on each observer's
// clock, except the leases of the roles it lists in Excluded. A heartbeat
// with End set is the session end: every lease naming that incarnation
// (its nonce) ends at once, as a release does.
type Heartbeat struct {
	Member    MemberID `json:"member"`     // the member; the same as in the record's key
	Session   Session  `json:"session"`    // the incarnation it was written under
	GrantedAt int64    `json:"granted_at"` // Unix ms, the member's wall clock when the write began
	Deadline  int64    `json:"deadline"`   // Unix ms, GrantedAt + the lease duration
	// Excluded lists the roles the member holds but does not vouch for:
	// their runner did not check in, or the member could not confirm its
	// token. Usually empty.
	Excluded []Role `json:"excluded,omitempty"`
	// End marks the session end.
	End bool `json:"end,omitempty"`
}

// Validate checks the heartbeat's member, session, times and excluded
// roles. A session end carries no times (both 0).
func (h Heartbeat) Validate() error {
	if err := h.Member.Validate(); err != nil {
		return err
	}
	if err := h.Session.Validate(); err != nil {
		return err
	}
	for _, r := range h.Excluded {
		if err := r.Validate(); err != nil {
			return err
		}
	}
	if !h.End && h.Deadline <= h.GrantedAt {
		return &InvalidError{What: "heartbeat", Value: fmt.Sprintf("granted_at=%d deadline=%d", h.GrantedAt, h.Deadline),
			Rule: "deadline must be after granted_at"}
	}
	return nil
}

// Excludes reports whether h does not vouch for role.
func (h Heartbeat) Excludes(role Role) bool {
	for _, r := range h.Excluded {
		if r == role {
			return true
		}
	}
	return false
}

// decodeSessionKey decodes the member of a session key, s without its
// prefix.
func decodeSessionKey(s, rest string) (Key, error) {
	if strings.ContainsRune(rest, '/') {
		return Key{}, fmt.Errorf("%w: key %q: a session key has one member", ErrMalformed, clip(s))
	}
	return Key{Kind: KindSession, Member: MemberID(rest)}, nil
}
