package rolestate

import (
	"sort"
	"time"

	"github.com/krabka/krole/codec"
)

// Record is one record of a role's partition: its offset, decoded key and
// decoded value (a tombstone has a zero Record). fencing.RoleRecord is
// this type.
//
// The offset is the join sequence of a registration, because compaction
// keeps the offset of every record it retains. The succession rules rank
// candidates on it.
type Record struct {
	Offset int64        // the record's offset in the role's partition
	Key    codec.Key    // the decoded key
	Record codec.Record // the decoded value; zero for a tombstone
}

// Candidate is a registered member of a role, ranked by the offset of its
// registration: rank 0 joined first.
type Candidate struct {
	// Member is the registered member.
	Member codec.MemberID `json:"member"`

	// Offset is the offset of the member's registration record in the
	// role's partition. It orders the candidates: a member that
	// re-registers gets a new, higher offset and moves to the back.
	Offset int64 `json:"offset"`

	// RegisteredAt is the registering member's wall clock (Unix ms) as its
	// registration record says. It is informative only: the rank is by
	// Offset, never by this clock.
	RegisteredAt int64 `json:"registered_at"`

	// Value is the value the member registered with (see
	// [codec.Registration]); "" for none.
	Value string `json:"value,omitempty"`

	// Instance names the process that wrote the registration (see
	// [codec.Registration]); "" for none.
	Instance string `json:"instance,omitempty"`

	// Rank is the candidate's place among the role's candidates, 0 first.
	// The view's lookups and Fold fill it in; it is not stored.
	Rank int `json:"rank"`

	// Session is the latest record of the member's session, when the
	// reader joined it (the lookup API's rows do); nil otherwise: Fold and
	// the view leave it nil.
	Session *SessionSeen `json:"-"`

	// Gone is set in a row of the lookup API (package internal/server)
	// when the member's session is gone, as package internal/liveness
	// judges Session; false elsewhere.
	Gone bool `json:"gone,omitempty"`
}

// State is one role as the role topic says it is: its latest lease (nil
// when none was ever written) and its candidates in rank order.
type State struct {
	// Role is the role's name.
	Role codec.Role `json:"role"`

	// Lease is the role's latest lease record as written, nil when there is
	// none (never written, or deleted by a lease tombstone). It may have
	// expired, or be a release (see [codec.Lease.Released]): use
	// [State.Live] or [State.Holder] to ask whether it holds at a given
	// time.
	Lease *codec.Lease `json:"lease"`

	// LeaseOffset is the offset of Lease's record; -1 when Lease is nil.
	LeaseOffset int64 `json:"lease_offset"`

	// LastOffset is the offset of the latest record of the role the
	// reader applied (a lease, a registration, or a tombstone of either);
	// 0 when the reader does not say. A member that registered at an
	// offset below it and does not see its registration knows it was
	// removed: with the member session, a holder's renewals do not move
	// LeaseOffset past a candidate's registration.
	LastOffset int64 `json:"-"`

	// LeaseSeenAt is when the reader that built this state first saw
	// Lease's record, on the reader's own clock; zero when it does not
	// say. Time left on a lease, as an observer judges it, runs from here
	// (see [LeaseSpan]), never from the holder's wall-clock deadline.
	LeaseSeenAt time.Time `json:"-"`

	// Candidates are the role's registered members in rank order, Rank
	// filled in; nil when there are none.
	Candidates []Candidate `json:"candidates"`

	// Session is the latest authentic session record (a heartbeat or a
	// session end) of the lease's member, when Lease names a session
	// (codec.Lease.Session) and the reader has read one; nil otherwise.
	// Whether it keeps the lease alive is [State.LeaseEnd]'s to judge.
	Session *SessionSeen `json:"session,omitempty"`
}

// SessionSeen is a member's latest session record as a reader saw it.
type SessionSeen struct {
	// Offset is the record's offset in the member's session partition.
	Offset int64 `json:"offset"`
	// Heartbeat is the record: a heartbeat, or the session end.
	Heartbeat codec.Heartbeat `json:"heartbeat"`
	// SeenAt is when the reader first saw the record, on its own clock;
	// zero when it does not say.
	SeenAt time.Time `json:"-"`
}

// Vouch is what a lease's member session says of the lease (see
// [SessionVouch]).
type Vouch uint8

const (
	// NoVouch: the session says nothing of the lease (the lease names no
	// session, or no record of that incarnation was read, or the latest
	// is another incarnation's): the lease lives by its own span.
	NoVouch Vouch = iota
	// Vouched: the latest heartbeat is of the lease's incarnation and
	// does not exclude the role: the lease lives one heartbeat span from
	// when the reader saw it, or by its own span if that is later.
	Vouched
	// Dropped: the latest record of the lease's incarnation excludes the
	// role (a heartbeat begun no earlier than the lease: see
	// [ExcludesLease]), or ends the session: the lease holds no longer,
	// as after a release. The member writes either only once it no longer acts as
	// the role's holder: its work's context is cancelled first (a leaving
	// member's session end also waits for its work; a heartbeat that
	// excludes a stuck role, or the session end after a late heartbeat,
	// does not).
	Dropped
)

// SessionVouch says what s's session record says of s's lease.
func (s State) SessionVouch() Vouch {
	l, se := s.Lease, s.Session
	if l == nil || l.Session == nil || l.Released() || se == nil || se.Heartbeat.Member != l.Member ||
		!se.Heartbeat.Session.Keeps(*l.Session) {
		return NoVouch
	}
	if se.Heartbeat.End || ExcludesLease(se.Heartbeat, s.Role, *l) {
		return Dropped
	}
	if se.Heartbeat.Excludes(s.Role) {
		return NoVouch // an exclusion of an earlier lease of the role
	}
	return Vouched
}

// ExcludesLease reports whether heartbeat h, of l's incarnation, drops
// l, the member's lease of role: h excludes role, and h began no earlier
// than l (GrantedAt, both on the member's own wall clock). A heartbeat
// begun before l was written excludes an earlier lease of the role (one
// the member lost, or let go stuck): a member that takes a role back
// under the same incarnation writes its new lease while its latest
// heartbeat still excludes the role, until its next round. That exclusion
// does not drop the new lease: it lives by its own span until a
// heartbeat vouches for it. (A wall clock stepped back between the two
// can only make an exclusion look older, so a lease live by its own span
// for one round more: never a safety matter, the fence is.)
func ExcludesLease(h codec.Heartbeat, role codec.Role, l codec.Lease) bool {
	return h.Excludes(role) && ExclusionsReach(h, l)
}

// ExclusionsReach reports whether the roles heartbeat h excludes would
// drop lease l of one of them: h began no earlier than l (see
// [ExcludesLease], for a reader that already knows h excludes l's role).
func ExclusionsReach(h codec.Heartbeat, l codec.Lease) bool { return h.GrantedAt >= l.GrantedAt }

// HeartbeatSpan is [LeaseSpan] for a heartbeat: Deadline - GrantedAt,
// capped at [MaxLeaseSpan]; 0 for a session end.
func HeartbeatSpan(h codec.Heartbeat) time.Duration {
	if h.End || h.Deadline <= h.GrantedAt {
		return 0
	}
	return min(time.Duration(h.Deadline-h.GrantedAt)*time.Millisecond, MaxLeaseSpan)
}

// Holder returns the lease and true when s's lease is live at nowMS (Unix
// ms, on the reader's clock), as [State.Live] judges it. It is what the
// table believes, not what the broker enforces: only the broker's fence is
// authoritative.
func (s State) Holder(nowMS int64) (codec.Lease, bool) {
	if !s.Live(time.UnixMilli(nowMS)) {
		return codec.Lease{}, false
	}
	return *s.Lease, true
}

// Fence returns the fencing number of the holding s's lease belongs to
// (see package processor, "The fencing number"): the lease's Fence when
// it carries one, else the offset of the lease record (a holding's first
// lease, or one written without it); -1 when s has no lease. It is the
// same for every lease of a holding, so a reader that sees only a later
// one (compaction removed the first) reports the same number.
func (s State) Fence() int64 {
	if s.Lease == nil {
		return -1
	}
	if s.Lease.Fence > 0 {
		return s.Lease.Fence
	}
	return s.LeaseOffset
}

// LeaseEnd returns when s's lease runs out as the reader that built s
// judges it: [State.Renewal]'s End. It is the zero time when s has no
// lease.
//
// It is the one judgement of a lease's end: [State.Live], [State.Holder],
// the view's Holder and Leader lookups and package liveness (which the
// CLI and the HTTP API judge with) use it. The succession rules count
// from their own observation instead (see package processor), with the
// same spans and the same [State.SessionVouch].
func (s State) LeaseEnd() time.Time {
	if s.Lease == nil {
		return time.Time{}
	}
	return s.Renewal().End
}

// Renewal is a lease's latest renewal as the reader that built a State
// saw it: the lease record, or the latest heartbeat of the member session
// the lease names when that vouches for the role and began later.
type Renewal struct {
	// GrantedAt and Deadline are the renewal's (Unix ms, the holder's
	// clock): when its write began, and that plus its span.
	GrantedAt, Deadline int64
	// Span is [LeaseSpan] of the lease, or [HeartbeatSpan] of the
	// heartbeat.
	Span time.Duration
	// SeenAt is when the reader saw the renewal, on its clock; zero when
	// it does not say.
	SeenAt time.Time
	// Heartbeat: the renewal is a heartbeat, not the lease record.
	Heartbeat bool
	// Dropped: the session dropped the lease ([Dropped]); End is when the
	// reader saw that.
	Dropped bool
	// End is when the lease runs out as the reader judges it, on its
	// clock: the lease's span from when it was seen, or one heartbeat
	// span from when the vouching heartbeat was seen, whichever ends later
	// (a record without a SeenAt counts from its GrantedAt, the writer's
	// clock). A release ends when it was seen (span 0).
	End time.Time
}

// Renewal returns the latest renewal of s's lease and its end (see
// [Renewal]); the zero Renewal without a lease. A heartbeat of another
// incarnation says nothing: the lease lives by its own span alone, so an
// old lease never comes back to life through a later incarnation's
// heartbeats.
func (s State) Renewal() Renewal {
	l := s.Lease
	if l == nil {
		return Renewal{}
	}
	r := Renewal{GrantedAt: l.GrantedAt, Deadline: l.Deadline, Span: LeaseSpan(*l), SeenAt: s.LeaseSeenAt}
	r.End = seenOr(r.SeenAt, r.GrantedAt).Add(r.Span)
	switch s.SessionVouch() {
	case Dropped:
		r.Dropped, r.End = true, seenOr(s.Session.SeenAt, 0)
	case Vouched:
		h := s.Session.Heartbeat
		if end := seenOr(s.Session.SeenAt, h.GrantedAt).Add(HeartbeatSpan(h)); end.After(r.End) {
			r.End = end
		}
		if h.GrantedAt > l.GrantedAt {
			r.GrantedAt, r.Deadline, r.Span, r.SeenAt, r.Heartbeat = h.GrantedAt, h.Deadline, HeartbeatSpan(h), s.Session.SeenAt, true
		}
	}
	return r
}

// seenOr returns seen, or the writer's wall clock ms when seen is zero.
func seenOr(seen time.Time, ms int64) time.Time {
	if seen.IsZero() {
		return time.UnixMilli(ms)
	}
	return seen
}

// Live reports whether s's lease holds at now, on the reader's clock: s
// has a lease, it is not a release (a release is never live, under any
// clock), and now is before [State.LeaseEnd] (which a session's heartbeats
// move, see there).
func (s State) Live(now time.Time) bool {
	return s.Lease != nil && LiveUntil(*s.Lease, s.LeaseEnd(), now)
}

// LiveUntil is [State.Live] for lease l whose end (its [State.LeaseEnd])
// is known: a release is never live; another lease is live before its end.
func LiveUntil(l codec.Lease, end, now time.Time) bool {
	return !l.Released() && now.Before(end)
}

// Value returns the value member registered with and whether member is a
// candidate. It is a candidate's value, from a registration, which anyone
// with Write on the role topic can append: the holder's value is the one
// its lease carries (Lease.Value), written under its token.
func (s State) Value(member codec.MemberID) (string, bool) {
	for _, c := range s.Candidates {
		if c.Member == member {
			return c.Value, true
		}
	}
	return "", false
}

// Rank returns member's rank among the candidates, or -1 when it is not a
// candidate.
func (s State) Rank(member codec.MemberID) int {
	for i, c := range s.Candidates {
		if c.Member == member {
			return i
		}
	}
	return -1
}

// Clone returns a deep copy, safe to hand to another goroutine.
func (s State) Clone() State {
	c := s
	if s.Lease != nil {
		l := *s.Lease
		c.Lease = &l
	}
	c.Candidates = append([]Candidate(nil), s.Candidates...)
	if s.Session != nil {
		se := *s.Session
		se.Heartbeat.Excluded = append([]codec.Role(nil), se.Heartbeat.Excluded...)
		c.Session = &se
	}
	return c
}

// Fold applies records of one role, in offset order, to an empty state and
// returns the result: the same answer the view keeps incrementally. The
// succession rules use it on fencing.Transport.ReadRoleRecords.
func Fold(role codec.Role, records []Record) State {
	s := State{Role: role, LeaseOffset: -1}
	regs := map[codec.MemberID]Candidate{}
	for _, r := range records {
		if r.Key.Role != role {
			continue
		}
		s.LastOffset = max(s.LastOffset, r.Offset)
		switch r.Key.Kind {
		case codec.KindLease:
			if r.Record.Lease != nil {
				l := *r.Record.Lease
				s.Lease, s.LeaseOffset = &l, r.Offset
			} else if r.Record.Tombstone() {
				s.Lease, s.LeaseOffset = nil, -1
			}
		case codec.KindRegistration:
			if g := r.Record.Registration; g != nil {
				regs[r.Key.Member] = Candidate{Member: r.Key.Member, Offset: r.Offset, RegisteredAt: g.RegisteredAt, Value: g.Value, Instance: g.Instance}
			} else if r.Record.Tombstone() {
				delete(regs, r.Key.Member)
			}
		}
	}
	for _, c := range regs {
		s.Candidates = append(s.Candidates, c)
	}
	sort.Slice(s.Candidates, func(i, j int) bool { return s.Candidates[i].Offset < s.Candidates[j].Offset })
	for i := range s.Candidates {
		s.Candidates[i].Rank = i
	}
	return s
}

// Confirmed is a role's state read after a confirmation that the reader
// has caught up with the role's partition (processor.Source's Confirm):
// every record committed when the confirmation started is in State.
type Confirmed struct {
	// State is the role's state, current as of the confirmation.
	State State
	// OpenProducerID is the producer id of the transaction that holds the
	// partition's last stable offset below its high watermark (an open
	// transaction, which read_committed readers cannot read past until it
	// ends), or -1 when none does. A reader cannot tell what happened to
	// the role after that transaction began.
	OpenProducerID int64
	// OpenOffset is the first offset of that transaction (the partition's
	// last stable offset), or -1 when none holds readers back. Two
	// confirmations that show a transaction open at the same offset show
	// readers frozen behind it in between; a different offset shows them
	// moving.
	OpenOffset int64
}

// MaxLeaseSpan is the longest span an observer credits a lease with: a
// lease whose Deadline - GrantedAt is longer counts as this long, so a
// record written with a deadline far ahead cannot keep a role unheld for
// longer.
const MaxLeaseSpan = 10 * time.Minute

// LeaseSpan returns the time l grants its holder as an observer counts
// it: Deadline - GrantedAt, capped at [MaxLeaseSpan]; 0 for a release or
// a lease that grants nothing. It reads no clock: the span is the
// difference of two readings of the writer's clock, so a writer's clock
// offset does not change it.
func LeaseSpan(l codec.Lease) time.Duration {
	if l.Released() || l.Deadline <= l.GrantedAt {
		return 0
	}
	return min(time.Duration(l.Deadline-l.GrantedAt)*time.Millisecond, MaxLeaseSpan)
}
