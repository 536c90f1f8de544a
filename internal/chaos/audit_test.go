package chaos

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A hand-made history in which nothing is wrong: role r held by a under
// 1/0, a killed at t0+1000, b elected under 1/1 at t0+3000; the stream
// passes inputs 0 1 2 on exactly once.
const t0 = int64(1_700_000_000_000)

func tok(e int16) Token { return Token{PID: 1, Epoch: e} }

func clean() History {
	h := History{
		Settings:   Settings{Lease: 2 * time.Second, Renew: 400 * time.Millisecond, Stagger: 200 * time.Millisecond, RequestTimeout: time.Second, Tolerance: time.Second},
		Members:    2,
		StreamRole: "stream",
		FaultsFrom: t0, FaultsUntil: t0 + 10_000, Shutdown: t0 + 20_000,
		Events: []Event{
			{Kind: "start", Member: "a", Wall: t0 - 100},
			{Kind: "start", Member: "b", Wall: t0 - 100},
			{Kind: "minted", Role: "r", Member: "a", PID: 1, Epoch: 0, Wall: t0},
			{Kind: "elected", Role: "r", Member: "a", PID: 1, Epoch: 0, Wall: t0 + 10},
			{Kind: "minted", Role: "r", Member: "b", PID: 1, Epoch: 1, Wall: t0 + 2990},
			{Kind: "elected", Role: "r", Member: "b", PID: 1, Epoch: 1, Wall: t0 + 3000},
		},
		Faults: []Fault{{Kind: FaultKill, Target: "a", Start: t0 + 1000, End: t0 + 4000}},
		// a's leases every heartbeat interval until its kill; b's from its
		// election until the shutdown (see renew).
		Leases: []Lease{
			leaseAt("r", "a", tok(0), 0, t0),
			leaseAt("r", "a", tok(0), 1, t0+400),
			leaseAt("r", "a", tok(0), 2, t0+800),
		},
		Records: []Record{
			record("r", "a", tok(0), 0, 0),
			record("r", "a", tok(0), 1, 1),
			record("r", "b", tok(1), 0, 2),
		},
		Inputs:  []string{"0", "1", "2"},
		Outputs: []StreamOut{out("0", tok(0), 0), out("1", tok(0), 1), out("2", tok(1), 2)},
	}
	renew(&h, "r", "b", tok(1), t0+2995)
	return h
}

// renew appends the leases of member's holding of role under t: one begun
// at from and one every heartbeat interval after it until the shutdown.
func renew(h *History, role, member string, t Token, from int64) {
	for ts := from; ts < h.Shutdown; ts += ms(h.Settings.Renew) {
		h.Leases = append(h.Leases, leaseAt(role, member, t, int64(len(h.Leases)), ts))
	}
}

// elect adds member's election to role r under token 1/e at at, as a
// member's log and the role topic would show it: the holding it fences
// ends (its holder's revoked line at at, or at its local deadline when
// that came first, unless a kill ended its process
// before; its leases begun from then on removed); a killed member taking
// the role again was started again first; then the minted and elected
// lines and the new holding's leases until the shutdown.
func elect(h *History, member string, e int16, at int64) {
	for _, hd := range holdings(*h) {
		if hd.role != "r" || hd.until <= at {
			continue
		}
		killed := false
		for _, f := range h.Faults {
			if f.Kind == FaultKill && f.Target == hd.member && f.Start >= hd.from && f.Start <= at {
				killed = true
			}
		}
		switch {
		case killed && hd.member == member:
			h.Events = append(h.Events, Event{Kind: "start", Member: member, Wall: at - 50})
		case !killed:
			// fenced at at, or lease lost at its local deadline if that
			// came first
			rev, why := at, "fenced"
			if d := lastLease(*h)[roleToken{"r", hd.token}] + ms(h.Settings.renewDeadline()); d < at {
				rev, why = d, "lease lost"
			}
			h.Events = append(h.Events, Event{Kind: "revoked", Role: "r", Member: hd.member, PID: hd.token.PID, Epoch: hd.token.Epoch, Reason: why, Wall: rev})
		}
	}
	t := tok(e)
	kept := h.Leases[:0]
	for _, l := range h.Leases {
		if l.Role == "r" && l.Token.Less(t) && l.Timestamp >= at {
			continue
		}
		kept = append(kept, l)
	}
	h.Leases = kept
	h.Events = append(h.Events,
		Event{Kind: "minted", Role: "r", Member: member, PID: t.PID, Epoch: t.Epoch, Wall: at},
		Event{Kind: "elected", Role: "r", Member: member, PID: t.PID, Epoch: t.Epoch, Wall: at + 10})
	renew(h, "r", member, t, at+5)
}

func lease(role, member string, t Token, off int64) Lease {
	return Lease{Role: role, Member: member, Token: t, GrantedAt: t0, Deadline: t0 + 2000,
		Batch: Batch{Offset: off, ProducerID: t.PID, ProducerEpoch: t.Epoch}}
}

// leaseAt is a lease whose batch was built at ts (system time).
func leaseAt(role, member string, t Token, off, ts int64) Lease {
	l := lease(role, member, t, off)
	l.GrantedAt, l.Deadline, l.Timestamp = ts, ts+2000, ts
	return l
}

func record(role, member string, t Token, seq, off int64) Record {
	return Record{Role: role, Member: member, PID: t.PID, Epoch: t.Epoch, Seq: seq,
		Batch: Batch{Offset: off, ProducerID: t.PID, ProducerEpoch: t.Epoch}}
}

func out(v string, t Token, off int64) StreamOut {
	return StreamOut{Value: v, Batch: Batch{Offset: off, ProducerID: t.PID, ProducerEpoch: t.Epoch}}
}

func kinds(r *Report) []Kind {
	var ks []Kind
	for _, v := range r.Violations {
		ks = append(ks, v.Kind)
	}
	return ks
}

func TestAuditCleanHistory(t *testing.T) {
	r := Audit(clean())
	assert.Empty(t, r.Violations)
	require.Len(t, r.Failovers, 1, "the kill of a is a failover")
	assert.Equal(t, 2000*time.Millisecond, r.Failovers[0].Took)
	assert.Equal(t, -600*time.Millisecond, r.Failovers[0].OverBase, "lease 2s + renew 400ms + one stagger 200ms, less 2000ms taken")
	require.Len(t, r.Elections, 2)
	assert.Contains(t, r.Elections[1].Cause, "kill")
	var sb strings.Builder
	r.Write(&sb)
	for _, line := range []string{"faults: 1\n", "failovers: 1\n", "max failover: 2000 ms\n", "most of the tolerance used: 0 ms,", "violations: 0\n"} {
		assert.Contains(t, sb.String(), line)
	}
}

// Each case breaks the clean history in one way; the auditor must report
// exactly that kind.
func TestAuditReportsEachViolation(t *testing.T) {
	for _, tc := range []struct {
		name   string
		kind   Kind
		break_ func(h *History)
	}{
		{"a record of an older token after a newer one", KindOrder, func(h *History) {
			h.Records = append(h.Records, record("r", "a", tok(0), 2, 3))
		}},
		{"a stream output of an older token after a newer one", KindOrder, func(h *History) {
			h.Inputs = append(h.Inputs, "3")
			h.Outputs = append(h.Outputs, out("3", tok(0), 3))
		}},
		{"a record committed under another producer than it names", KindUnfenced, func(h *History) {
			h.Records[2].ProducerEpoch = 7
		}},
		{"a lease of an older token after a newer token's first lease", KindStale, func(h *History) {
			h.Leases = append(h.Leases, lease("r", "a", tok(0), 3))
		}},
		{"a lease naming another member than the minter", KindAuthor, func(h *History) {
			h.Leases[3].Member = "a" // b's first
		}},
		{"a lease written by another producer than its token", KindAuthor, func(h *History) {
			h.Leases[1].ProducerID = 99
		}},
		{"a lease of a token nobody minted", KindAuthor, func(h *History) {
			h.Events = h.Events[:4] // b's minted and elected lines gone
			h.Events = append(h.Events, Event{Kind: "elected", Role: "r", Member: "b", PID: 1, Epoch: 1, Wall: t0 + 3000})
		}},
		{"an input lost", KindExactlyOnce, func(h *History) {
			h.Outputs = h.Outputs[:2]
		}},
		{"an input twice", KindExactlyOnce, func(h *History) {
			h.Outputs = append(h.Outputs, out("2", tok(1), 3))
		}},
		{"an output that is no input", KindExactlyOnce, func(h *History) {
			h.Outputs = append(h.Outputs, out("9", tok(1), 3))
		}},
		{"a failover slower than the bound", KindFailover, func(h *History) {
			// bound: 2s + 0.4s + 1*0.2s + 1s = 3.6s after the kill
			h.Events[4].Wall, h.Events[5].Wall = t0+4690, t0+4700
		}},
		{"no new holder after a kill", KindFailover, func(h *History) {
			h.Faults[0].Start = t0 + 3500 // b's holding, killed; nobody follows
			h.Faults[0].Target = "b"
		}},
		{"an election no fault explains", KindElections, func(h *History) {
			h.Faults = nil
			h.Events[4].Wall, h.Events[5].Wall = t0+5000, t0+5010 // not a race: more than a lease after a's election
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := clean()
			tc.break_(&h)
			r := Audit(h)
			require.NotEmpty(t, r.Violations)
			assert.Contains(t, kinds(r), tc.kind)
			for _, v := range r.Violations {
				assert.NotEmpty(t, v.Evidence)
			}
			var sb strings.Builder
			r.Write(&sb)
			assert.Contains(t, sb.String(), "VIOLATION "+string(tc.kind))
			assert.NotContains(t, sb.String(), "violations: 0\n")
		})
	}
}

// A partition of the holder is a failover, as a kill is: measured against
// the bound, and it explains the successor's election; the partitioned
// member taking the role back after the heal is one election more, which
// nothing explains.
func TestAuditPartitionOfTheHolder(t *testing.T) {
	h := clean()
	h.Faults[0].Kind = FaultPartition
	r := Audit(h)
	assert.Empty(t, r.Violations)
	require.Len(t, r.Failovers, 1, "the partition of a is a failover")
	assert.Equal(t, FaultPartition, r.Failovers[0].Fault)
	assert.Contains(t, r.Elections[1].Cause, "partition")

	elect(&h, "a", 2, t0+6000)
	r = Audit(h)
	assert.Equal(t, []Kind{KindElections}, kinds(r), "a's retake 2s after the heal, the successor live")

	h = clean()
	h.Faults[0].Kind = FaultPartition
	h.Events = h.Events[:4] // nobody took over
	h.Leases = h.Leases[:2]
	h.Records = h.Records[:2]
	h.Outputs = h.Outputs[:2]
	h.Inputs = h.Inputs[:2]
	assert.Contains(t, kinds(Audit(h)), KindFailover, "no new holder after a partition of the holder")
}

// A race between neighbouring ranks right after an explained election is
// explained once, not twice in a row. (a was killed; b's election is
// explained by it, c's is a race with b's, and b's second is a storm.)
// With no fault to hold a challenge in flight, the race is a double win.
func TestAuditRaceExplainsOneElection(t *testing.T) {
	h := clean()
	elect(&h, "c", 2, t0+3100)
	r := Audit(h)
	assert.Equal(t, []Kind{KindDoubleWin}, kinds(r))
	assert.Equal(t, 1, r.Races)

	elect(&h, "b", 3, t0+3200)
	r = Audit(h)
	assert.Equal(t, []Kind{KindElections, KindDoubleWin}, kinds(r), "a second race in a row is a storm")
}

// The failover bound grows by the broker faults around the kill (the kill
// itself, the failover's cause, adds nothing).
func TestFailoverBoundCountsInjectedDelay(t *testing.T) {
	h := clean()
	base := FailoverBound(h, "r", "a", t0+1000, h.Faults[0])
	assert.Equal(t, 3600*time.Millisecond, base)
	h.Faults = append(h.Faults, Fault{Kind: FaultDelay, Start: t0 + 1500, End: t0 + 2000})
	assert.Equal(t, base+500*time.Millisecond+time.Second, FailoverBound(h, "r", "a", t0+1000, h.Faults[0]))
	h.Faults = append(h.Faults, Fault{Kind: FaultError, Start: t0 + 9000, End: t0 + 9500})
	assert.Equal(t, base+500*time.Millisecond+time.Second, FailoverBound(h, "r", "a", t0+1000, h.Faults[0]), "a fault after the bound adds nothing")

	// A fault that begins after the base bound but within the bound the
	// first fault extended delays the failover too, and so extends it:
	// base ends at t0+4600, the delay takes it to t0+6100, the error at
	// t0+5000 (1s + RequestTimeout) to t0+8100, which takes in the one at
	// t0+8000 as well.
	h.Faults = append(h.Faults, Fault{Kind: FaultError, Start: t0 + 5000, End: t0 + 6000}, Fault{Kind: FaultDrop, Start: t0 + 8000, End: t0 + 8200})
	assert.Equal(t, base+(500+1000)*time.Millisecond+(1000+1000)*time.Millisecond+(200+1000)*time.Millisecond+(500+1000)*time.Millisecond,
		FailoverBound(h, "r", "a", t0+1000, h.Faults[0]), "a chain of faults, each within the bound the ones before it extended, counts whole; then the one at t0+9000 as well")
}

// A broker fault explains one election per role (one more per
// HeartbeatDeadline it lasts): a storm in its shadow is reported.
func TestAuditBrokerFaultExplainsOneElectionPerRole(t *testing.T) {
	h := clean()
	h.Faults = append(h.Faults, Fault{Kind: FaultDrop, Detail: "EndTxn", Start: t0 + 4000, End: t0 + 4100})
	elect(&h, "c", 2, t0+5100) // the drop
	r := Audit(h)
	assert.Empty(t, r.Violations)
	assert.Contains(t, r.Elections[2].Cause, "drop")

	elect(&h, "d", 3, t0+6000) // a race with c's
	elect(&h, "c", 4, t0+6500) // nothing left to explain it
	r = Audit(h)
	assert.Equal(t, []Kind{KindElections}, kinds(r))
	assert.Equal(t, 1, r.Races)

	n, _ := Explains(h.Settings, h.Members, Fault{Kind: FaultDrop, Start: 0, End: 3300})
	assert.Equal(t, 3, n, "one per HeartbeatDeadline (1.6s) more")
	n, _ = Explains(h.Settings, 5, Fault{Kind: FaultDelay, Detail: "InitProducerID by 594ms", Start: 0, End: 900})
	assert.Equal(t, 5, n, "a delayed InitProducerId: one per member")
	n, _ = Explains(h.Settings, 5, Fault{Kind: FaultDelay, Detail: "EndTxn by 594ms", Start: 0, End: 900})
	assert.Equal(t, 1, n, "any other delay: one")
}

// Challenges already under way when the previous election happened
// (minted less than a stagger after it) race with it: up to Members-1 of
// them in a row are explained, one more is not.
func TestAuditConcurrentChallenges(t *testing.T) {
	h := clean()
	h.Members = 3
	elect(&h, "c", 2, t0+3020) // b's election (the kill) at 3000
	elect(&h, "a", 3, t0+3040)
	r := Audit(h)
	assert.Empty(t, r.Violations)
	assert.Equal(t, 2, r.RaceChain)
	var sb strings.Builder
	r.Write(&sb)
	assert.Contains(t, sb.String(), "longest chain of concurrent challenges: 3 elections of role r")

	elect(&h, "b", 4, t0+3060)
	r = Audit(h)
	assert.Equal(t, []Kind{KindElections}, kinds(r), "a third concurrent challenge among three members")
}

// A role's opening campaign: members that start together may each take
// the role before their views show each other's registrations, each at
// most once, within a lease of the role's first election; one more is a
// storm.
func TestAuditOpeningCampaign(t *testing.T) {
	h := clean()
	h.Members = 3
	h.Events = h.Events[:4] // the starts and a's first election at t0
	h.Leases = h.Leases[:2]
	h.Faults = nil
	elect(&h, "b", 1, t0+400)
	elect(&h, "c", 2, t0+900)
	r := Audit(h)
	assert.Empty(t, r.Violations)
	assert.Equal(t, 2, r.Races)

	elect(&h, "a", 3, t0+1400)
	r = Audit(h)
	assert.Equal(t, []Kind{KindElections}, kinds(r), "a third election in the opening campaign of three members")
}

// A delay of InitProducerID explains one election per member (a challenge
// given up on is still minted later, fencing the holder of the moment):
// with five members, the vacancy it opens may see the whole field elected
// in turn and one member again; a seventh is still a storm.
func TestAuditDelayedInitProducerIDExplainsOnePerMember(t *testing.T) {
	h := clean()
	h.Members = 5
	h.Faults = append(h.Faults, Fault{Kind: FaultDelay, Detail: "InitProducerID by 594ms", Start: t0 + 4000, End: t0 + 4900})
	for i, m := range []string{"c", "d", "e", "a", "b", "c"} {
		elect(&h, m, int16(2+i), t0+4600+int64(i)*250)
	}
	r := Audit(h)
	assert.Empty(t, r.Violations, "%v", r.Violations)
	elect(&h, "d", 8, t0+7000)
	elect(&h, "e", 9, t0+9000)
	r = Audit(h)
	assert.Equal(t, []Kind{KindElections}, kinds(r), "past the fault's budget (one race with d's allowed)")
}

// A kill of a challenger whose token fenced the one before it and left no
// lease explains the election after it, though it was not the holder's:
// here d, killed after the broker minted 1/2 for it and before its
// minted line, in the opening campaign of r.
// A stop leaves its process able to log the mint later, so a token no log
// minted is no evidence against it.
func TestAuditKilledChallengerExplainsAnElection(t *testing.T) {
	build := func(k FaultKind) History {
		h := clean()
		h.Members = 4
		h.Faults = []Fault{{Kind: k, Target: "d", Start: t0 + 400, End: t0 + 3000}}
		h.Events = append(h.Events[:4],
			Event{Kind: "minted", Role: "r", Member: "c", PID: 1, Epoch: 1, Wall: t0 + 200},
			Event{Kind: "revoked", Role: "r", Member: "a", PID: 1, Epoch: 0, Reason: "fenced", Wall: t0 + 300})
		h.Leases = h.Leases[:1]
		elect(&h, "b", 3, t0+2200)
		return h
	}
	r := Audit(build(FaultKill))
	assert.Empty(t, r.Violations)
	require.Len(t, r.Elections, 2)
	assert.Contains(t, r.Elections[1].Cause, "kill d")
	assert.Equal(t, []Kind{KindElections}, kinds(Audit(build(FaultStop))))

	// d's own minted line in the window is evidence for a stop too.
	h := build(FaultStop)
	h.Events = append(h.Events, Event{Kind: "minted", Role: "r", Member: "d", PID: 1, Epoch: 2, Wall: t0 + 350})
	assert.Empty(t, Audit(h).Violations)
}

// A concurrent race spends no fault's budget: a was killed and b took the
// role (the kill explains it); c and d challenged within a stagger of the
// election before theirs (concurrent races); d's challenge, cut short by a
// Produce delay after it fenced b's lease, made b take the role again 2 s
// later, which the delay explains.
func TestAuditConcurrentRaceSpendsNoFault(t *testing.T) {
	h := clean()
	h.Members = 5
	h.Faults = append(h.Faults, Fault{Kind: FaultDelay, Detail: "Produce by 858ms", Start: t0 + 2900, End: t0 + 3800})
	elect(&h, "c", 2, t0+3100)
	elect(&h, "d", 3, t0+3200)
	elect(&h, "b", 4, t0+5200)
	r := Audit(h)
	assert.Empty(t, r.Violations)
	require.Len(t, r.Elections, 5)
	assert.Contains(t, r.Elections[1].Cause, "kill a")
	assert.Equal(t, "race (concurrent, 1 in a row)", r.Elections[2].Cause)
	assert.Equal(t, "race (concurrent, 2 in a row)", r.Elections[3].Cause)
	assert.Contains(t, r.Elections[4].Cause, "delay")

	// Without the delay nothing explains b's retake, nor the races.
	h.Faults = h.Faults[:1]
	assert.Equal(t, []Kind{KindElections, KindDoubleWin}, kinds(Audit(h)))
}

// The failover bound counts the other members' faults as the gap bound
// does: a member that minted a token of the role and was then cut off (a
// challenge cut short) a lease and a request timeout, any other member
// fault a request timeout and the staggers, so that a failover a
// challenger's fault delayed is judged as the gap audit judges its vacancy.
func TestFailoverBoundCountsOtherMembersFaults(t *testing.T) {
	h := clean()
	kill := h.Faults[0]
	base := FailoverBound(h, "r", "a", t0+1000, kill)
	assert.Equal(t, 3600*time.Millisecond, base)
	assert.Equal(t, GapBound(h, "r", "a", t0+1000)-h.Settings.Lease-h.Settings.RequestTimeout, base,
		"the gap bound from the kill, without the kill")

	h.Faults = append(h.Faults, Fault{Kind: FaultRestart, Target: "c", Start: t0 + 2000, End: t0 + 2100})
	staggers := time.Duration(h.Members-1) * h.Settings.Stagger
	assert.Equal(t, base+h.Settings.RequestTimeout+staggers, FailoverBound(h, "r", "a", t0+1000, kill), "another member's restart")

	// d challenges (mints 1/1, fencing nobody's lease: a is dead) and is
	// cut off before it writes its lease; b takes the role under 1/2
	// 5.6 s after the kill, 2 s later than the base bound allows.
	h.Events = append(h.Events[:4],
		Event{Kind: "minted", Role: "r", Member: "d", PID: 1, Epoch: 1, Wall: t0 + 2500},
		Event{Kind: "minted", Role: "r", Member: "b", PID: 1, Epoch: 2, Wall: t0 + 6590},
		Event{Kind: "elected", Role: "r", Member: "b", PID: 1, Epoch: 2, Wall: t0 + 6600})
	h.Faults = append(h.Faults, Fault{Kind: FaultPartition, Target: "d", Start: t0 + 2600, End: t0 + 5000})
	assert.Equal(t, base+h.Settings.RequestTimeout+staggers+h.Settings.Lease+h.Settings.RequestTimeout,
		FailoverBound(h, "r", "a", t0+1000, kill), "a challenger cut off after it minted a token of the role")
	h.Leases = h.Leases[:3] // a's
	renew(&h, "r", "b", tok(2), t0+6595)
	h.Records[2] = record("r", "b", tok(2), 0, 2)
	h.Outputs[2] = out("2", tok(2), 2)

	r := Audit(h)
	assert.Empty(t, r.Violations, "within the bound that d's partition extends")
	require.Len(t, r.Failovers, 1)
	assert.Equal(t, 5600*time.Millisecond, r.Failovers[0].Took)
	h.Faults = h.Faults[:2] // without d's partition
	assert.Equal(t, []Kind{KindFailover}, kinds(Audit(h)))
}

// A holder whose token was retired (a request under it got no definite
// answer) takes its own lease back at once (package processor, "Tokens"):
// an election that fences only its former self, explained without a
// fault (a request can go unanswered with none injected). So is another
// member's election after the retirement (the holder's heartbeats exclude
// the role); the same member's without a retirement is not.
func TestAuditRetakeAfterRetirement(t *testing.T) {
	h := clean()
	elect(&h, "b", 2, t0+6000)
	for i, ev := range h.Events {
		if ev.Kind == "revoked" && ev.Member == "b" && ev.Epoch == 1 {
			h.Events[i].Reason, h.Events[i].Wall = "token retired", t0+5990
		}
	}
	r := Audit(h)
	assert.Empty(t, r.Violations)
	assert.Equal(t, "retake of its own lease after its token was retired", r.Elections[2].Cause)

	for i, ev := range h.Events {
		if ev.Role == "r" && ev.Epoch == 2 {
			h.Events[i].Member = "a"
		}
	}
	for i, l := range h.Leases {
		if l.Token == tok(2) {
			h.Leases[i].Member = "a"
		}
	}
	r = Audit(h)
	assert.Empty(t, reported(r, KindElections))
	assert.Equal(t, "after the holder's token was retired", r.Elections[2].Cause)

	h = clean()
	elect(&h, "b", 2, t0+6000) // fenced, not retired
	assert.Equal(t, []Kind{KindElections}, kinds(Audit(h)))
}

// Settings.Takeover widens the failover and gap bounds by the time one
// candidate may take to challenge for every role of a member that died
// holding them all: a failover 3 s over the bound is within it then.
func TestTakeoverWidensTheBounds(t *testing.T) {
	h := clean()
	h.Events[4].Wall, h.Events[5].Wall = t0+6990, t0+7000 // 6 s after the kill, bound 3.6 s
	assert.Contains(t, kinds(Audit(h)), KindFailover)
	base := GapBound(h, "r", "a", t0+800)
	h.Settings.Takeover = 3 * time.Second
	assert.Equal(t, base+3*time.Second, GapBound(h, "r", "a", t0+800))
	assert.NotContains(t, kinds(Audit(h)), KindFailover)
}

// handOver ends b's holding of r under tok(1) in the clean history at
// t0+6000 (its revoked line, "handed over"), its leases stopping there,
// with a release committed at at under under (tok(1), or a new epoch of
// b's own).
func handOver(h *History, under Token, at int64) {
	kept := h.Leases[:0]
	for _, l := range h.Leases {
		if l.Token != tok(1) || l.Timestamp < t0+6000 {
			kept = append(kept, l)
		}
	}
	h.Leases = kept
	rel := leaseAt("r", "b", under, int64(len(h.Leases)), at)
	rel.GrantedAt, rel.Deadline = 0, 1
	h.Leases = append(h.Leases, rel)
	h.Events = append(h.Events, Event{Kind: "revoked", Role: "r", Member: "b", PID: 1, Epoch: 1, Reason: "handed over", Wall: t0 + 6000})
}

// An election whose challenge began after the holder's release was
// committed (a group's handover) is explained by it; one that began
// before the release is not.
func TestAuditReleaseExplainsTheNextElection(t *testing.T) {
	handover := func(mintedAfterRelease int64) *Report {
		h := clean()
		handOver(&h, tok(1), t0+6000)
		elect(&h, "a", 2, t0+6000+mintedAfterRelease)
		return Audit(h)
	}
	r := handover(50)
	assert.Empty(t, r.Violations)
	assert.Equal(t, "after the holder let it go", r.Elections[len(r.Elections)-1].Cause)

	r = handover(-500)
	assert.Contains(t, kinds(r), KindElections, "a challenge begun before the release")
}

// A holder whose token was retired releases the role under a new epoch of
// its own: that token is no election, and its release ends the holding
// before it, so the next election is explained.
func TestAuditReleaseUnderANewEpoch(t *testing.T) {
	h := clean()
	handOver(&h, tok(2), t0+6010)
	h.Events = append(h.Events, Event{Kind: "minted", Role: "r", Member: "b", PID: 1, Epoch: 2, Wall: t0 + 6005})
	elect(&h, "a", 3, t0+6050)
	r := Audit(h)
	assert.Empty(t, r.Violations)
	for _, e := range r.Elections {
		assert.NotEqual(t, tok(2), e.Token, "the release's own token counted as an election")
	}
	assert.Equal(t, "after the holder let it go", r.Elections[len(r.Elections)-1].Cause)
}

// A group's holder drops the role from its session as it hands it over; a
// successor that read that heartbeat fences the release in flight, which
// never commits. The holder's revoked line explains the election.
func TestAuditHandoverWhoseReleaseWasFenced(t *testing.T) {
	h := clean()
	handOver(&h, tok(1), t0+6000)
	h.Leases = h.Leases[:len(h.Leases)-1] // the release, fenced
	elect(&h, "a", 2, t0+6050)
	r := Audit(h)
	assert.Empty(t, r.Violations)
	assert.Equal(t, "after the holder let it go", r.Elections[len(r.Elections)-1].Cause)
}
