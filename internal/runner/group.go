package runner

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/election"
	"github.com/krabka/krole/group"
)

// MaxGroupRoles is the most roles [GroupRoles] accepts for one `krole
// run --roles`, as many as [MaxSlots]: a member alone in its group
// holds every role and runs a CMD, and that CMD's watchdog, for each, so
// 1024 roles can mean 2048 processes on one machine; and the group
// balancer was measured up to 1,000 roles (docs/BENCHMARKS.md, "Groups").
// A program on package processor has no such bound.
const MaxGroupRoles = MaxSlots

// DrainBudget bounds the drain of a leaving member of a group (see
// [Options].Drain), counted from when it begins. It is half of
// [LeaveBudget], and leaving afterwards gets the rest of LeaveBudget (at
// least the other half), so that a member that drains still exits
// within the bound that `krole run` states, plus the time its CMDs take
// to stop.
const DrainBudget = LeaveBudget / 2

// GroupRoles returns the roles that patterns name ([group.Expand]), in
// the order given. It fails, saying which pattern, when one is not a
// valid pattern, when two name one role, or when they name more than
// [MaxGroupRoles] roles.
func GroupRoles(patterns []string) ([]codec.Role, error) {
	if len(patterns) == 0 {
		return nil, fmt.Errorf("--roles names no role: give a pattern such as 'shard-{0..15}'")
	}
	var roles []codec.Role
	by := map[codec.Role]string{}
	for _, p := range patterns {
		rs, err := group.Expand(p)
		if err != nil {
			return nil, fmt.Errorf("--roles: %w", err) // the error names the pattern
		}
		if len(roles)+len(rs) > MaxGroupRoles {
			return nil, fmt.Errorf("--roles %s names more than %d roles, the most one krole run takes: "+
				"a member alone in the group runs a CMD for each (a larger group: package processor)",
				strings.Join(patterns, ","), MaxGroupRoles)
		}
		for _, r := range rs {
			if q, ok := by[r]; ok {
				return nil, fmt.Errorf("--roles: role %s is named twice (by %q and by %q)", r, q, p)
			}
			by[r] = p
		}
		roles = append(roles, rs...)
	}
	return roles, nil
}

// othersTake reports whether a live member of the group name other than
// me takes roles (one that is not draining): the only members a drain
// can hand roles to. When the view cannot tell within a second, it
// reports true, and the drain's own bound applies.
func othersTake(ctx context.Context, sess *election.Session, name string, me codec.MemberID) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	ms, err := sess.View().GroupMembers(ctx, name, time.Time{})
	if err != nil {
		return true
	}
	for _, m := range ms {
		if m.ID != me && m.Weight > 0 {
			return true
		}
	}
	return false
}

// drainFirst hands every role of the member's group over before it
// leaves (see [Options].Drain), within [DrainBudget], and says how it
// went. No CMD starts for a role won meanwhile; the CMD of each role
// handed over is stopped before the role is released, as the processor
// waits for the role's work (and keeps renewing the role) before it
// releases it.
func (s *session) drainFirst(ctx context.Context, sess *election.Session, name string) {
	s.mu.Lock()
	s.draining = true
	n := len(s.held)
	s.mu.Unlock()
	if !othersTake(ctx, sess, name, s.me) {
		if n > 0 {
			s.lines.Printf("no other live member of %s takes roles: leaving with %s", name, rolesCount(n))
		}
		return
	}
	dctx, cancel := context.WithTimeout(ctx, DrainBudget)
	defer cancel()
	if err := sess.Drain(dctx); err != nil {
		s.mu.Lock()
		n = len(s.held)
		s.mu.Unlock()
		s.lines.Printf("the drain did not end within %v (%v): leaving with %s", DrainBudget, err, rolesCount(n))
		return
	}
	s.lines.Printf("drained: holding no role of %s; leaving", name)
}

// rolesCount says how many roles the member still holds.
func rolesCount(n int) string {
	switch n {
	case 0:
		return "no role held"
	case 1:
		return "1 role held"
	}
	return fmt.Sprintf("%d roles held", n)
}
