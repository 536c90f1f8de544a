package rolestate

import (
	"sort"
	"time"

	"github.com/krabka/krole/codec"
)

// Record is one record of a role's partition: its offset, decoded key and
// decoded value (zero for a tombstone). fencing.RoleRecord is this type.
// A registration's offset is its rank: compaction keeps offsets.
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

	// Offset is the registration record's offset: the rank order. A
	// member that re-registers moves to the back.
	Offset int64 `json:"offset"`

	// RegisteredAt is the registrant's wall clock (Unix ms); informative
	// only.
	RegisteredAt int64 `json:"registered_at"`

	// Value is the value the member registered with (see
	// [codec.Registration]); "" for none.
	Value string `json:"value,omitempty"`

	// Instance names the process that wrote the registration (see
	// [codec.Registration]); "" for none.
	Instance string `json:"instance,omitempty"`

	// Rank is the candidate's place, 0 first (filled in, not stored).
	Rank int `json:"rank"`

	// Session is the member's latest session record in the lookup API's
	// rows; nil from Fold and the view.
	Session *SessionSeen `json:"-"`

	// Gone is set in lookup API rows when internal/liveness judges the
	// member's session gone.
	Gone bool `json:"gone,omitempty"`
}

// State is one role as the role topic says it is: its latest lease (nil
// when none was ever written) and its candidates in rank order.
type State struct {
	// Role is the role's name.
	Role codec.Role `json:"role"`

	// Lease is the role's latest lease record, nil when there is none. It
	// may have expired or be a release: ask [State.Live].
	Lease *codec.Lease `json:"lease"`

	// LeaseOffset is the offset of Lease's record; -1 when Lease is nil.
	LeaseOffset int64 `json:"lease_offset"`

	// LastOffset is the offset of the role's latest applied record (0:
	// unknown). A member registered below it that does not see its
	// registration knows it was removed.
	LastOffset int64 `json:"-"`

	// LeaseSeenAt is when the reader first saw Lease's record, on its own
	// clock (zero: unknown); a lease's span runs from here.
	LeaseSeenAt time.Time `json:"-"`

	// Candidates are the role's registered members in rank order, Rank
	// filled in; nil when there are none.
	Candidates []Candidate `json:"candidates"`

	// Session is the latest authentic session record of the lease's
	// member when Lease names a session; nil otherwise.
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
	// role ([ExcludesLease]) or ends the session: the lease holds no
	// longer, as after a release. The member cancels the role's work
	// before writing either (only a leaving member's session end also
	// waits for work to return).
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
// l: h excludes role and began no earlier than l (both GrantedAt, the
// member's clock). An earlier heartbeat's exclusion is of an earlier
// lease of the role, which the member may take back before its next
// round. A clock stepped back only keeps a lease live one round longer.
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

// Fence returns the fencing number of the holding of s's lease (see
// package processor, "The fencing number"): the lease's Fence, else the
// lease record's offset; -1 without a lease. It survives compaction.
func (s State) Fence() int64 {
	if s.Lease == nil {
		return -1
	}
	if s.Lease.Fence > 0 {
		return s.Lease.Fence
	}
	return s.LeaseOffset
}

// LeaseEnd returns when s's lease runs out as its reader judges it
// ([State.Renewal]'s End); zero without a lease. The succession rules
// count from their own observation instead, with the same spans.
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
	// End is when the lease runs out on the reader's clock: the later of
	// the lease's and the vouching heartbeat's span from when each was
	// seen (without SeenAt, from GrantedAt). A release ends when seen.
	End time.Time
}

// Renewal returns the latest renewal of s's lease; zero without one.
// Another incarnation's heartbeat never revives a lease.
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

// Live reports whether s's lease holds at now, on the reader's clock:
// it is not a release and now is before [State.LeaseEnd].
func (s State) Live(now time.Time) bool {
	return s.Lease != nil && LiveUntil(*s.Lease, s.LeaseEnd(), now)
}

// LiveUntil is [State.Live] for lease l whose end (its [State.LeaseEnd])
// is known: a release is never live; another lease is live before its end.
func LiveUntil(l codec.Lease, end, now time.Time) bool {
	return !l.Released() && now.Before(end)
}

// Value returns the value member registered with and whether it is a
// candidate. Registrations are plain appends; the holder's value is its
// lease's (Lease.Value), written under its token.
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

// Fold applies one role's records, in offset order, to an empty state:
// the answer the view keeps incrementally.
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
	// OpenProducerID is the producer id of the open transaction holding
	// the partition's last stable offset below its high watermark, or -1.
	// What happened after it began is hidden from read_committed readers.
	OpenProducerID int64
	// OpenOffset is that transaction's first offset (the last stable
	// offset), or -1. The same offset in two confirmations shows readers
	// frozen in between (see docs/DESIGN.md, "Frozen partitions").
	OpenOffset int64
}

// MaxLeaseSpan is the longest span an observer credits a lease with, so
// that no record can keep a role unheld for longer.
const MaxLeaseSpan = 10 * time.Minute

// LeaseSpan returns the time l grants its holder as an observer counts
// it: Deadline - GrantedAt (two readings of the writer's clock, so its
// offset cancels), capped at [MaxLeaseSpan]; 0 for a release or a lease
// that grants nothing.
func LeaseSpan(l codec.Lease) time.Duration {
	if l.Released() || l.Deadline <= l.GrantedAt {
		return 0
	}
	return min(time.Duration(l.Deadline-l.GrantedAt)*time.Millisecond, MaxLeaseSpan)
}
