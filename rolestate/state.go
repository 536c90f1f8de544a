package rolestate

import (
	"sort"
	"time"

	"github.com/krabka/krole/codec"
)

// Record is one decoded record of a role's partition
// (fencing.RoleRecord is this type).
type Record struct {
	Offset int64        // the record's offset in the role's partition
	Key    codec.Key    // the decoded key
	Record codec.Record // the decoded value; zero for a tombstone
}

// Candidate is a registered member of a role, ranked by the offset of its
// registration: rank 0 joined first.
type Candidate struct {
	Member codec.MemberID `json:"member"`
	// Offset is the registration's offset, the rank order (compaction
	// keeps offsets); a member that re-registers moves to the back.
	Offset       int64  `json:"offset"`
	RegisteredAt int64  `json:"registered_at"`      // registrant's wall clock, Unix ms; informative
	Value        string `json:"value,omitempty"`    // see [codec.Registration]
	Instance     string `json:"instance,omitempty"` // see [codec.Registration]
	Rank         int    `json:"rank"`               // 0 first; filled in, not stored

	// Session and Gone are set in the lookup API's rows only (Gone when
	// internal/liveness judges the session gone).
	Session *SessionSeen `json:"-"`
	Gone    bool         `json:"gone,omitempty"`
}

// State is one role as the role topic says it is: its latest lease (nil
// when none was ever written) and its candidates in rank order.
type State struct {
	Role codec.Role `json:"role"`
	// Lease is the latest lease record, possibly expired or a release
	// (ask [State.Live]); nil for none.
	Lease       *codec.Lease `json:"lease"`
	LeaseOffset int64        `json:"lease_offset"` // -1 without Lease
	// LastOffset is the latest applied record's offset (0: unknown): a
	// member registered below it that is not a candidate was removed.
	LastOffset int64 `json:"-"`
	// LeaseSeenAt is when the reader first saw Lease, on its own clock
	// (zero: unknown); the lease's span runs from here.
	LeaseSeenAt time.Time   `json:"-"`
	Candidates  []Candidate `json:"candidates"` // in rank order; nil for none
	// Session is the lease's member's latest authentic session record
	// when the lease names a session; else nil.
	Session *SessionSeen `json:"session,omitempty"`
}

// SessionSeen is a member's latest session record as a reader saw it.
type SessionSeen struct {
	Offset    int64           `json:"offset"`    // in the member's session partition
	Heartbeat codec.Heartbeat `json:"heartbeat"` // a heartbeat, or the session end
	SeenAt    time.Time       `json:"-"`         // on the reader's clock; zero: unknown
}

// Vouch is what a lease's member session says of the lease (see
// [SessionVouch]).
type Vouch uint8

const (
	// NoVouch: no record of the lease's incarnation is the latest; the
	// lease lives by its own span.
	NoVouch Vouch = iota
	// Vouched: the latest heartbeat is the incarnation's and keeps the
	// role; the lease lives until the later of its span and the
	// heartbeat's.
	Vouched
	// Dropped: the incarnation's latest record excludes the role
	// ([ExcludesLease]) or ends the session: the lease is over, as after
	// a release.
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
// l: h excludes role and began no earlier than l (GrantedAt, the member's
// clock). An earlier heartbeat's exclusion was of an earlier lease.
func ExcludesLease(h codec.Heartbeat, role codec.Role, l codec.Lease) bool {
	return h.Excludes(role) && ExclusionsReach(h, l)
}

// ExclusionsReach is [ExcludesLease] for a reader that knows h excludes
// l's role.
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
// ms, the reader's clock): a belief, not the broker's fence.
func (s State) Holder(nowMS int64) (codec.Lease, bool) {
	if !s.Live(time.UnixMilli(nowMS)) {
		return codec.Lease{}, false
	}
	return *s.Lease, true
}

// Fence returns the fencing number of s's lease's holding (package
// processor, "The fencing number"); -1 without a lease.
func (s State) Fence() int64 {
	if s.Lease == nil {
		return -1
	}
	if s.Lease.Fence > 0 {
		return s.Lease.Fence
	}
	return s.LeaseOffset
}

// LeaseEnd returns when s's lease runs out on the reader's clock
// ([State.Renewal]'s End); zero without a lease.
func (s State) LeaseEnd() time.Time {
	if s.Lease == nil {
		return time.Time{}
	}
	return s.Renewal().End
}

// Renewal is a lease's latest renewal as a reader saw it: the lease
// record, or a later heartbeat of its session that vouches for it.
type Renewal struct {
	GrantedAt, Deadline int64         // Unix ms, the holder's clock
	Span                time.Duration // [LeaseSpan] or [HeartbeatSpan]
	SeenAt              time.Time     // the reader's clock; zero: unknown
	Heartbeat           bool          // the renewal is a heartbeat
	Dropped             bool          // the session dropped the lease; End is when seen
	// End is when the lease runs out on the reader's clock: the later of
	// the lease's and the heartbeat's span from when each was seen (else
	// from GrantedAt).
	End time.Time
}

// Renewal returns the latest renewal of s's lease; zero without one.
func (s State) Renewal() Renewal {
	l := s.Lease
	if l == nil {
		return Renewal{}
	}
	r := Renewal{GrantedAt: l.GrantedAt, Deadline: l.Deadline, Span: LeaseSpan(*l), SeenAt: s.LeaseSeenAt}
	r.End = LeaseEndSeen(*l, s.LeaseSeenAt)
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

// LeaseEndSeen is when lease l runs out on the reader's clock by its own
// span ([LeaseSpan]) from seen, when the reader saw it (zero: from its
// GrantedAt): [State.LeaseEnd] with no session record to join.
func LeaseEndSeen(l codec.Lease, seen time.Time) time.Time {
	return seenOr(seen, l.GrantedAt).Add(LeaseSpan(l))
}

// seenOr returns seen, or the writer's wall clock ms when seen is zero.
func seenOr(seen time.Time, ms int64) time.Time {
	if seen.IsZero() {
		return time.UnixMilli(ms)
	}
	return seen
}

// Live reports whether s's lease holds at now, on the reader's clock.
func (s State) Live(now time.Time) bool {
	return s.Lease != nil && LiveUntil(*s.Lease, s.LeaseEnd(), now)
}

// LiveUntil is [State.Live] for lease l whose [State.LeaseEnd] is known.
func LiveUntil(l codec.Lease, end, now time.Time) bool {
	return !l.Released() && now.Before(end)
}

// Value returns the value member registered with and whether it is a
// candidate; the holder's value is its lease's.
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

// Confirmed is a role's state after a confirmation (processor.Source's
// Confirm): it holds every record committed when the confirmation began.
type Confirmed struct {
	State State
	// OpenProducerID and OpenOffset name the open transaction that holds
	// the partition's last stable offset below its high watermark, or -1.
	// The same offset twice shows readers frozen (docs/DESIGN.md, "Frozen
	// partitions").
	OpenProducerID int64
	OpenOffset     int64
}

// MaxLeaseSpan caps the span an observer credits a lease with, so no
// record keeps a role unheld longer.
const MaxLeaseSpan = 10 * time.Minute

// LeaseSpan returns Deadline - GrantedAt (the writer's clock offset
// cancels), capped at [MaxLeaseSpan]; 0 for a release.
func LeaseSpan(l codec.Lease) time.Duration {
	if l.Released() || l.Deadline <= l.GrantedAt {
		return 0
	}
	return min(time.Duration(l.Deadline-l.GrantedAt)*time.Millisecond, MaxLeaseSpan)
}
