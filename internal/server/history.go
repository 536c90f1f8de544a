package server

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/krabka/krole/codec"
)

// Defaults of [NewHistory].
const (
	DefaultHistoryWindow = 15 * time.Minute
	DefaultHistoryEvents = 256
)

// The kinds of a [Transition].
const (
	TransitionInitial  = "initial"  // the holder when the history started (or none)
	TransitionElected  = "elected"  // a holder after no holder was known
	TransitionHandover = "handover" // a holder after the previous one released the role
	TransitionFailover = "failover" // a holder after the previous one's lease ran out
	TransitionTakeover = "takeover" // a holder under a new token while the previous lease still looked live
	TransitionReleased = "released" // the holder released the role: no holder
	TransitionExpired  = "expired"  // the holder's lease ran out: no holder
	TransitionVacant   = "vacant"   // the lease record went away: no holder
)

// Transition is one change of a role's holder, as the server's view saw
// it.
//
//	{"at":MS,"kind":K,"holder":{"member":M,"value":V,"token":{...}} or null}
type Transition struct {
	// At is when the server saw the change (Unix ms, the server's clock).
	At int64 `json:"at"`
	// Kind is one of the Transition* constants.
	Kind string `json:"kind"`
	// Holder is the holder from then on, nil for none.
	Holder *HistoryHolder `json:"holder"`
}

// HistoryHolder is a holder in a [Transition].
type HistoryHolder struct {
	Member codec.MemberID `json:"member"`
	Value  string         `json:"value,omitempty"`
	Token  codec.Token    `json:"token"`
}

// RoleHistory is a role's transitions in the history's window, oldest
// first, as GET /v1/roles/{role}/history answers it:
//
//	{"role":R,"since":MS,"now":MS,"transitions":[Transition,...]}
//
// Since is the start of the window (or of the history, when later); the
// first transition may be older than Since when it states the holder at
// Since.
type RoleHistory struct {
	Role        codec.Role   `json:"role"`
	Since       int64        `json:"since"`
	Now         int64        `json:"now"`
	Transitions []Transition `json:"transitions"`
}

// History keeps, in memory, the transitions of every role's holder over
// the last Window, at most Events per role: a bounded record for the page's
// timeline and /v1/roles/{role}/history. It learns them by following a
// view ([History.Run]). Its methods are safe for concurrent use.
type History struct {
	window time.Duration
	max    int
	clock  func() time.Time

	mu      sync.Mutex
	started time.Time
	roles   map[codec.Role][]Transition
}

// NewHistory returns an empty history of the last window (default 15
// minutes) and at most events transitions per role (default 256), timed
// by clock (default time.Now; it must be the view's clock, against which
// leases run out).
func NewHistory(window time.Duration, events int, clock func() time.Time) *History {
	if window <= 0 {
		window = DefaultHistoryWindow
	}
	if events <= 0 {
		events = DefaultHistoryEvents
	}
	if clock == nil {
		clock = time.Now
	}
	return &History{window: window, max: events, clock: clock, roles: map[codec.Role][]Transition{}}
}

// Window returns how far back the history keeps transitions.
func (h *History) Window() time.Duration { return h.window }

// Run follows every role of t and records the changes of holder until ctx
// ends or the view stops. It blocks; it returns nil when ctx ended, else
// the stream's error (see [Stream.Err]).
func (h *History) Run(ctx context.Context, t Lookuper) error {
	h.mu.Lock()
	h.started = h.clock()
	h.mu.Unlock()
	st := Follow(ctx, t, h.clock)
	first := true
	for rows := range st.C {
		for _, r := range rows {
			h.record(r, first)
		}
		first = false
	}
	if ctx.Err() != nil {
		return nil
	}
	return st.Err()
}

// record notes r when its holder differs from the last one noted.
func (h *History) record(r Row, initial bool) {
	now := h.clock().UnixMilli()
	var cur *HistoryHolder
	if r.Holder != nil && !r.Holder.Expired {
		cur = &HistoryHolder{Member: r.Holder.Member, Value: r.Holder.Value, Token: r.Holder.Token}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	ts := h.roles[r.Role]
	var last *Transition
	if len(ts) > 0 {
		last = &ts[len(ts)-1]
	}
	var kind string
	switch {
	case last == nil && initial:
		if cur == nil && r.Empty() {
			return
		}
		kind = TransitionInitial
	case last != nil && sameHolder(last.Holder, cur):
		return
	case cur == nil && last == nil:
		return // a role first seen without a holder: nothing happened to it
	case cur == nil && r.Holder == nil:
		kind = TransitionVacant
	case cur == nil && r.Holder.Released():
		kind = TransitionReleased
	case cur == nil:
		kind = TransitionExpired
	case last == nil:
		kind = TransitionElected
	case last.Holder != nil:
		kind = TransitionTakeover
	case last.Kind == TransitionReleased:
		kind = TransitionHandover
	case last.Kind == TransitionExpired:
		kind = TransitionFailover
	default:
		kind = TransitionElected
	}
	ts = append(ts, Transition{At: now, Kind: kind, Holder: cur})
	h.roles[r.Role] = h.trim(ts, now)
}

func sameHolder(a, b *HistoryHolder) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return a.Member == b.Member && a.Token == b.Token
}

// trim drops what is older than the window, keeping the last transition
// before it (it says who held the role when the window starts), and keeps
// at most max transitions.
func (h *History) trim(ts []Transition, now int64) []Transition {
	from := now - h.window.Milliseconds()
	i := sort.Search(len(ts), func(i int) bool { return ts[i].At >= from })
	if i > 0 {
		i-- // the holder at the window's start
	}
	if n := len(ts) - h.max; n > i {
		i = n
	}
	if i == 0 {
		return ts
	}
	return append([]Transition(nil), ts[i:]...)
}

// Role returns role's transitions in the window, oldest first.
func (h *History) Role(role codec.Role) RoleHistory {
	now := h.clock()
	h.mu.Lock()
	defer h.mu.Unlock()
	ts := h.trim(h.roles[role], now.UnixMilli())
	if len(ts) == 0 {
		delete(h.roles, role)
	} else {
		h.roles[role] = ts
	}
	since := now.Add(-h.window)
	if h.started.After(since) {
		since = h.started
	}
	return RoleHistory{Role: role, Since: since.UnixMilli(), Now: now.UnixMilli(), Transitions: append([]Transition{}, ts...)}
}

// Roles returns the history of every role that has transitions in the
// window, sorted by role.
func (h *History) Roles() []RoleHistory {
	h.mu.Lock()
	roles := make([]codec.Role, 0, len(h.roles))
	for r := range h.roles {
		roles = append(roles, r)
	}
	h.mu.Unlock()
	sort.Slice(roles, func(i, j int) bool { return roles[i] < roles[j] })
	out := make([]RoleHistory, 0, len(roles))
	for _, r := range roles {
		if rh := h.Role(r); len(rh.Transitions) > 0 {
			out = append(out, rh)
		}
	}
	return out
}
