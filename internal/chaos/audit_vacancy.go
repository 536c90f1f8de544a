package chaos

import (
	"fmt"
	"strings"
)

// A vacancy of a role, as the role topic shows it, begins when its
// holding ends and lasts until the next election fills it. The package
// documentation states the rule ("double-win"); this file applies it.

// vacancy is one vacancy of a role and the elections that won it.
type vacancy struct {
	role    string
	from    int64  // when the holding before it ended (system time, Unix ms)
	how     string // how that holding ended, with its member and token
	winners []Election
}

// vacancyAudit holds what auditVacancies looks up, per role and token
// and per member.
type vacancyAudit struct {
	h        History
	first    map[roleToken]Lease // the first committed lease of each token
	released map[roleToken]Lease // the first committed release of each token
	renewed  map[roleToken]int64 // lastRenewal
	byMember map[string][]Heartbeat
}

// ending is how and when a holding ended.
type ending struct {
	at       int64
	excluded bool   // by a heartbeat of its own session
	how      string // for the evidence
}

// holdingEnd says whether the holding of role under token t had ended by
// the system time at, and how: its release committed, its member
// session's end or a heartbeat of its session that excludes the role
// (begun no earlier than the token's first lease, both on the member's
// clock: rolestate.ExcludesLease), or its expiry a Lease after its last
// renewal. expiry is false for a token a take-back superseded: the
// take-back's lease renews the holding.
func (c *vacancyAudit) holdingEnd(role string, t Token, at int64, expiry bool) (ending, bool) {
	k := roleToken{role, t}
	l, ok := c.first[k]
	if !ok {
		return ending{}, false
	}
	end := ending{at: int64(1) << 62}
	if rel, ok := c.released[k]; ok && rel.Timestamp <= at {
		end = ending{at: rel.Timestamp, how: fmt.Sprintf("released at partition %d offset %d", rel.Partition, rel.Offset)}
	}
	if l.Session != nil {
		for _, hb := range c.byMember[l.Member] {
			if hb.Timestamp > at || hb.Timestamp >= end.at || !hb.Session.Keeps(*l.Session) {
				continue
			}
			switch {
			case hb.End:
				end = ending{at: hb.Timestamp, how: fmt.Sprintf("ended by its session's end at partition %d offset %d", hb.Partition, hb.Offset)}
			case hb.Excludes(role) && hb.GrantedAt >= l.GrantedAt:
				end = ending{at: hb.Timestamp, excluded: true, how: fmt.Sprintf("excluded by its session's heartbeat at partition %d offset %d", hb.Partition, hb.Offset)}
			}
		}
	}
	if expiry {
		if exp := max(c.renewed[k], l.Timestamp) + ms(c.h.Settings.Lease); exp <= at && exp < end.at {
			end = ending{at: exp, how: "expired"}
		}
	}
	return end, end.how != ""
}

// challengedAt is when e's challenge had returned its token at the
// latest: its minted line, else its elected line or first lease.
func challengedAt(e Election) int64 { return min(e.At, nonZero(e.Minted, e.At)) }

// auditVacancies: per role, every vacancy after the opening campaign is
// won once. An election by another member than the holding's before that
// holding ended is a second win of the vacancy that holding won; one by
// the holding's own member continues its holding (a take-back: package
// processor, rule 5), and fills no vacancy when its holding had just been
// excluded by its own heartbeat. A vacancy won more than once is a
// violation unless a fault that can hold a challenge in flight overlaps
// it (see docs/CHAOS.md, "double-win").
func auditVacancies(h History, r *Report, add addFunc) {
	c := &vacancyAudit{h: h, first: map[roleToken]Lease{}, released: map[roleToken]Lease{}, renewed: lastRenewal(h), byMember: map[string][]Heartbeat{}}
	for _, l := range h.Leases {
		k := roleToken{l.Role, l.Token}
		if _, ok := c.first[k]; !ok {
			c.first[k] = l
		}
		if _, ok := c.released[k]; !ok && l.Released() {
			c.released[k] = l
		}
	}
	of, _ := newEpochReleases(h)
	for k, l := range of {
		if rel, ok := c.released[k]; !ok || l.Timestamp < rel.Timestamp {
			c.released[k] = l
		}
	}
	for _, hb := range h.Heartbeats {
		c.byMember[hb.Member] = append(c.byMember[hb.Member], hb)
	}
	s := h.Settings
	judge := func(v *vacancy) {
		if v == nil || len(v.winners) == 0 {
			return
		}
		r.Vacancies++
		if len(v.winners) < 2 {
			return
		}
		r.WonTwice++
		var wins []string
		for _, w := range v.winners {
			l := c.first[roleToken{w.Role, w.Token}]
			wins = append(wins, fmt.Sprintf("%s token %s (lease at partition %d offset %d, minted %s)", w.Member, w.Token, l.Partition, l.Offset, stamp(challengedAt(w))))
		}
		if c.shadowed(v) {
			r.WonTwiceInAFault++
			return
		}
		add(KindDoubleWin, v.role, "won %d times within one vacancy (from %s, when %s), no winner's release before the next was minted and no fault that can hold a challenge in flight: %s",
			len(v.winners), stamp(v.from), v.how, strings.Join(wins, ", "))
	}
	var (
		v       *vacancy
		chain   []Election // the current holding: an election and its take-backs
		first   *Election
		opening int
	)
	for i := range r.Elections {
		e := r.Elections[i]
		if first == nil || first.Role != e.Role {
			judge(v)
			v, chain, first, opening = nil, []Election{e}, &r.Elections[i], 0
			continue
		}
		if h.Shutdown != 0 && e.At >= h.Shutdown {
			continue // the members leave in turn: not judged (as elections)
		}
		at := challengedAt(e)
		if at-first.At < ms(s.Lease) && opening < h.Members-1 {
			// The opening campaign (see auditElections): not judged.
			opening++
			chain = []Election{e}
			continue
		}
		// Has the holding ended? Its latest token by any rule, an earlier
		// one (before a take-back) only by a record of its own.
		var end ending
		ended := false
		for j, x := range chain {
			if en, ok := c.holdingEnd(e.Role, x.Token, at, j == len(chain)-1); ok && (!ended || en.at < end.at) {
				end, ended = en, true
				end.how = fmt.Sprintf("%s's token %s %s", x.Member, x.Token, en.how)
			}
		}
		own := e.Member == chain[0].Member
		switch {
		case own && !ended:
			chain = append(chain, e) // a take-back: the same holding
		case ended:
			judge(v)
			v = &vacancy{role: e.Role, from: end.at, how: end.how}
			if own && end.excluded {
				// Its own heartbeat excluded the role (a retired token,
				// an expired transactional id) and it took the role back
				// at once: others may race it for the vacancy (rule 6).
				chain = append(chain, e)
				continue
			}
			chain = []Election{e}
			v.winners = []Election{e}
		default:
			// Another member while the holding lasted: a second win of
			// the vacancy that holding won. (After the opening no
			// vacancy is open: the elections audit judges a takeover.)
			if v != nil {
				v.winners = append(v.winners, e)
			}
			chain = []Election{e}
		}
	}
	judge(v)
}

// shadowed reports whether a fault may have held a challenge of v in flight:
// a broker fault, or a fault of one of its winners (stopped, cut off,
// killed, restarted, exited), whose span [Start, End + RequestTimeout]
// overlaps [the vacancy's start or its first win, less a RequestTimeout,
// its last win].
func (c *vacancyAudit) shadowed(v *vacancy) bool {
	s := c.h.Settings
	from := min(v.from, challengedAt(v.winners[0])) - ms(s.RequestTimeout)
	to := challengedAt(v.winners[len(v.winners)-1])
	winner := map[string]bool{}
	for _, w := range v.winners {
		winner[w.Member] = true
	}
	for _, f := range c.h.Faults {
		if f.Start > to || f.End+ms(s.RequestTimeout) < from {
			continue
		}
		if f.Broker() || f.Member() && f.Kind != FaultShutdown && winner[f.Target] {
			return true
		}
	}
	return false
}
