package codec

import (
	"fmt"
	"strings"
)

// DrainVersion is the format version of a drain request; the newest this
// package reads. An older reader skips one as newer (counted).
const DrainVersion = 4

// drainPrefix starts the key of a member's drain request.
const drainPrefix = "krole/drain/"

// DrainKey is the key of the drain requests of member: one per member,
// so compaction keeps its latest. It lies in the partition of member's
// session records ([SessionPartition]).
func DrainKey(member MemberID) Key { return Key{Kind: KindDrain, Member: member} }

// DrainRequest asks Member, a member of a group, to hand every role over
// (as its own Member.Drain does, package processor). It is a plain
// append, and applies to the incarnation of the member's session whose
// nonce it names only: a member that starts again draws a new nonce and
// is not drained by it. A tombstone on its key withdraws it.
type DrainRequest struct {
	Member MemberID `json:"member"` // the member to drain; the same as in the record's key
	Nonce  string   `json:"nonce"`  // the incarnation nonce of the session to drain ([Session].Nonce)
	// At is the requester's wall clock when it wrote the request, Unix
	// ms; informative only.
	At int64 `json:"requested_at"`
}

// Validate checks the request's member and nonce (a [Session] nonce's
// rules).
func (d DrainRequest) Validate() error {
	if err := d.Member.Validate(); err != nil {
		return err
	}
	return checkNonce("drain request", d.Nonce)
}

// checkNonce checks an incarnation nonce: 1 to [MaxNonceLen] characters
// of [0-9A-Za-z].
func checkNonce(what, nonce string) error {
	if len(nonce) == 0 || len(nonce) > MaxNonceLen {
		return &InvalidError{What: what, Value: clipName(nonce), Rule: fmt.Sprintf("the nonce must be 1-%d characters", MaxNonceLen)}
	}
	for i := 0; i < len(nonce); i++ {
		if c := nonce[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return &InvalidError{What: what, Value: clipName(nonce), Rule: fmt.Sprintf("the nonce is [0-9A-Za-z]: %q at byte %d is not allowed", c, i)}
		}
	}
	return nil
}

// decodeMemberKey decodes a key of kind whose prefix names a member
// alone (a session or drain key), s without its prefix being rest.
func decodeMemberKey(kind Kind, s, rest string) (Key, error) {
	if strings.ContainsRune(rest, '/') {
		return Key{}, fmt.Errorf("%w: key %q: a %s key has one member", ErrMalformed, clip(s), kind)
	}
	return Key{Kind: kind, Member: MemberID(rest)}, nil
}
