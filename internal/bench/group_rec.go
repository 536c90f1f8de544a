package bench

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/processor"
)

// groupEvent is a member's Elected or Revoked, stamped when its OnEvent
// ran (under the recorder's lock: the events are in the order of their
// times).
type groupEvent struct {
	at      time.Time
	member  codec.MemberID
	role    codec.Role
	elected bool
	reason  processor.Reason
}

// reasonKilled marks the holdings a killed member still had by its
// events when it stopped (it released nothing).
const reasonKilled processor.Reason = "killed"

// groupRec records the group's events and keeps who holds what by them.
type groupRec struct {
	mu      sync.Mutex
	roles   int
	events  []groupEvent
	holders map[codec.Role]map[codec.MemberID]bool
	held    map[codec.MemberID]int // roles each member holds
	live    map[codec.MemberID]bool
	once    int // roles with exactly one live holder
	// since: when the holdings last became balanced (zero: they are
	// not).
	since time.Time
	// last: the last event's time.
	last time.Time
}

func newGroupRec(roles int) *groupRec {
	return &groupRec{roles: roles, holders: map[codec.Role]map[codec.MemberID]bool{}, held: map[codec.MemberID]int{},
		live: map[codec.MemberID]bool{}}
}

// on is the members' OnEvent.
func (r *groupRec) on(ev processor.Event) {
	if ev.Kind != processor.Elected && ev.Kind != processor.Revoked {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.add(groupEvent{at: time.Now(), member: ev.Member, role: ev.Role, elected: ev.Kind == processor.Elected, reason: ev.Reason})
}

// add records ev and updates the holdings; r.mu held.
func (r *groupRec) add(ev groupEvent) {
	r.events = append(r.events, ev)
	r.last = ev.at
	hs := r.holders[ev.role]
	if hs == nil {
		hs = map[codec.MemberID]bool{}
		r.holders[ev.role] = hs
	}
	before := r.liveHolders(hs) == 1
	switch {
	case ev.elected && !hs[ev.member]:
		hs[ev.member] = true
		r.held[ev.member]++
	case !ev.elected && hs[ev.member]:
		delete(hs, ev.member)
		r.held[ev.member]--
	default:
		return
	}
	if after := r.liveHolders(hs) == 1; after != before {
		if after {
			r.once++
		} else {
			r.once--
		}
	}
	r.check(ev.at)
}

func (r *groupRec) liveHolders(hs map[codec.MemberID]bool) int {
	n := 0
	for m := range hs {
		if r.live[m] {
			n++
		}
	}
	return n
}

// setLive says whether member counts in the group; r.once is counted
// afresh.
func (r *groupRec) setLive(member codec.MemberID, live bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if live {
		r.live[member] = true
	} else {
		delete(r.live, member)
	}
	r.once = 0
	for _, hs := range r.holders {
		if r.liveHolders(hs) == 1 {
			r.once++
		}
	}
	r.check(time.Now())
}

// drop ends what member still holds by its events (a killed member's
// leases, which it did not release), as of now.
func (r *groupRec) drop(member codec.MemberID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	for role, hs := range r.holders {
		if hs[member] {
			r.add(groupEvent{at: now, member: member, role: role, reason: reasonKilled})
		}
	}
}

// balance returns whether every role has one live holder and no live
// member holds more than max(ceil(mean), 1.05 mean), and the most held
// over the mean; r.mu held.
func (r *groupRec) balance() (bool, float64, int) {
	n := len(r.live)
	if n == 0 {
		return false, 0, 0
	}
	most := 0
	for m := range r.live {
		most = max(most, r.held[m])
	}
	mean := float64(r.roles) / float64(n)
	limit := max(math.Ceil(mean), 1.05*mean)
	return r.once == r.roles && float64(most) <= limit, float64(most) / mean, most
}

// check notes when the holdings became balanced; r.mu held.
func (r *groupRec) check(at time.Time) {
	ok, _, _ := r.balance()
	switch {
	case !ok:
		r.since = time.Time{}
	case r.since.IsZero():
		r.since = at
	}
}

// settled is where a phase ended: when the holdings became balanced
// (and stayed so), the last event (the assignment stopped moving) and
// the most a member held over the mean then.
type settled struct {
	balanced, quiet time.Time
	ratio           float64
}

// awaitBalanced waits until the holdings are balanced and no event came
// for settle, and returns when they became balanced, the last event and
// the ratio; after bound, an error says how far they were.
func (r *groupRec) awaitBalanced(ctx context.Context, c Cluster, settle, bound time.Duration) (settled, error) {
	deadline := time.Now().Add(bound)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		r.mu.Lock()
		since, last := r.since, r.last
		once, live := r.once, len(r.live)
		_, now, most := r.balance()
		r.mu.Unlock()
		if !since.IsZero() && time.Since(since) >= settle && time.Since(last) >= settle {
			return settled{balanced: since, quiet: last, ratio: now}, nil
		}
		if time.Now().After(deadline) {
			return settled{}, fmt.Errorf("not balanced within %v: %d of %d roles held once, %d members hold at most %d (%.3f of the mean)%s",
				bound, once, r.roles, live, most, now, r.notOnce(5))
		}
		c.progress("group: %d/%d roles held once, most held %d (%.3f of the mean)", once, r.roles, most, now)
		select {
		case <-ctx.Done():
			return settled{}, ctx.Err()
		case <-tick.C:
		}
	}
}

// counts returns the elections and handovers since t.
func (r *groupRec) counts(t time.Time) (elections, handovers int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ev := range r.events {
		if ev.at.Before(t) {
			continue
		}
		if ev.elected {
			elections++
		} else if ev.reason == processor.ReasonHandedOver {
			handovers++
		}
	}
	return elections, handovers
}

// heldBy returns the roles member holds by its events.
func (r *groupRec) heldBy(member codec.MemberID) map[codec.Role]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[codec.Role]bool{}
	for role, hs := range r.holders {
		if hs[member] {
			out[role] = true
		}
	}
	return out
}

// groupGaps are the unheld gaps of a window.
type groupGaps struct {
	ms        []float64 // per gap, from the Revoked to the next Elected
	handovers int       // Revoked, handed over, in the window
	overlaps  int       // Revoked of a role another member held already
	unfilled  int       // gaps that no Elected ended
}

// gaps replays the events: every Revoked in [from, to] (only handovers,
// with handovers) that left its role without a holder starts a gap that
// the role's next Elected ends; one that left another holder is an
// overlap, a gap of 0.
func (r *groupRec) gaps(from, to time.Time, handovers bool) groupGaps {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out groupGaps
	holders := map[codec.Role]int{}
	open := map[codec.Role]time.Time{}
	for _, ev := range r.events {
		if ev.elected {
			holders[ev.role]++
			if t, ok := open[ev.role]; ok {
				out.ms = append(out.ms, ms(ev.at.Sub(t)))
				delete(open, ev.role)
			}
			continue
		}
		holders[ev.role]--
		if ev.at.Before(from) || ev.at.After(to) {
			continue
		}
		if ev.reason == processor.ReasonHandedOver {
			out.handovers++
		}
		if handovers && ev.reason != processor.ReasonHandedOver {
			continue
		}
		if holders[ev.role] > 0 {
			out.overlaps++
			out.ms = append(out.ms, 0)
			continue
		}
		open[ev.role] = ev.at
	}
	out.unfilled = len(open)
	return out
}

// kill reads the kill of member, which held victim, at killed, up to end.
func (r *groupRec) kill(member codec.MemberID, victim map[codec.Role]bool, killed, end time.Time) GroupKill {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := GroupKill{Killed: member, KilledRoles: len(victim)}
	first := map[codec.Role]time.Time{}
	elected := map[codec.Role]int{}
	others := map[codec.Role]bool{}
	for _, ev := range r.events {
		if ev.at.Before(killed) || ev.at.After(end) || ev.member == member {
			continue
		}
		if ev.elected {
			elected[ev.role]++
			if _, ok := first[ev.role]; !ok && victim[ev.role] {
				first[ev.role] = ev.at
			}
		} else if !victim[ev.role] {
			others[ev.role] = true
		}
	}
	k.HeldAgain, k.OthersMoved = len(first), len(others)
	for i, t := range mapValues(first) {
		d := t.Sub(killed).Seconds()
		if i == 0 || d < k.FirstS {
			k.FirstS = d
		}
		k.HeldAgainS = max(k.HeldAgainS, d)
	}
	for _, n := range elected {
		if n > 1 {
			k.DoubleWins++
		}
	}
	return k
}

func mapValues[K comparable, V any](m map[K]V) []V {
	out := make([]V, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// notOnce describes up to n roles that do not have one live holder by
// the events: their holders and their last events.
func (r *groupRec) notOnce(n int) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for role, hs := range r.holders {
		if n == 0 {
			break
		}
		if r.liveHolders(hs) == 1 {
			continue
		}
		n--
		fmt.Fprintf(&b, "\n  %s: held by %v; its last events:", role, slices.Sorted(maps.Keys(hs)))
		var last []groupEvent
		for _, ev := range r.events {
			if ev.role == role {
				last = append(last, ev)
			}
		}
		for _, ev := range last[max(0, len(last)-4):] {
			kind := "elected"
			if !ev.elected {
				kind = "revoked (" + string(ev.reason) + ")"
			}
			fmt.Fprintf(&b, " %s %s %s;", ev.at.Format("15:04:05.000"), ev.member, kind)
		}
	}
	return b.String()
}
