package server

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/rolestate"
	"github.com/krabka/krole/view"
)

// Defaults of [NewHistory].
const (
	DefaultHistoryWindow = time.Hour
	DefaultHistoryEvents = 256
)

// The kinds of a [Transition].
const (
	TransitionInitial  = "initial"  // the holder when the history started (or none)
	TransitionElected  = "elected"  // a holder after no holder was known
	TransitionHandover = "handover" // a holder after the previous one released the role
	TransitionFailover = "failover" // a holder after the previous one's lease ran out
	TransitionTakeover = "takeover" // a holder under a new token while the previous lease still looked live (cause fenced, or failover in the lease's last quarter)
	TransitionReleased = "released" // the holder released the role: no holder
	TransitionExpired  = "expired"  // the holder's lease ran out: no holder
	TransitionVacant   = "vacant"   // the lease record went away: no holder
	TransitionResumed  = "resumed"  // the holder whose lease had run out, as this server saw it, renewed under the same token
)

// The causes of a [Transition]: why its holder holds (for a transition
// with a holder) or why the previous one stopped (without).
const (
	CauseElected  = "elected"   // a holder after none was known (or after the lease record went away)
	CauseFailover = "failover"  // a holder after the previous one's lease ran out (or was in its last quarter, unrenewed: the new holder's view saw it run out first); or that lease running out
	CauseHandover = "handover"  // a holder after the previous one released the role; or that release
	CauseStepDown = "step-down" // as handover, but the server saw the holder's registration removed before its release (the operator's step-down, krole resign --member)
	CauseFenced   = "fenced"    // a holder under a new token while the previous lease still looked live, with more than a quarter of its span left since its last renewal: the broker fenced the previous token
	CauseResumed  = "resumed"   // the same holder and token after its lease looked run out: this server saw the renewal late (an outage, a stalled view)
	CauseVacant   = "vacant"    // the lease record went away
)

// Transition is one change of a role's holder, as the server's view saw
// it.
//
//	{"at":MS,"kind":K,"cause":C,
//	 "holder":{"member":M,"value":V,"token":{...},"fence":N} or null,
//	 "from":{"member":M,"value":V,"token":{...},"fence":N} (left out when none),
//	 "unheld_ms":N, "vouched_at":MS, "renew_ms":N, "lease_ms":N,
//	 "during_outage":BOOL}
//
// Zero fields are left out.
type Transition struct {
	// At is when the server saw the change (Unix ms, the server's clock).
	At int64 `json:"at"`
	// Kind is one of the Transition* constants.
	Kind string `json:"kind"`
	// Cause is one of the Cause* constants: why Holder holds, or, without
	// a holder, why From stopped; "" for the initial transition.
	Cause string `json:"cause,omitempty"`
	// Holder is the holder from then on, nil for none.
	Holder *HistoryHolder `json:"holder"`
	// From is the holder before: the one that stopped (a transition
	// without a holder) or the last one before Holder, across the time
	// the role was unheld; nil when none was seen.
	From *HistoryHolder `json:"from,omitempty"`
	// UnheldMS, for a transition with a holder, is how long the role had
	// no holder before it, as the server saw it (0 when the holder took
	// over a live lease, or none was seen before).
	UnheldMS int64 `json:"unheld_ms,omitempty"`
	// VouchedAt, for a transition with a holder, is when the server's
	// view saw that holder's latest renewal (Unix ms, the server's clock):
	// its lease record, or a heartbeat of its member session that vouches
	// for the role (the holder's renewal, [Holder].VouchedAt): the last
	// time the holder was known to be alive. A holding that ended by
	// running out was not renewed after it: the server cannot tell whether
	// its holder was alive then.
	VouchedAt int64 `json:"vouched_at,omitempty"`
	// RenewMS is the interval between the last two renewals the server
	// noted (0 before the second; it notes a renewal when a row of the
	// role comes, at a change or when the lease would end, so a holder
	// renewed by heartbeats shows about a lease's span), and LeaseMS the
	// span of the holder's lease ([rolestate.LeaseSpan]).
	RenewMS int64 `json:"renew_ms,omitempty"`
	LeaseMS int64 `json:"lease_ms,omitempty"`
	// DuringOutage, for a lease that ran out, says it was judged while
	// the server's view could not reach the cluster (see [Outage]): it ran
	// out only as far as this server could see. For a failover, it says
	// that the previous holder's silence (from its last renewal seen to
	// the change) overlapped an outage: this server cannot tell whether
	// that holder died or only went unseen.
	DuringOutage bool `json:"during_outage,omitempty"`
}

// Outage is a span of time during which the server's view could not reach
// the cluster ([view.Health].Unreachable): from its last contact with a
// broker to the next one. To is 0 while it lasts.
//
//	{"from":MS,"to":MS}
type Outage struct {
	From int64 `json:"from"`
	To   int64 `json:"to,omitempty"`
}

// HistoryHolder is a holder in a [Transition]; Fence is its holding's
// fencing number ([Holder].Fence).
type HistoryHolder struct {
	Member codec.MemberID `json:"member"`
	Value  string         `json:"value,omitempty"`
	Token  codec.Token    `json:"token"`
	Fence  int64          `json:"fence"`
}

// RoleHistory is a role's transitions in the history's window, oldest
// first, as GET /v1/roles/{role}/history answers it:
//
//	{"role":R,"since":MS,"now":MS,"transitions":[Transition,...],"outages":[Outage,...]}
//
// Since is the start of the window (or of the history, when later); the
// first transition may be older than Since when it states the holder at
// Since. Outages are the server's outages that overlap the window (the
// same for every role), oldest first, never null.
type RoleHistory struct {
	Role        codec.Role   `json:"role"`
	Since       int64        `json:"since"`
	Now         int64        `json:"now"`
	Transitions []Transition `json:"transitions"`
	Outages     []Outage     `json:"outages"`
}

// History keeps, in memory, the transitions of every role's holder over
// the last Window, at most Events per role, and the server's outages: a
// bounded record for the page's timeline and /v1/roles/{role}/history. It
// learns them by following a view ([History.Run]). Its methods are safe
// for concurrent use.
type History struct {
	window time.Duration
	max    int
	clock  func() time.Time

	mu      sync.Mutex
	started time.Time
	roles   map[codec.Role][]Transition
	holding map[codec.Role]*holding
	outages []Outage
}

// holding is what the history notes of a role's current holder beside its
// transition.
type holding struct {
	renewed      int64 // VouchedAt of the latest renewal seen of the holding (the holder's clock)
	candidate    bool  // the holder was a candidate in a row of the holding
	deregistered bool  // ... and then was not, while it held: an operator's step-down
}

// historyHealthEvery is how often [History.Run] reads the view's health
// for outages.
const historyHealthEvery = 500 * time.Millisecond

// NewHistory returns an empty history of the last window (default an
// hour) and at most events transitions per role (default 256), timed
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
	return &History{window: window, max: events, clock: clock,
		roles: map[codec.Role][]Transition{}, holding: map[codec.Role]*holding{}}
}

// Window returns how far back the history keeps transitions.
func (h *History) Window() time.Duration { return h.window }

// Run follows every role of t and records the changes of holder until ctx
// ends or the view stops. When t also reports its health (as *view.View
// does), Run reads it every half second and records the spans during which
// the view could not reach the cluster ([Outage]). It blocks; it returns
// nil when ctx ended, else the stream's error (see [Stream.Err]).
func (h *History) Run(ctx context.Context, t Lookuper) error {
	h.mu.Lock()
	h.started = h.clock()
	h.mu.Unlock()
	if hs, ok := t.(interface{ Health() view.Health }); ok {
		hctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			tick := time.NewTicker(historyHealthEvery)
			defer tick.Stop()
			for {
				h.noteHealth(hs.Health())
				select {
				case <-hctx.Done():
					return
				case <-tick.C:
				}
			}
		}()
		defer func() { stop(); <-done }()
	}
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

// noteHealth opens an outage when the view reports the cluster
// unreachable, from the view's last contact with a broker, and closes it
// at the next contact.
func (h *History) noteHealth(hl view.Health) {
	now := h.clock()
	h.mu.Lock()
	defer h.mu.Unlock()
	n := len(h.outages)
	ongoing := n > 0 && h.outages[n-1].To == 0
	switch {
	case hl.Unreachable && !ongoing:
		from := hl.LastContact
		if from.IsZero() || from.Before(h.started) {
			from = h.started
		}
		h.outages = append(h.outages, Outage{From: from.UnixMilli()})
	case !hl.Unreachable && ongoing:
		to := hl.LastContact
		if to.IsZero() || to.After(now) {
			to = now
		}
		h.outages[n-1].To = max(to.UnixMilli(), h.outages[n-1].From)
	}
	from := now.Add(-h.window).UnixMilli()
	i := 0
	for i < len(h.outages) && h.outages[i].To != 0 && h.outages[i].To < from {
		i++
	}
	if n := len(h.outages) - h.max; n > i {
		i = n
	}
	if i > 0 {
		h.outages = append([]Outage(nil), h.outages[i:]...)
	}
}

// record notes r when its holder differs from the last one noted, and a
// renewal or deregistration of the holder when it does not.
func (h *History) record(r Row, initial bool) {
	now := h.clock().UnixMilli()
	var cur *HistoryHolder
	if r.Holder != nil && !r.Holder.Expired {
		cur = &HistoryHolder{Member: r.Holder.Member, Value: r.Holder.Value, Token: r.Holder.Token, Fence: r.Holder.Fence}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	ts := h.roles[r.Role]
	var last *Transition
	if len(ts) > 0 {
		last = &ts[len(ts)-1]
	}
	if last != nil && sameHolder(last.Holder, cur) {
		if cur != nil {
			h.renewed(last, r, now)
		}
		return
	}
	if last != nil && last.Holder != nil && r.Holder != nil && !r.Holder.Released() &&
		sameHolder(last.Holder, &HistoryHolder{Member: r.Holder.Member, Token: r.Holder.Token}) {
		h.noteRenewal(last, r, now) // the holding's last renewal, seen before it ran out
	}
	t := Transition{At: now, Holder: cur}
	switch {
	case last == nil && initial:
		if cur == nil && r.Empty() {
			return
		}
		t.Kind = TransitionInitial
	case cur == nil && last == nil:
		return // a role first seen without a holder: nothing happened to it
	case cur == nil:
		t.From = last.Holder
		switch {
		case r.Holder == nil:
			t.Kind, t.Cause = TransitionVacant, CauseVacant
		case r.Holder.Released():
			t.Kind, t.Cause = TransitionReleased, CauseHandover
			if hd := h.holding[r.Role]; hd != nil && hd.deregistered {
				t.Cause = CauseStepDown
			}
		default:
			t.Kind, t.Cause = TransitionExpired, CauseFailover
		}
	case last == nil:
		t.Kind, t.Cause = TransitionElected, CauseElected
	case last.Holder != nil:
		t.Kind, t.Cause, t.From = TransitionTakeover, CauseFenced, last.Holder
		if last.LeaseMS > 0 && now-last.VouchedAt >= last.LeaseMS*3/4 {
			// The new holder saw the lease run out a little before this
			// server did: its last quarter, unrenewed, is a failover's.
			t.Cause = CauseFailover
		}
	default: // after a transition to no holder
		t.From = last.From
		if t.From != nil {
			t.UnheldMS = now - last.At
		}
		switch {
		case last.Kind == TransitionReleased:
			t.Kind, t.Cause = TransitionHandover, last.Cause
		case last.Kind == TransitionExpired && sameHolder(last.From, cur):
			t.Kind, t.Cause = TransitionResumed, CauseResumed
		case last.Kind == TransitionExpired:
			t.Kind, t.Cause = TransitionFailover, CauseFailover
		default:
			t.Kind, t.Cause = TransitionElected, CauseElected
		}
	}
	delete(h.holding, r.Role)
	if cur != nil {
		t.VouchedAt = renewalSeen(r.Holder, now)
		t.LeaseMS = rolestate.LeaseSpan(r.Holder.lease()).Milliseconds()
		h.holding[r.Role] = &holding{renewed: r.Holder.VouchedAt, candidate: isCandidate(r, cur.Member)}
	}
	ts = append(ts, t)
	h.roles[r.Role] = h.trim(ts, now)
}

// renewed notes, on the transition of the current holding, a renewal of
// its holder, and whether the holder is still a candidate.
func (h *History) renewed(last *Transition, r Row, now int64) {
	hd := h.noteRenewal(last, r, now)
	if isCandidate(r, r.Holder.Member) {
		hd.candidate, hd.deregistered = true, false
	} else if hd.candidate {
		hd.deregistered = true
	}
}

// noteRenewal notes on last, the transition of r's holding, the holder's
// latest renewal when it is newer than the one noted (a lease record, or
// a heartbeat of its member session: [Holder].VouchedAt), and returns the
// holding's notes.
func (h *History) noteRenewal(last *Transition, r Row, now int64) *holding {
	hd := h.holding[r.Role]
	if hd == nil {
		hd = &holding{renewed: r.Holder.VouchedAt}
		h.holding[r.Role] = hd
	}
	if r.Holder.VouchedAt > hd.renewed {
		hd.renewed = r.Holder.VouchedAt
		if seen := renewalSeen(r.Holder, now); seen > last.VouchedAt {
			if last.VouchedAt != 0 {
				last.RenewMS = seen - last.VouchedAt
			}
			last.VouchedAt = seen
		}
		last.LeaseMS = rolestate.LeaseSpan(r.Holder.lease()).Milliseconds()
	}
	return hd
}

// renewalSeen is when the view saw h's latest renewal (Unix ms, its
// clock), or now when the row does not say.
func renewalSeen(h *Holder, now int64) int64 {
	if h.Renewed.IsZero() {
		return now
	}
	return min(h.Renewed.UnixMilli(), now)
}

func isCandidate(r Row, m codec.MemberID) bool {
	for _, c := range r.Candidates {
		if c.Member == m {
			return true
		}
	}
	return false
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
	if len(ts) == 0 || ts[len(ts)-1].Holder == nil {
		delete(h.holding, role)
	}
	since := now.Add(-h.window)
	if h.started.After(since) {
		since = h.started
	}
	outages := []Outage{}
	for _, o := range h.outages {
		if o.To == 0 || o.To >= since.UnixMilli() {
			outages = append(outages, o)
		}
	}
	out := append([]Transition{}, ts...)
	for i, tr := range out {
		switch {
		case tr.Kind == TransitionExpired:
			out[i].DuringOutage = inOutage(h.outages, tr.At, tr.At)
		case tr.Holder != nil && tr.Cause == CauseFailover && i > 0:
			silent := out[i-1].At // the lease ran out: from the last renewal of the holding before it
			if out[i-1].Holder != nil {
				silent = out[i-1].VouchedAt
			} else if i > 1 && out[i-2].Holder != nil {
				silent = out[i-2].VouchedAt
			}
			out[i].DuringOutage = inOutage(h.outages, silent, tr.At)
		}
	}
	return RoleHistory{Role: role, Since: since.UnixMilli(), Now: now.UnixMilli(), Transitions: out, Outages: outages}
}

// inOutage reports whether the span from..to overlaps one of outages.
func inOutage(outages []Outage, from, to int64) bool {
	for _, o := range outages {
		if o.From <= to && (o.To == 0 || o.To >= from) {
			return true
		}
	}
	return false
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
