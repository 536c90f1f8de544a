package view

import (
	"strings"

	"github.com/krabka/krole/codec"
)

// names shares, across the table, the strings and sessions that many
// roles' records repeat: member ids, instances and values of
// registrations and leases, a registration's value and instance
// together, and the session a lease names (a member's leases name one
// session, its current one). Each record decodes its own copy; the table
// keeps the shared one. Guarded by index.mu.
//
// It is a cache, bounded: past maxNames entries it starts afresh, which
// costs sharing, never a name.
type names struct {
	strs   map[string]string
	sess   map[codec.Session]*codec.Session
	extras map[candExtra]*candExtra
}

// maxNames bounds the strings (and, apart, the sessions and the
// registrations' extras) names keeps.
const maxNames = 1 << 14

// str returns s, or the string equal to it already kept.
func (n *names) str(s string) string {
	if s == "" {
		return ""
	}
	if c, ok := n.strs[s]; ok {
		return c
	}
	if n.strs == nil || len(n.strs) >= maxNames {
		n.strs = make(map[string]string, 64)
	}
	c := strings.Clone(s) // not the bytes of a larger string s may be cut from
	n.strs[c] = c
	return c
}

// extra returns the shared candExtra of a registration's value and
// instance, nil when both are empty.
func (n *names) extra(value, instance string) *candExtra {
	if value == "" && instance == "" {
		return nil
	}
	if x, ok := n.extras[candExtra{value, instance}]; ok {
		return x
	}
	if n.extras == nil || len(n.extras) >= maxNames {
		n.extras = make(map[candExtra]*candExtra, 16)
	}
	x := &candExtra{n.str(value), n.str(instance)}
	n.extras[*x] = x
	return x
}

// member is str for a member id.
func (n *names) member(m codec.MemberID) codec.MemberID { return codec.MemberID(n.str(string(m))) }

// lease returns l with its strings and session shared. The session is
// shared by pointer: a lease's session is never written through (a
// State's Clone shares it too).
func (n *names) lease(l codec.Lease) codec.Lease {
	l.Member = n.member(l.Member)
	l.Value = n.str(l.Value)
	if l.Session != nil {
		s := *l.Session
		c, ok := n.sess[s]
		if !ok {
			if n.sess == nil || len(n.sess) >= maxNames {
				n.sess = make(map[codec.Session]*codec.Session, 16)
			}
			s.Nonce = n.str(s.Nonce)
			c = &s
			n.sess[s] = c
		}
		l.Session = c
	}
	return l
}
