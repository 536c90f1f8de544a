package codec

import (
	"fmt"
	"strconv"
	"unicode/utf8"
)

// MaxNameLen is the longest role name or member id, in bytes.
const MaxNameLen = 128

// Role names a role: 1 to 128 characters of [A-Za-z0-9._-].
// Build one with [NewRole]; the zero value is not a valid role.
type Role string

// MemberID names a member of a role: 1 to 128 characters of
// [A-Za-z0-9._:@-]. Build one with [NewMemberID].
type MemberID string

// NewRole validates s as a role name.
func NewRole(s string) (Role, error) {
	if err := checkName("role", roleRule, s, isRoleByte); err != nil {
		return "", err
	}
	return Role(s), nil
}

// NewMemberID validates s as a member id.
func NewMemberID(s string) (MemberID, error) {
	if err := checkName("member id", memberRule, s, isMemberByte); err != nil {
		return "", err
	}
	return MemberID(s), nil
}

// Validate reports whether r obeys the role naming rule.
func (r Role) Validate() error { _, err := NewRole(string(r)); return err }

// Validate reports whether m obeys the member id naming rule.
func (m MemberID) Validate() error { _, err := NewMemberID(string(m)); return err }

// String returns the role name.
func (r Role) String() string { return string(r) }

// String returns the member id.
func (m MemberID) String() string { return string(m) }

func isRoleByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '.' || c == '_' || c == '-'
}

func isMemberByte(c byte) bool { return isRoleByte(c) || c == ':' || c == '@' }

// The naming rules, as InvalidError.Rule states them.
const (
	roleRule   = "1-128 characters of [A-Za-z0-9._-]"
	memberRule = "1-128 characters of [A-Za-z0-9._:@-]"
)

func checkName(what, rule, s string, ok func(byte) bool) error {
	switch {
	case len(s) == 0:
		return &InvalidError{What: what, Value: s, Rule: rule + ": it is empty"}
	case len(s) > MaxNameLen:
		return &InvalidError{What: what, Value: clipName(s), Rule: rule + ": it has " + strconv.Itoa(len(s))}
	}
	for i := 0; i < len(s); i++ {
		if !ok(s[i]) {
			// Name the character, not its first byte: "é", not "Ã".
			r, _ := utf8.DecodeRuneInString(s[i:])
			return &InvalidError{What: what, Value: s, Rule: fmt.Sprintf("%s: %q at byte %d is not allowed", rule, r, i)}
		}
	}
	return nil
}

// Token is a fencing token: the producer id and epoch the transaction
// coordinator minted for a role's transactional id, never a client. A
// later token of a role has a higher epoch or a new producer id.
type Token struct {
	ProducerID int64 `json:"producer_id"`
	Epoch      int16 `json:"epoch"` // rises at each InitProducerId of the producer id
}

// NewToken validates a producer id and epoch: both must be >= 0.
func NewToken(producerID int64, epoch int16) (Token, error) {
	t := Token{ProducerID: producerID, Epoch: epoch}
	return t, t.Validate()
}

// Validate reports whether t has a producer id >= 0 and an epoch >= 0.
func (t Token) Validate() error {
	if t.ProducerID < 0 {
		return &InvalidError{What: "token", Value: t.String(), Rule: "producer id must be >= 0"}
	}
	if t.Epoch < 0 {
		return &InvalidError{What: "token", Value: t.String(), Rule: "epoch must be >= 0"}
	}
	return nil
}

// String renders t as "producer_id/epoch".
func (t Token) String() string {
	return strconv.FormatInt(t.ProducerID, 10) + "/" + strconv.Itoa(int(t.Epoch))
}

// Newer reports whether t has a higher epoch of u's producer id. Tokens of
// different producer ids are not ordered (false): only the broker knows.
func (t Token) Newer(u Token) bool { return t.ProducerID == u.ProducerID && t.Epoch > u.Epoch }
