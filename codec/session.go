package codec

import "fmt"

// SessionVersion is the format version of heartbeats, session ends and
// leases that name a session.
const SessionVersion = 3

// sessionPrefix starts the key of a member's session records.
const sessionPrefix = "krole/session/"

// SessionKey is the key of member's session records: one per member, so
// compaction keeps each member's latest.
func SessionKey(member MemberID) Key { return Key{Kind: KindSession, Member: member} }

// SessionPartition returns the partition of member's session records
// among n: [Partition] of [SessionName], the member id alone.
func SessionPartition(member MemberID, n int32) int32 {
	return Partition(Role(SessionName(member)), n)
}

// SessionName is "session/<member>": the suffix of the session's
// transactional id, and its partition's hash input. A role name never
// contains '/', so no role's transactional id equals a session's.
func SessionName(member MemberID) string { return "session/" + string(member) }

// MaxNonceLen is the longest incarnation nonce a session carries.
const MaxNonceLen = 64

// Session names one incarnation of a member session: its transactional
// id's producer id and epoch, and a random nonce drawn when it began.
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
	return checkNonce("session", s.Nonce)
}

// Keeps reports whether a heartbeat of session h keeps alive a lease
// naming session l: the same producer id and nonce, and an epoch at least
// the lease's (the epoch moves within an incarnation when the session is
// started again after an unanswered heartbeat).
func (h Session) Keeps(l Session) bool {
	return h.ProducerID == l.ProducerID && h.Nonce == l.Nonce && h.Epoch >= l.Epoch
}

// Heartbeat is a member session's record, written under the session's
// token: it keeps every lease naming the incarnation alive one more span
// on each observer's clock, but those of Excluded. With End set it is
// the session end, which ends them all, as a release does.
type Heartbeat struct {
	Member    MemberID `json:"member"`             // the member; the same as in the record's key
	Session   Session  `json:"session"`            // the incarnation it was written under
	GrantedAt int64    `json:"granted_at"`         // Unix ms, the member's wall clock when the write began
	Deadline  int64    `json:"deadline"`           // Unix ms, GrantedAt + the lease duration
	Excluded  []Role   `json:"excluded,omitempty"` // roles held but not vouched for
	End       bool     `json:"end,omitempty"`      // the session end
	// Group, when set, is the group of roles whose member the session's
	// member is while its heartbeats come (package group), Weight its
	// weight there (0 counts as 1), and Drain says it is handing its
	// roles over to leave (its share is none).
	Group  string `json:"group,omitempty"`
	Weight int    `json:"weight,omitempty"`
	Drain  bool   `json:"drain,omitempty"`
}

// MaxWeight is the highest weight a member may have in a group.
const MaxWeight = 1000

// CheckGroup checks a group's name: a role name's rules.
func CheckGroup(name string) error {
	if err := Role(name).Validate(); err != nil {
		ie := err.(*InvalidError)
		return &InvalidError{What: "group", Value: ie.Value, Rule: ie.Rule}
	}
	return nil
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
	if h.Group != "" {
		if err := CheckGroup(h.Group); err != nil {
			return err
		}
	}
	if h.Weight < 0 || h.Weight > MaxWeight {
		return &InvalidError{What: "weight", Value: fmt.Sprint(h.Weight), Rule: fmt.Sprintf("a weight is 0-%d", MaxWeight)}
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
