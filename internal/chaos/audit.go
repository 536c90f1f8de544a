package chaos

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Kind is the kind of a violation: which audit failed.
type Kind string

// The audits. docs/CHAOS.md, "The audits", states each one's exact rule.
const (
	KindOrder       Kind = "order"        // a role's committed fenced writes go back to an older token
	KindUnfenced    Kind = "unfenced"     // a fenced write committed under another producer id/epoch than the token it names
	KindStale       Kind = "stale"        // a lease of a token committed after a newer token's first lease
	KindAuthor      Kind = "author"       // a lease not written by the member that minted its token, or not under its token
	KindExactlyOnce Kind = "exactly-once" // the stream lost, duplicated or invented an input
	KindFailover    Kind = "failover"     // no new holder within the bound after a kill or stop
	KindElections   Kind = "elections"    // an election no fault explains
	KindOverlap     Kind = "overlap"      // a holder's own log shows it holding past its local deadline while a newer token held the role
	KindAfterMint   Kind = "after-mint"   // a write under a token committed though begun after a newer token of the role was minted
	KindSequence    Kind = "sequence"     // a numbered record committed twice, or after a later one of its holding
	KindZombie      Kind = "zombie"       // a numbered record committed whose write returned an error to the member
	KindGap         Kind = "gap"          // a role without a holder for longer than the faults around it allow
	KindDoubleWin   Kind = "double-win"   // a role won by two or more members within one vacancy, no fault to hold a challenge in flight
	KindDBOrder     Kind = "db-order"     // a database row of a smaller fencing number committed after one of a larger
	KindDBHolding   Kind = "db-holding"   // a database row whose number is no holding of its member, or whose holding was over when it began
)

// Violation is one failed audit, with its evidence.
type Violation struct {
	Kind     Kind
	Role     string
	Evidence string
}

func (v Violation) String() string {
	return fmt.Sprintf("VIOLATION %s role=%s: %s", v.Kind, v.Role, v.Evidence)
}

// Failover is one measured failover: the holder of Role was killed or
// stopped at At, and the next holder was elected Took later.
type Failover struct {
	Role   string
	Member string
	Fault  FaultKind
	At     int64
	Took   time.Duration
	Bound  time.Duration
	// OverBase is how much of the bound's Tolerance the failover used:
	// Took less the bound without it (negative when it used none).
	OverBase time.Duration
}

// Election is one holding of a role as the role topic shows it: the first
// committed lease of a token.
type Election struct {
	Role   string
	Member string
	Token  Token
	At     int64 // system clock, Unix ms: the elected line, else the minted line, else the batch timestamp
	Minted int64 // the minted line's system time, 0 when absent
	// Cause says what explains it: "first", a fault, "race" or "" (none).
	Cause string
}

// Report is the auditor's verdict.
type Report struct {
	// Records, Leases, Heartbeats (session ends included), SessionEnds,
	// Inputs, Outputs and Rows (of the database) count what was read back.
	Records, Leases, Heartbeats, SessionEnds, Inputs, Outputs, Rows int

	Faults int
	// MidHeartbeat counts the kills of a member mid-heartbeat (among
	// Faults).
	MidHeartbeat int
	// Exits are the member processes that ended on their own (no audit
	// judges them; see each one's detail).
	Exits     []Fault
	Failovers []Failover
	Elections []Election
	Races     int
	// RaceChain is the most concurrent races in a row (see
	// auditElections), RaceChainAt the last election of that chain.
	RaceChain   int
	RaceChainAt Election
	// Gaps are the stretches without a holder that auditGaps judged,
	// longest first.
	Gaps []Gap
	// Vacancies counts the vacancies judged (after each role's opening
	// campaign, filled before the shutdown), WonTwice those won more
	// than once, WonTwiceInAFault those of them a fault may explain.
	Vacancies, WonTwice, WonTwiceInAFault int
	// Writes counts the members' write lines by outcome, DBWrites their
	// dbwrite lines.
	Writes, DBWrites map[string]int
	Violations       []Violation
}

// MaxFailover is the longest failover measured.
func (r *Report) MaxFailover() time.Duration {
	var m time.Duration
	for _, f := range r.Failovers {
		m = max(m, f.Took)
	}
	return m
}

// Write prints every violation with its evidence, then the summary.
func (r *Report) Write(w io.Writer) {
	for _, v := range r.Violations {
		fmt.Fprintln(w, v)
	}
	per := map[string]int{}
	for _, e := range r.Elections {
		per[e.Role]++
	}
	most, mostRole := 0, ""
	for role, n := range per {
		if n > most || (n == most && role < mostRole) {
			most, mostRole = n, role
		}
	}
	fmt.Fprintf(w, "read: %d leases, %d heartbeats (%d session ends), %d numbered records, %d stream inputs, %d stream outputs, %d database rows\n",
		r.Leases, r.Heartbeats, r.SessionEnds, r.Records, r.Inputs, r.Outputs, r.Rows)
	fmt.Fprintf(w, "faults: %d\n", r.Faults)
	fmt.Fprintf(w, "kills mid-heartbeat: %d\n", r.MidHeartbeat)
	for _, e := range r.Exits {
		fmt.Fprintf(w, "member exit: %s at %s: %s\n", e.Target, stamp(e.Start), e.Detail)
	}
	fmt.Fprintf(w, "member exits: %d\n", len(r.Exits))
	fmt.Fprintf(w, "elections: %d (most: %d of role %s; races between neighbouring ranks: %d)\n", len(r.Elections), most, mostRole, r.Races)
	if r.RaceChain > 1 {
		fmt.Fprintf(w, "longest chain of concurrent challenges: %d elections of role %s within a stagger of each other, the last %s (token %s) at %s\n",
			r.RaceChain+1, r.RaceChainAt.Role, r.RaceChainAt.Member, r.RaceChainAt.Token, stamp(r.RaceChainAt.At))
	}
	fmt.Fprintf(w, "vacancies: %d (won more than once: %d, %d of them while a fault could hold a challenge in flight)\n", r.Vacancies, r.WonTwice, r.WonTwiceInAFault)
	fmt.Fprintf(w, "failovers: %d\n", len(r.Failovers))
	fmt.Fprintf(w, "max failover: %d ms\n", r.MaxFailover().Milliseconds())
	if len(r.Failovers) > 0 {
		tight, most := r.Failovers[0], r.Failovers[0]
		for _, f := range r.Failovers {
			if float64(f.Took)/float64(f.Bound) > float64(tight.Took)/float64(tight.Bound) {
				tight = f
			}
			if f.OverBase > most.OverBase {
				most = f
			}
		}
		fmt.Fprintf(w, "closest to its bound: %s of %s at %s, role %s: %d ms of %d ms\n",
			tight.Fault, tight.Member, stamp(tight.At), tight.Role, tight.Took.Milliseconds(), tight.Bound.Milliseconds())
		fmt.Fprintf(w, "most of the tolerance used: %d ms, by the %s of %s at %s, role %s (%d ms; bound without tolerance %d ms)\n",
			max(most.OverBase.Milliseconds(), 0), most.Fault, most.Member, stamp(most.At), most.Role, most.Took.Milliseconds(), (most.Took - most.OverBase).Milliseconds())
	}
	fmt.Fprintf(w, "writes: %s\n", counts(r.Writes))
	fmt.Fprintf(w, "database writes: %s\n", counts(r.DBWrites))
	fmt.Fprintf(w, "gaps judged: %d\n", len(r.Gaps))
	if len(r.Gaps) > 0 {
		g, closest := r.Gaps[0], r.Gaps[0]
		for _, x := range r.Gaps {
			if float64(x.Took())/float64(x.Bound) > float64(closest.Took())/float64(closest.Bound) {
				closest = x
			}
		}
		fmt.Fprintf(w, "longest gap: role %s from %s, %d ms of %d ms\n", g.Role, stamp(g.From), g.Took().Milliseconds(), g.Bound.Milliseconds())
		fmt.Fprintf(w, "gap closest to its bound: role %s from %s, %d ms of %d ms\n", closest.Role, stamp(closest.From), closest.Took().Milliseconds(), closest.Bound.Milliseconds())
	}
	fmt.Fprintf(w, "violations: %d\n", len(r.Violations))
}

// counts renders outcome counts as "N (outcome n, ...)".
func counts(m map[string]int) string {
	outcomes := make([]string, 0, len(m))
	total := 0
	for o, n := range m {
		outcomes = append(outcomes, fmt.Sprintf("%s %d", o, n))
		total += n
	}
	sort.Strings(outcomes)
	return fmt.Sprintf("%d (%s)", total, strings.Join(outcomes, ", "))
}

// Audit judges h; docs/CHAOS.md, "The audits", states the rules.
func Audit(h History) *Report {
	r := &Report{Records: len(h.Records), Leases: len(h.Leases), Heartbeats: len(h.Heartbeats), Inputs: len(h.Inputs), Outputs: len(h.Outputs), Rows: len(h.Rows)}
	for _, hb := range h.Heartbeats {
		if hb.End {
			r.SessionEnds++
		}
	}
	for _, f := range h.Faults {
		switch f.Kind {
		case FaultStart, FaultShutdown:
		case FaultExit:
			r.Exits = append(r.Exits, f)
		default:
			r.Faults++
			if f.Kind == FaultKill && f.Detail == midHeartbeat {
				r.MidHeartbeat++
			}
		}
	}
	add := func(k Kind, role, format string, args ...any) {
		r.Violations = append(r.Violations, Violation{Kind: k, Role: role, Evidence: fmt.Sprintf(format, args...)})
	}
	r.Writes, r.DBWrites = map[string]int{}, map[string]int{}
	for _, e := range h.Events {
		switch e.Kind {
		case "write":
			r.Writes[e.Outcome]++
		case "dbwrite":
			r.DBWrites[e.Outcome]++
		}
	}
	auditWrites(h, add)
	auditLeases(h, add)
	auditStream(h, add)
	auditAfterMint(h, add)
	auditSequences(h, add)
	auditRows(h, add)
	r.Elections = elections(h)
	auditOverlap(h, r.Elections, add)
	auditFailovers(h, r, add)
	auditElections(h, r, add)
	auditGaps(h, r, add)
	auditVacancies(h, r, add)
	return r
}

type addFunc func(k Kind, role, format string, args ...any)

// auditWrites: per role and partition, in offset order, the tokens of
// committed fenced writes never go back (order), and each was committed
// under the token it names (unfenced).
func auditWrites(h History, add addFunc) {
	type key struct {
		role string
		part int32
	}
	last := map[key]Record{}
	for _, rec := range h.Records {
		if rec.Batch.Token() != rec.Token() {
			add(KindUnfenced, rec.Role, "record seq %d of %s names token %s but its batch was written by producer %s (partition %d offset %d)",
				rec.Seq, rec.Member, rec.Token(), rec.Batch.Token(), rec.Partition, rec.Offset)
		}
		k := key{rec.Role, rec.Partition}
		if prev, ok := last[k]; ok && rec.Token().Less(prev.Token()) {
			add(KindOrder, rec.Role, "partition %d: offset %d (member %s, token %s, seq %d) follows offset %d (member %s, token %s, seq %d)",
				rec.Partition, rec.Offset, rec.Member, rec.Token(), rec.Seq, prev.Offset, prev.Member, prev.Token(), prev.Seq)
		}
		if prev, ok := last[k]; !ok || !rec.Token().Less(prev.Token()) {
			last[k] = rec
		}
	}
	lastOut := map[int32]StreamOut{}
	for _, o := range h.Outputs {
		if prev, ok := lastOut[o.Partition]; ok && o.Token().Less(prev.Token()) {
			add(KindOrder, h.StreamRole, "stream output partition %d: offset %d (value %s, token %s) follows offset %d (value %s, token %s)",
				o.Partition, o.Offset, o.Value, o.Token(), prev.Offset, prev.Value, prev.Token())
			continue
		}
		lastOut[o.Partition] = o
	}
}

// minters maps (role, token) to the minted event.
func minters(h History) map[string]Event {
	m := map[string]Event{}
	for _, e := range h.Events {
		if e.Kind == "minted" {
			k := e.Role + "@" + e.Token().String()
			if _, ok := m[k]; !ok {
				m[k] = e
			}
		}
	}
	return m
}

// auditLeases: per role, in offset order, no lease of a token after the
// first lease of a newer one (stale); each lease committed under the
// token it names, by the member whose event log minted that token
// (author); each heartbeat and session end committed under the session
// it names (author).
func auditLeases(h History, add addFunc) {
	for _, hb := range h.Heartbeats {
		if hb.Batch.Token() != hb.Session.Token() {
			add(KindAuthor, "session/"+hb.Member, "session record (end %t) at partition %d offset %d names %s session %s but was written by producer %s",
				hb.End, hb.Partition, hb.Offset, hb.Member, hb.Session, hb.Batch.Token())
		}
	}
	mint := minters(h)
	newest := map[string]Lease{} // per role, the first lease of the newest token so far
	for _, l := range h.Leases {
		if l.Batch.Token() != l.Token {
			add(KindAuthor, l.Role, "lease at partition %d offset %d names %s token %s but was written by producer %s",
				l.Partition, l.Offset, l.Member, l.Token, l.Batch.Token())
		}
		switch e, ok := mint[l.Role+"@"+l.Token.String()]; {
		case !ok:
			add(KindAuthor, l.Role, "lease at partition %d offset %d names %s token %s, which no member's event log minted",
				l.Partition, l.Offset, l.Member, l.Token)
		case e.Member != l.Member:
			add(KindAuthor, l.Role, "lease at partition %d offset %d names member %s, but token %s was minted by %s",
				l.Partition, l.Offset, l.Member, l.Token, e.Member)
		}
		n, ok := newest[l.Role]
		switch {
		case !ok || n.Token.Less(l.Token):
			newest[l.Role] = l
		case l.Token.Less(n.Token):
			add(KindStale, l.Role, "lease of %s token %s at offset %d committed after the first lease of newer token %s (%s) at offset %d",
				l.Member, l.Token, l.Offset, n.Token, n.Member, n.Offset)
		}
	}
}

// auditStream: every committed input value is in the committed output
// exactly once, and the output holds nothing else.
func auditStream(h History, add addFunc) {
	in := map[string]int{}
	for _, v := range h.Inputs {
		in[v]++
	}
	out := map[string][]StreamOut{}
	for _, o := range h.Outputs {
		out[o.Value] = append(out[o.Value], o)
	}
	var missing []string
	for v := range in {
		if len(out[v]) == 0 {
			missing = append(missing, v)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		add(KindExactlyOnce, h.StreamRole, "%d of %d inputs never in the output: %s", len(missing), len(in), clip(missing))
	}
	vals := make([]string, 0, len(out))
	for v := range out {
		vals = append(vals, v)
	}
	sort.Strings(vals)
	for _, v := range vals {
		os := out[v]
		switch {
		case in[v] == 0:
			add(KindExactlyOnce, h.StreamRole, "output %q (partition %d offset %d, token %s) is no input", v, os[0].Partition, os[0].Offset, os[0].Token())
		case len(os) > in[v]:
			var where []string
			for _, o := range os {
				where = append(where, fmt.Sprintf("p%d@%d by %s", o.Partition, o.Offset, o.Token()))
			}
			add(KindExactlyOnce, h.StreamRole, "input %q is in the output %d times: %s", v, len(os), strings.Join(where, ", "))
		}
	}
}

func clip(s []string) string {
	if len(s) > 20 {
		return strings.Join(s[:20], " ") + fmt.Sprintf(" ... (%d more)", len(s)-20)
	}
	return strings.Join(s, " ")
}

// newEpochReleases finds the releases a holder wrote under a new epoch
// of its own (package processor: its token was retired before the
// release was written): a token with no elected line whose committed
// leases are all releases by the member that held the token before it.
// It returns each such release by the token it releases, and the tokens
// it was written under, which are no election.
func newEpochReleases(h History) (map[roleToken]Lease, map[roleToken]bool) {
	elected := map[roleToken]bool{}
	for _, e := range h.Events {
		if e.Kind == "elected" {
			elected[roleToken{e.Role, e.Token()}] = true
		}
	}
	type tok struct {
		first   Lease
		release bool // every lease of it is a release
	}
	toks := map[roleToken]*tok{}
	byRole := map[string][]Token{}
	for _, l := range h.Leases {
		k := roleToken{l.Role, l.Token}
		t := toks[k]
		if t == nil {
			t = &tok{first: l, release: true}
			toks[k] = t
			byRole[l.Role] = append(byRole[l.Role], l.Token)
		}
		t.release = t.release && l.Released()
	}
	of, under := map[roleToken]Lease{}, map[roleToken]bool{}
	for role, ts := range byRole {
		sort.Slice(ts, func(i, j int) bool { return ts[i].Less(ts[j]) })
		for i := 1; i < len(ts); i++ {
			k, prev := roleToken{role, ts[i]}, roleToken{role, ts[i-1]}
			if t := toks[k]; t.release && !elected[k] && t.first.Member == toks[prev].first.Member {
				of[prev], under[k] = t.first, true
			}
		}
	}
	return of, under
}

// elections lists, per role in offset order, the first committed lease of
// each token (releases included: a release under a token that never wrote
// a lease still shows a holding), but for a release its holder wrote under
// a new epoch (newEpochReleases).
func elections(h History) []Election {
	_, under := newEpochReleases(h)
	mint := minters(h)
	elected := map[string]Event{}
	for _, e := range h.Events {
		if e.Kind == "elected" {
			elected[e.Role+"@"+e.Token().String()] = e
		}
	}
	seen := map[string]bool{}
	var out []Election
	for _, l := range h.Leases {
		k := l.Role + "@" + l.Token.String()
		if seen[k] || under[roleToken{l.Role, l.Token}] {
			continue
		}
		seen[k] = true
		e := Election{Role: l.Role, Member: l.Member, Token: l.Token, At: l.Timestamp}
		if m, ok := mint[k]; ok {
			e.At, e.Minted = m.Wall, m.Wall
		}
		if el, ok := elected[k]; ok {
			e.At = el.Wall
		}
		out = append(out, e)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Role != out[j].Role {
			return out[i].Role < out[j].Role
		}
		return out[i].Token.Less(out[j].Token)
	})
	return out
}

// holding is a span during which a member held a role, by its own event
// log: from its elected line until its revoked line for the token, or the
// member's next start (the process died), or forever.
type holding struct {
	role, member string
	token        Token
	from, until  int64
}

func holdings(h History) []holding {
	const forever = int64(1) << 62
	var hs []holding
	open := map[string]int{} // member/role -> index in hs
	for _, e := range sortedEvents(h.Events) {
		switch e.Kind {
		case "start":
			for k, i := range open {
				if hs[i].member == e.Member {
					hs[i].until = e.Wall
					delete(open, k)
				}
			}
		case "elected":
			hs = append(hs, holding{role: e.Role, member: e.Member, token: e.Token(), from: e.Wall, until: forever})
			open[e.Member+"/"+e.Role] = len(hs) - 1
		case "revoked":
			if i, ok := open[e.Member+"/"+e.Role]; ok && hs[i].token == e.Token() {
				hs[i].until = e.Wall
				delete(open, e.Member+"/"+e.Role)
			}
		}
	}
	return hs
}

func sortedEvents(evs []Event) []Event {
	s := append([]Event(nil), evs...)
	sort.SliceStable(s, func(i, j int) bool { return s[i].Wall < s[j].Wall })
	return s
}

// FailoverBound is the longest role may stay without a holder after its
// holder, holder, was killed, stopped or cut off at k by fault trigger:
// the gap bound ([GapBound]) counted from k, without trigger itself,
// which the base covers: Lease + Renew + Stagger*(Members-1) + Tolerance,
// plus, for every other fault whose span [Start, End+RequestTimeout]
// overlaps [k, k+the bound], a broker fault's length End-Start plus a
// RequestTimeout, a fault of holder or of a member that minted a token of
// role meanwhile a Lease + a RequestTimeout, any other member fault a
// RequestTimeout + Stagger*(Members-1). The faults are added as the
// bound grows, until none more overlaps (a chain of faults, each starting
// before the failover the ones before it delayed, is counted whole).
// Other members' faults count as in the gap bound: a challenger killed or
// cut off mid-challenge, its token minted, delays the failover too.
func FailoverBound(h History, role, holder string, k int64, trigger Fault) time.Duration {
	return newGapBounds(h).bound(role, holder, k, &trigger)
}

// auditFailovers: after each kill or stop of a member, every role it held
// then has a new holder (an election of a newer token) within
// FailoverBound, unless that bound runs past the shutdown.
func auditFailovers(h History, r *Report, add addFunc) {
	hs := holdings(h)
	bounds := newGapBounds(h)
	for _, f := range h.Faults {
		if f.Kind != FaultKill && f.Kind != FaultStop && f.Kind != FaultPartition {
			continue
		}
		for _, hd := range hs {
			if hd.member != f.Target || hd.from > f.Start || hd.until <= f.Start {
				continue
			}
			bound := bounds.bound(hd.role, hd.member, f.Start, &f)
			var next *Election
			for i := range r.Elections {
				e := &r.Elections[i]
				if e.Role == hd.role && hd.token.Less(e.Token) {
					next = e
					break
				}
			}
			switch {
			case next != nil && next.At <= f.Start:
				// taken over before the fault: no failover to measure
			case next != nil:
				took := time.Duration(next.At-f.Start) * time.Millisecond
				r.Failovers = append(r.Failovers, Failover{Role: hd.role, Member: hd.member, Fault: f.Kind, At: f.Start, Took: took, Bound: bound, OverBase: took - (bound - h.Settings.Tolerance)})
				if took > bound {
					add(KindFailover, hd.role, "%s of holder %s (token %s) at %s: next holder %s (token %s) elected %d ms later, bound %d ms",
						f.Kind, hd.member, hd.token, stamp(f.Start), next.Member, next.Token, took.Milliseconds(), bound.Milliseconds())
				}
			case f.Start+ms(bound) < h.Shutdown:
				add(KindFailover, hd.role, "%s of holder %s (token %s) at %s: no new holder before the shutdown %d ms later, bound %d ms",
					f.Kind, hd.member, hd.token, stamp(f.Start), h.Shutdown-f.Start, bound.Milliseconds())
			}
		}
	}
}

// Explains is how many elections of one role fault f can explain, and
// until when (Unix ms), in a run of members member processes; see
// docs/CHAOS.md, "elections". A member fault explains one election of each
// role its target held (a kill, a stop or a restart ends one holding),
// within a lease of its end. A broker fault explains one election per
// role, and one more for every HeartbeatDeadline (4/5 of the lease) it lasted
// beyond the first, since a holder that cannot renew loses its lease at
// most once per HeartbeatDeadline, within a lease and a request timeout of
// its end. A delay of InitProducerID explains one election per member
// instead of one: a challenge whose InitProducerId (or a request queued
// behind it on the same connection) outlived the request timeout was
// given up by its member, but the broker still mints the epoch when it
// gets to it, fencing whoever holds the role then (package fencing says
// so: closing the connection does not undo a request the broker has
// read), and each member has at most one challenge of the role in flight.
// A stall explains as many: the requests that follow a held Produce on its
// connection (an InitProducerId to the same broker among them) wait
// behind it. Starts of members and clock offsets explain nothing.
func Explains(s Settings, members int, f Fault) (n int, until int64) {
	switch {
	case f.Member():
		return 1, f.End + ms(s.Lease)
	case f.Broker():
		first := 1
		if f.Kind == FaultStall || f.Kind == FaultDelay && strings.HasPrefix(f.Detail, kmsg.InitProducerID.Name()+" ") {
			first = max(members, 1)
		}
		return first + int((f.End-f.Start)/max(ms(s.Lease*4/5), 1)), f.End + ms(s.Lease+s.RequestTimeout)
	}
	return 0, 0
}

// auditElections: every election of a role after its first is explained
// by a fault whose budget for the role is not spent, or is a race right
// after an explained one; see docs/CHAOS.md, "elections".
func auditElections(h History, r *Report, add addFunc) {
	s := h.Settings
	mint := minters(h)
	// cutShort reports whether member fault f may have cut short a
	// challenge of its target for role between the elections of tokens
	// older and newer, over [from, to]: the target minted a token of the
	// role then, or a token between the two was minted by nobody's log
	// (a challenger killed before it wrote its minted line, or whose
	// InitProducerId the broker answered after its death) and f is a
	// kill or an exit then. Such a challenge fences the one before it and
	// leaves no lease: one more election of the role, which the previous
	// holder's faults do not explain.
	cutShort := func(f Fault, role string, older, newer Token, from, to int64) bool {
		if f.Start > to || f.End < from {
			return false
		}
		for _, ev := range h.Events {
			if ev.Kind == "minted" && ev.Role == role && ev.Member == f.Target && ev.Token() != newer && ev.Wall >= from && ev.Wall <= to {
				return true
			}
		}
		if (f.Kind != FaultKill && f.Kind != FaultExit) || older.PID != newer.PID {
			return false
		}
		for ep := older.Epoch + 1; ep < newer.Epoch; ep++ {
			if _, ok := mint[role+"@"+Token{PID: older.PID, Epoch: ep}.String()]; !ok {
				return true
			}
		}
		return false
	}
	// retired: role@token -> when its holder's revoked line said the
	// token was retired (a request under it got no definite answer).
	retired := map[string]int64{}
	for _, ev := range h.Events {
		if ev.Kind == "revoked" && ev.Reason == "token retired" {
			retired[ev.Role+"@"+ev.Token().String()] = ev.Wall
		}
	}
	// released: role@token -> when its first release was committed
	// (batch timestamp): a resignation or a group's handover.
	released := map[string]int64{}
	for _, l := range h.Leases {
		k := l.Role + "@" + l.Token.String()
		if _, ok := released[k]; !ok && l.Released() {
			released[k] = l.Timestamp
		}
	}
	of, _ := newEpochReleases(h)
	for k, l := range of {
		if at, ok := released[k.role+"@"+k.token.String()]; !ok || l.Timestamp < at {
			released[k.role+"@"+k.token.String()] = l.Timestamp
		}
	}
	// A group's holder that hands a role over drops it from its session
	// first; a successor that read that heartbeat may fence the release
	// in flight. Its revoked line says so.
	for _, ev := range h.Events {
		k := ev.Role + "@" + ev.Token().String()
		if ev.Kind == "revoked" && ev.Reason == "handed over" {
			if at, ok := released[k]; !ok || ev.Wall < at {
				released[k] = ev.Wall
			}
		}
	}
	faults := append([]Fault(nil), h.Faults...)
	sort.SliceStable(faults, func(i, j int) bool { return faults[i].Start < faults[j].Start })
	used := map[string]int{} // fault index/role -> elections explained
	var prev, first *Election
	prevRace := false
	chain := 0   // concurrent races in a row
	opening := 0 // elections of the role's opening campaign after its first
	for i := range r.Elections {
		e := &r.Elections[i]
		if prev == nil || prev.Role != e.Role {
			e.Cause, prev, first, prevRace, opening = "first", e, e, false, 0
			continue
		}
		if at := min(e.At, nonZero(e.Minted, e.At)); at-first.At < ms(s.Lease) && opening < h.Members-1 {
			// The opening campaign: members that start together may each
			// take the role before their views show each other's
			// registrations (package processor says so), each at most once.
			opening++
			e.Cause, prev, prevRace = fmt.Sprintf("opening race (%d)", opening), e, true
			r.Races++
			continue
		}
		if h.Shutdown != 0 && e.At >= h.Shutdown {
			e.Cause, prev = "shutdown", e // members resign in turn: not judged
			continue
		}
		if e.Minted != 0 && e.Minted-prev.At < ms(s.Stagger) && chain < h.Members-1 {
			// Minted less than a stagger after the previous election: a
			// challenge already under way, concurrent with it. It spends
			// no fault's budget, which is kept for what only a fault explains.
			chain++
			e.Cause, prevRace = fmt.Sprintf("race (concurrent, %d in a row)", chain), true
			r.Races++
			if chain > r.RaceChain {
				r.RaceChain, r.RaceChainAt = chain, *e
			}
			prev = e
			continue
		}
		if at, ok := retired[e.Role+"@"+prev.Token.String()]; ok && e.Minted != 0 && at <= e.Minted {
			// A retired token (package processor, "Tokens"): its holder takes
			// its lease back at once, and another candidate may too (its
			// heartbeats exclude the role). Neither spends a fault's budget.
			e.Cause, prevRace, chain = "retake of its own lease after its token was retired", false, 0
			if e.Member != prev.Member {
				e.Cause = "after the holder's token was retired"
			}
			prev = e
			continue
		}
		if at, ok := released[e.Role+"@"+prev.Token.String()]; ok && at <= challengedAt(*e) {
			// The holder let the role go before the challenge began.
			e.Cause, prevRace, chain = "after the holder let it go", false, 0
			prev = e
			continue
		}
		from, to := prev.At, e.At
		if prev.Minted != 0 {
			from = min(from, prev.Minted)
		}
		for fi, f := range faults {
			n, until := Explains(s, h.Members, f)
			if n == 0 || f.Member() && f.Target != prev.Member && f.Kind != FaultShutdown && !cutShort(f, e.Role, prev.Token, e.Token, from, to) {
				continue
			}
			k := fmt.Sprintf("%d/%s", fi, e.Role)
			if f.Start <= to && until >= from && used[k] < n {
				used[k]++
				e.Cause = fmt.Sprintf("%s %s%s at %s", f.Kind, f.Target, f.Detail, stamp(f.Start))
				break
			}
		}
		switch {
		case e.Cause != "":
			prevRace, chain = false, 0
		case !prevRace && e.Minted != 0 && e.Minted-prev.At < ms(s.Lease):
			e.Cause, prevRace = "race", true
			r.Races++
		default:
			add(KindElections, e.Role, "election of %s (token %s) at %s after %s (token %s) at %s: no fault explains it",
				e.Member, e.Token, stamp(e.At), prev.Member, prev.Token, stamp(prev.At))
			prevRace, chain = false, 0
		}
		prev = e
	}
}

func stamp(unixMS int64) string {
	return time.UnixMilli(unixMS).UTC().Format("15:04:05.000")
}

// nonZero returns v, or def when v is 0.
func nonZero(v, def int64) int64 {
	if v == 0 {
		return def
	}
	return v
}
