package chaos

import (
	"fmt"
	"sort"
	"time"
)

// This file holds the audits of holdings and writes: overlapping
// holdings (overlap), a commit under a token after a newer one was minted
// (after-mint), sequence numbers and writes that returned an error
// (sequence, zombie), and unheld gaps (gap). docs/CHAOS.md, "The
// audits", states each rule and its bound.

// process is one run of a member program: its events from its "start"
// line up to the next one, in system-time order.
type process struct {
	member string
	events []Event
}

// processes splits the events into member processes: per member, in
// system-time order, a new process at each "start" line. Events before a
// member's first start line (hand-made histories) form a process too.
func processes(h History) []*process {
	var out []*process
	cur := map[string]*process{}
	for _, e := range sortedEvents(h.Events) {
		p := cur[e.Member]
		if p == nil || e.Kind == "start" {
			p = &process{member: e.Member}
			cur[e.Member] = p
			out = append(out, p)
		}
		p.events = append(p.events, e)
	}
	return out
}

type roleToken struct {
	role  string
	token Token
}

// lastLease is, per role and token, the latest system time at which a
// committed lease (or release) of that token was begun: its batch
// timestamp, which the writer's fencing transport sets from the system
// clock when it builds the batch, after the write began and before it
// committed.
func lastLease(h History) map[roleToken]int64 {
	m := map[roleToken]int64{}
	for _, l := range h.Leases {
		k := roleToken{l.Role, l.Token}
		m[k] = max(m[k], l.Timestamp)
	}
	return m
}

// lastRenewal is, per role and token, the latest system time at which a
// renewal of that token's holding was begun: its last committed lease (or
// release, lastLease), or, for a lease that names a member session, the
// latest committed heartbeat of that session (the same member, producer
// id and nonce, an epoch at least the lease's: Session.Keeps) that does
// not exclude the role, or the session's end (a release of every lease
// naming it). A heartbeat counts at its batch timestamp, taken after its
// round began, but at most at the earliest minted (or elected) line of a
// newer token of the role, and at most at the token's first release: a
// round vouches for a role only when its DescribeTransactions, sent at
// the round's start, still shows the token, so a round that vouched
// began before the newer token was minted (its minted line comes after
// the coordinator minted it), whatever its heartbeat's timestamp; and the
// member's later rounds, which still name the session, renew nothing of
// a holding that ended (package processor, "Member sessions"). Heartbeats
// committed before the lease change nothing: the lease's own timestamp
// is later.
func lastRenewal(h History) map[roleToken]int64 {
	m := lastLease(h)
	if len(h.Heartbeats) == 0 {
		return m
	}
	type named struct {
		member string
		s      Session
	}
	sessions := map[roleToken][]named{}
	released := map[roleToken]int64{}
	for _, l := range h.Leases {
		k := roleToken{l.Role, l.Token}
		if l.Released() {
			if at, ok := released[k]; !ok || l.Timestamp < at {
				released[k] = l.Timestamp
			}
		}
		if l.Session == nil {
			continue
		}
		n := named{l.Member, *l.Session}
		dup := false
		for _, x := range sessions[k] {
			dup = dup || x == n
		}
		if !dup {
			sessions[k] = append(sessions[k], n)
		}
	}
	byMember := map[string][]Heartbeat{}
	for _, hb := range h.Heartbeats {
		byMember[hb.Member] = append(byMember[hb.Member], hb)
	}
	minted := mints(h)
	for k, ns := range sessions {
		limit := int64(1) << 62
		for t, at := range minted[k.role] {
			if k.token.Less(t) {
				limit = min(limit, at)
			}
		}
		if at, ok := released[k]; ok {
			limit = min(limit, at)
		}
		for _, n := range ns {
			for _, hb := range byMember[n.member] {
				if hb.Session.Keeps(n.s) && (hb.End || !hb.Excludes(k.role)) {
					m[k] = max(m[k], min(hb.Timestamp, limit))
				}
			}
		}
	}
	return m
}

// auditOverlap (a): a holder may believe it holds a role until its local
// deadline: HeartbeatDeadline after the start of its last successful lease
// write, or of the last member-session round that vouched for the role,
// which is at most the system time of the token's last renewal
// (lastRenewal: its last committed lease, or the last heartbeat of its
// session that vouched for it; or its elected line, when later) +
// HeartbeatDeadline, moved to
// the SIGCONT when a SIGSTOP of its process spans that deadline or begins
// within Tolerance after it (a stopped process can do nothing, not even
// give up). Its own log shows it holding until its revoked line for the
// token, or, without one, until the last line its process wrote. If that is later than the
// deadline + Tolerance while a newer token of the role had already been
// elected, two holdings overlapped beyond what the fence allows.
func auditOverlap(h History, els []Election, add addFunc) {
	s := h.Settings
	last := lastRenewal(h)
	// per role, the elections in token order (els is sorted so)
	byRole := map[string][]Election{}
	for _, e := range els {
		byRole[e.Role] = append(byRole[e.Role], e)
	}
	for _, p := range processes(h) {
		for i, e := range p.events {
			if e.Kind != "elected" {
				continue
			}
			k := roleToken{e.Role, e.Token()}
			end, how := p.events[len(p.events)-1], "its last line (no revoked line)"
			for _, x := range p.events[i+1:] {
				if x.Kind == "revoked" && x.Role == e.Role && x.Token() == e.Token() {
					end, how = x, "its revoked line ("+x.Reason+")"
					break
				}
			}
			base := max(e.Wall, last[k])
			deadline := base + ms(s.renewDeadline())
			for moved := true; moved; {
				moved = false
				for _, f := range h.Faults {
					if f.Kind == FaultStop && f.Target == p.member && f.Start <= deadline+ms(s.Tolerance) && deadline < f.End {
						deadline, moved = f.End, true
					}
				}
			}
			if end.Wall <= deadline+ms(s.Tolerance) {
				continue
			}
			for _, n := range byRole[e.Role] {
				if !e.Token().Less(n.Token) || n.At >= end.Wall {
					continue
				}
				add(KindOverlap, e.Role, "%s held under token %s (elected %s, last renewal begun %s, local deadline %s) and still held by %s at %s, %d ms past its deadline (tolerance %d ms), while %s held the role under newer token %s since %s",
					p.member, e.Token(), stamp(e.Wall), stamp(base), stamp(deadline), how, stamp(end.Wall), end.Wall-deadline, s.Tolerance.Milliseconds(), n.Member, n.Token, stamp(n.At))
				break
			}
		}
	}
}

// mints is, per role, the tokens minted (the minted line, else the
// elected line) with the earliest system time each was known to exist.
func mints(h History) map[string]map[Token]int64 {
	m := map[string]map[Token]int64{}
	for _, e := range h.Events {
		if e.Kind != "minted" && e.Kind != "elected" {
			continue
		}
		if m[e.Role] == nil {
			m[e.Role] = map[Token]int64{}
		}
		if at, ok := m[e.Role][e.Token()]; !ok || e.Wall < at {
			m[e.Role][e.Token()] = e.Wall
		}
	}
	return m
}

// auditAfterMint (b): once AcquireEpoch has returned a token of a role
// (the minted line, written after it returned), the coordinator has fenced
// every older token of the role, so no write under an older token can
// commit after it: a committed lease, numbered record or stream output
// whose write began after a newer token's minted line (its batch
// timestamp, set from the system clock when the batch was built; for a
// numbered record also its write line's begin time) is a violation,
// whether or not the newer token ever wrote anything.
func auditAfterMint(h History, add addFunc) {
	ms := mints(h)
	began := map[string]int64{} // role/token/seq -> the write's begin
	for _, e := range h.Events {
		if e.Kind == "write" {
			began[fmt.Sprintf("%s/%s/%d", e.Role, e.Token(), e.Seq)] = e.Began
		}
	}
	// newer returns the earliest-minted token of role newer than t
	// minted before at, if any.
	newer := func(role string, t Token, at int64) (Token, int64, bool) {
		var best Token
		bestAt, found := int64(0), false
		for u, m := range ms[role] {
			if t.Less(u) && m < at && (!found || m < bestAt) {
				best, bestAt, found = u, m, true
			}
		}
		return best, bestAt, found
	}
	judge := func(role, what string, b Batch, at int64) {
		if u, m, ok := newer(role, b.Token(), at); ok {
			add(KindAfterMint, role, "%s under token %s at partition %d offset %d was begun at %s, %d ms after newer token %s was minted (%s), and committed",
				what, b.Token(), b.Partition, b.Offset, stamp(at), at-m, u, stamp(m))
		}
	}
	for _, l := range h.Leases {
		judge(l.Role, "a lease of "+l.Member, l.Batch, l.Timestamp)
	}
	for _, r := range h.Records {
		at := max(r.Timestamp, began[fmt.Sprintf("%s/%s/%d", r.Role, r.Token(), r.Seq)])
		judge(r.Role, fmt.Sprintf("record seq %d of %s", r.Seq, r.Member), r.Batch, at)
	}
	for _, o := range h.Outputs {
		judge(h.StreamRole, fmt.Sprintf("stream output %q", o.Value), o.Batch, o.Timestamp)
	}
}

// auditSequences (c): per role and token, the committed numbered records
// carry each sequence number once and in increasing offset order (a
// holder writes them one at a time, each after the last returned); and no
// record is committed whose write line says the call returned an error
// other than OutcomeMayHaveCommitted.
func auditSequences(h History, add addFunc) {
	writes := map[string]Event{}
	for _, e := range h.Events {
		if e.Kind == "write" {
			writes[fmt.Sprintf("%s/%s/%d", e.Role, e.Token(), e.Seq)] = e
		}
	}
	type seen struct {
		at   map[int64]int64 // seq -> offset
		last Record
		any  bool
	}
	per := map[roleToken]*seen{}
	for _, r := range h.Records {
		k := roleToken{r.Role, r.Token()}
		sn := per[k]
		if sn == nil {
			sn = &seen{at: map[int64]int64{}}
			per[k] = sn
		}
		switch off, dup := sn.at[r.Seq]; {
		case dup:
			add(KindSequence, r.Role, "record seq %d of %s under token %s is committed twice: partition %d offsets %d and %d",
				r.Seq, r.Member, r.Token(), r.Partition, off, r.Offset)
		case sn.any && r.Seq < sn.last.Seq:
			add(KindSequence, r.Role, "record seq %d of %s under token %s is committed at partition %d offset %d, after seq %d at offset %d",
				r.Seq, r.Member, r.Token(), r.Partition, r.Offset, sn.last.Seq, sn.last.Offset)
		}
		if _, dup := sn.at[r.Seq]; !dup {
			sn.at[r.Seq] = r.Offset
		}
		if !sn.any || r.Seq > sn.last.Seq {
			sn.last, sn.any = r, true
		}
		if w, ok := writes[fmt.Sprintf("%s/%s/%d", r.Role, r.Token(), r.Seq)]; ok && w.Outcome != OutcomeOK && w.Outcome != OutcomeMayHaveCommitted {
			add(KindZombie, r.Role, "the write of record seq %d under token %s returned %s to %s at %s (%s), yet the record is committed at partition %d offset %d",
				r.Seq, r.Token(), w.Outcome, w.Member, stamp(w.Wall), w.Err, r.Partition, r.Offset)
		}
	}
}

// Gap is one judged stretch of a role without a holder: from the start
// of the last committed lease (or release) of one holding to the next
// election, or to the shutdown.
type Gap struct {
	Role          string
	From, To      int64 // system time, Unix ms
	Bound         time.Duration
	After, Before Token // the holdings on either side; Before is zero at the shutdown
}

// Took is the gap's length.
func (g Gap) Took() time.Duration { return time.Duration(g.To-g.From) * time.Millisecond }

// GapBound is the longest role may stay without a holder from the start
// of the last committed lease at g of holder's holding, while a
// candidate is live: Lease + Renew + Stagger*(Members-1) + Tolerance (the
// lease runs out, at most a heartbeat interval after it was begun for the
// time it takes to commit and be read, then the candidates challenge in
// turn, those ahead in rank possibly down), plus, for every fault whose
// span [Start, End + RequestTimeout] overlaps [g, g + the bound], counted
// as the bound grows until no more overlaps (the chain rule of
// [FailoverBound]):
//
//   - a broker fault (a stall included): its length End-Start plus one
//     RequestTimeout;
//   - a member fault (kill, stop, partition, restart, exit) of holder, or
//     of a member that minted a token of role from g until the fault's
//     End + RequestTimeout (a challenge of its own the fault may have cut
//     short): Lease + RequestTimeout, not its length: such a challenge
//     (a token minted late, a lease write left open) can make the
//     candidates that lost to it wait a lease for a newer lease (package
//     processor), after a request given up on;
//   - any other member fault: RequestTimeout + Stagger*(Members-1): the
//     member is passed over within the base's stagger, but a transaction
//     of another role it left open holds back the readers of the
//     partition until the transaction timeout (the suite's 1 s, the
//     request timeout), and the candidates' turns count again from then.
//
// Member starts and clock offsets add nothing.
func GapBound(h History, role, holder string, g int64) time.Duration {
	return newGapBounds(h).bound(role, holder, g, nil)
}

// gapBounds computes GapBound for many gaps of one history: the faults in
// order of their start, the minted lines per role and member in order.
type gapBounds struct {
	h      History
	faults []Fault
	mints  map[[2]string][]int64 // role, member -> minted lines' system times, ascending
}

func newGapBounds(h History) *gapBounds {
	b := &gapBounds{h: h, faults: append([]Fault(nil), h.Faults...), mints: map[[2]string][]int64{}}
	sort.SliceStable(b.faults, func(i, j int) bool { return b.faults[i].Start < b.faults[j].Start })
	for _, e := range h.Events {
		if e.Kind == "minted" {
			k := [2]string{e.Role, e.Member}
			b.mints[k] = append(b.mints[k], e.Wall)
		}
	}
	for _, ts := range b.mints {
		sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
	}
	return b
}

// minted reports whether member minted a token of role in [from, to].
func (b *gapBounds) minted(role, member string, from, to int64) bool {
	ts := b.mints[[2]string{role, member}]
	i := sort.Search(len(ts), func(i int) bool { return ts[i] >= from })
	return i < len(ts) && ts[i] <= to
}

// bound is GapBound, without the fault trigger when it is not nil (the
// failover's own cause, which the base covers). The faults are taken in
// order of their start: one that begins after g + the bound so far ends
// the chain, since the bound grows only by the faults it takes, and
// every later one begins later still.
func (b *gapBounds) bound(role, holder string, g int64, trigger *Fault) time.Duration {
	s := b.h.Settings
	staggers := time.Duration(max(b.h.Members-1, 0)) * s.Stagger
	bound := s.Lease + s.Renew + staggers + s.Tolerance + s.Takeover
	for _, f := range b.faults {
		if f.Start > g+ms(bound) {
			break
		}
		if f.End+ms(s.RequestTimeout) < g || trigger != nil && f == *trigger {
			continue
		}
		switch {
		case f.Broker():
			bound += time.Duration(f.End-f.Start)*time.Millisecond + s.RequestTimeout
		case f.Member() && f.Kind != FaultShutdown:
			if f.Target == holder || b.minted(role, f.Target, g, f.End+ms(s.RequestTimeout)) {
				bound += s.Lease + s.RequestTimeout
			} else {
				bound += s.RequestTimeout + staggers
			}
		}
	}
	return bound
}

// allDown reports whether, at some time in [from, to], every member
// process was down (killed, stopped, cut off, restarting, or ended on its
// own and not yet started again), so that no candidate was live.
func allDown(h History, from, to int64) bool {
	if h.Members <= 0 {
		return false
	}
	type span struct{ from, to int64 }
	down := map[string][]span{}
	var starts []Fault
	for _, f := range h.Faults {
		if f.Kind == FaultStart {
			starts = append(starts, f)
		}
	}
	nextStart := func(m string, at int64) int64 {
		n := int64(1) << 62
		for _, f := range starts {
			if f.Target == m && f.Start >= at && f.Start < n {
				n = f.Start
			}
		}
		return n
	}
	for _, f := range h.Faults {
		switch f.Kind {
		case FaultStop, FaultPartition:
			down[f.Target] = append(down[f.Target], span{f.Start, f.End})
		case FaultKill, FaultRestart, FaultExit:
			down[f.Target] = append(down[f.Target], span{f.Start, max(f.End, nextStart(f.Target, f.Start))})
		}
	}
	if len(down) < h.Members {
		return false
	}
	instants := []int64{from}
	for _, ss := range down {
		for _, sp := range ss {
			if sp.from > from && sp.from <= to {
				instants = append(instants, sp.from)
			}
		}
	}
	for _, t := range instants {
		n := 0
		for _, ss := range down {
			for _, sp := range ss {
				if sp.from <= t && t < sp.to {
					n++
					break
				}
			}
		}
		if n >= h.Members {
			return true
		}
	}
	return false
}

// auditGaps (d): per role, between consecutive elections (in token
// order), the role is without a holder from the start of the earlier
// holding's last committed lease (or release) to the later election; and
// after its last election, to the shutdown. Each such gap longer than
// [GapBound] is a violation, unless at some moment in it every member
// process was down. The first election of a role is the opening, not
// judged. A gap that the shutdown cuts is judged up to the shutdown.
func auditGaps(h History, r *Report, add addFunc) {
	last := lastRenewal(h)
	bounds := newGapBounds(h)
	judge := func(g Gap, holder string, next *Election) {
		if g.To <= g.From {
			return
		}
		g.Bound = bounds.bound(g.Role, holder, g.From, nil)
		r.Gaps = append(r.Gaps, g)
		if g.Took() <= g.Bound || allDown(h, g.From, g.To) {
			return
		}
		if next != nil {
			add(KindGap, g.Role, "no holder from %s (the last renewal of token %s begun) to %s (%s elected under token %s): %d ms, bound %d ms",
				stamp(g.From), g.After, stamp(g.To), next.Member, next.Token, g.Took().Milliseconds(), g.Bound.Milliseconds())
			return
		}
		add(KindGap, g.Role, "no holder from %s (the last renewal of token %s begun) until the shutdown at %s: %d ms, bound %d ms",
			stamp(g.From), g.After, stamp(g.To), g.Took().Milliseconds(), g.Bound.Milliseconds())
	}
	for i := range r.Elections {
		e := &r.Elections[i]
		from := max(last[roleToken{e.Role, e.Token}], e.At)
		if i+1 < len(r.Elections) && r.Elections[i+1].Role == e.Role {
			next := &r.Elections[i+1]
			to := next.At
			if h.Shutdown != 0 && to > h.Shutdown {
				judge(Gap{Role: e.Role, From: from, To: h.Shutdown, After: e.Token}, e.Member, nil)
				continue
			}
			judge(Gap{Role: e.Role, From: from, To: to, After: e.Token, Before: next.Token}, e.Member, next)
			continue
		}
		if h.Shutdown != 0 {
			judge(Gap{Role: e.Role, From: from, To: h.Shutdown, After: e.Token}, e.Member, nil)
		}
	}
	sort.SliceStable(r.Gaps, func(i, j int) bool { return r.Gaps[i].Took() > r.Gaps[j].Took() })
}
