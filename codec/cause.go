package codec

import "fmt"

// Cause says why a holder released a role, in its release lease
// ([ReleaseLease], Lease.Cause): a member of a group (package processor)
// writes one of the causes below, so that a reader tells a drain's
// handovers from a rebalance's by the release itself, in the role's own
// partition, not by the member's heartbeat, which lies in another
// partition and may be read after the releases it explains.
type Cause string

// The causes this package writes. A reader takes any other cause of the
// right shape (a newer writer's) as none: the release is a release
// whatever its cause.
const (
	// CauseRebalance: the group's plan gives the role to another member,
	// one below its share (one joined, or the holder is above its share).
	CauseRebalance Cause = "rebalance"
	// CauseDrain: the holder drains (Member.Drain or a drain request) and
	// hands every role over.
	CauseDrain Cause = "drain"
	// CauseLeave: the holder let the role go of its own accord: it stops
	// (Run's end), resigns or withdraws, or its work failed.
	CauseLeave Cause = "leave"
)

// MaxCauseLen is the longest cause a release carries, in bytes.
const MaxCauseLen = 32

// Known reports whether c is one of the causes this package writes.
func (c Cause) Known() bool {
	switch c {
	case CauseRebalance, CauseDrain, CauseLeave:
		return true
	}
	return false
}

// checkCause checks a cause's shape: "" (none) or 1 to [MaxCauseLen] of
// [a-z_], which leaves room for causes newer writers add.
func checkCause(c Cause) error {
	if len(c) > MaxCauseLen {
		return &InvalidError{What: "cause", Value: clipName(string(c)), Rule: fmt.Sprintf("a cause is 1-%d characters of [a-z_]", MaxCauseLen)}
	}
	for i := 0; i < len(c); i++ {
		if b := c[i]; !(b >= 'a' && b <= 'z' || b == '_') {
			return &InvalidError{What: "cause", Value: clipName(string(c)), Rule: fmt.Sprintf("a cause is 1-%d characters of [a-z_]: %q at byte %d is not allowed", MaxCauseLen, b, i)}
		}
	}
	return nil
}
