package chaos

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// reported returns the violations of kind k in r.
func reported(r *Report, k Kind) []Violation {
	var vs []Violation
	for _, v := range r.Violations {
		if v.Kind == k {
			vs = append(vs, v)
		}
	}
	return vs
}

// stopped is the clean history with a SIGSTOPped instead of killed, from
// t0+1000 to SIGCONT at t0+4000, b elected at t0+3000: a's local deadline
// (its last lease begun at t0+800, + HeartbeatDeadline 1.6 s) passed while it
// was stopped, so it may act until the SIGCONT (+ Tolerance).
func stopped() History {
	h := clean()
	h.Faults[0].Kind = FaultStop
	return h
}

// (a) A SIGSTOPped holder whose own log shows it still holding, with no
// revocation, 10 s after its successor's election is reported; one that
// gives up as soon as it runs again is not.
func TestAuditOverlap(t *testing.T) {
	h := stopped()
	// Back at t0+4000, a logs its writes (another role's, say) and never
	// revokes r: 10 s after b's election it still holds.
	for at := t0 + 4010; at <= t0+13000; at += 250 {
		h.Events = append(h.Events, Event{Kind: "write", Role: "s", Member: "a", PID: 2, Epoch: 0, Seq: (at - t0) / 250, Began: at - 5, Outcome: OutcomeOK, Wall: at})
	}
	r := Audit(h)
	vs := reported(r, KindOverlap)
	require.Len(t, vs, 1, "%v", r.Violations)
	assert.Contains(t, vs[0].Evidence, "a held under token 1/0")
	assert.Contains(t, vs[0].Evidence, "no revoked line")
	assert.Contains(t, vs[0].Evidence, "b held the role under newer token 1/1 since")

	// The same, with a revoked line 10 s after b's election.
	h = stopped()
	h.Events = append(h.Events, Event{Kind: "revoked", Role: "r", Member: "a", PID: 1, Epoch: 0, Reason: "lease lost", Wall: t0 + 13000})
	assert.Len(t, reported(Audit(h), KindOverlap), 1, "revoked 9 s after the SIGCONT")

	// Revoked 50 ms after the SIGCONT: it could not act while stopped.
	h = stopped()
	h.Events = append(h.Events, Event{Kind: "revoked", Role: "r", Member: "a", PID: 1, Epoch: 0, Reason: "lease lost", Wall: t0 + 4050})
	r = Audit(h)
	assert.Empty(t, r.Violations)

	// Not stopped (a cut off the network, say): its deadline is t0+2400,
	// so a revocation by t0+3400 is within the tolerance, one at t0+3500
	// is not (b elected at t0+3000).
	for _, tc := range []struct {
		at   int64
		want int
	}{{t0 + 3400, 0}, {t0 + 3500, 1}} {
		h = clean()
		h.Faults[0].Kind = FaultPartition
		h.Events = append(h.Events, Event{Kind: "revoked", Role: "r", Member: "a", PID: 1, Epoch: 0, Reason: "lease lost", Wall: tc.at})
		assert.Len(t, reported(Audit(h), KindOverlap), tc.want, "revoked at t0+%d", tc.at-t0)
	}

	// Stopped 300 ms after its deadline (t0+2400), before it gave up:
	// it may give up after the SIGCONT.
	h = clean()
	h.Faults[0] = Fault{Kind: FaultStop, Target: "a", Start: t0 + 2700, End: t0 + 6000}
	h.Events = append(h.Events, Event{Kind: "revoked", Role: "r", Member: "a", PID: 1, Epoch: 0, Reason: "lease lost", Wall: t0 + 6050})
	assert.Empty(t, reported(Audit(h), KindOverlap))
	h.Faults[0].Start = t0 + 3500 // live for 1.1 s past its deadline first
	assert.Len(t, reported(Audit(h), KindOverlap), 1)

	// Holding past the deadline without a successor is no overlap.
	h = stopped()
	h.Events = h.Events[:4]
	h.Leases = h.Leases[:3]
	h.Events = append(h.Events, Event{Kind: "revoked", Role: "r", Member: "a", PID: 1, Epoch: 0, Reason: "lease lost", Wall: t0 + 13000})
	assert.Empty(t, reported(Audit(h), KindOverlap))
}

// (b) A record under 1/0 committed 510 ms after 1/1 was minted, before
// 1/1 wrote anything, is reported: the coordinator fenced 1/0 at the
// mint. One whose write began before the mint is not (it may have
// committed before it).
func TestAuditAfterMint(t *testing.T) {
	mint := t0 + 2990 // b's minted line
	h := clean()
	h.Records = []Record{record("r", "a", tok(0), 0, 0), record("r", "a", tok(0), 1, 1), record("r", "b", tok(1), 0, 2)}
	h.Records[1].Timestamp = mint + 510
	r := Audit(h)
	vs := reported(r, KindAfterMint)
	require.Len(t, vs, 1, "%v", r.Violations)
	assert.Contains(t, vs[0].Evidence, "record seq 1 of a under token 1/0")
	assert.Contains(t, vs[0].Evidence, "510 ms after newer token 1/1 was minted")
	assert.Empty(t, reported(r, KindOrder), "the records' offsets are in token order: order sees nothing")

	// The member's write line tells the same when the batch carries no
	// time.
	h = clean()
	h.Events = append(h.Events, Event{Kind: "write", Role: "r", Member: "a", PID: 1, Epoch: 0, Seq: 1, Began: mint + 510, Outcome: OutcomeOK, Wall: mint + 520})
	assert.Len(t, reported(Audit(h), KindAfterMint), 1)

	// A lease and a stream output too.
	h = clean()
	h.Leases = append(h.Leases[:3], append([]Lease{leaseAt("r", "a", tok(0), 3, mint+1)}, h.Leases[3:]...)...)
	h.Outputs[1].Timestamp = mint + 1
	h.Events = append(h.Events, Event{Kind: "minted", Role: "stream", Member: "b", PID: 1, Epoch: 1, Wall: mint})
	assert.Len(t, reported(Audit(h), KindAfterMint), 2)

	// Begun before the mint (a cut off, its write answered late): not
	// judged late.
	h = clean()
	h.Faults[0].Kind = FaultPartition
	h.Records[1].Timestamp = mint - 1
	h.Events = append(h.Events, Event{Kind: "write", Role: "r", Member: "a", PID: 1, Epoch: 0, Seq: 1, Began: mint - 10, Outcome: OutcomeOK, Wall: mint + 300})
	assert.Empty(t, Audit(h).Violations)
}

// (c) A sequence number committed twice, or after a later one, and a
// write that returned an error to the member but is committed, are
// reported; a write that returned ok, or the one error that may have
// committed, is not.
func TestAuditSequences(t *testing.T) {
	h := clean()
	h.Records = append(h.Records, record("r", "b", tok(1), 0, 3))
	vs := reported(Audit(h), KindSequence)
	require.Len(t, vs, 1)
	assert.Contains(t, vs[0].Evidence, "seq 0 of b under token 1/1 is committed twice")

	h = clean()
	h.Records = append(h.Records, record("r", "b", tok(1), 2, 3), record("r", "b", tok(1), 1, 4))
	vs = reported(Audit(h), KindSequence)
	require.Len(t, vs, 1)
	assert.Contains(t, vs[0].Evidence, "seq 1 of b under token 1/1 is committed at partition 0 offset 4, after seq 2 at offset 3")

	for _, tc := range []struct {
		outcome string
		want    int
	}{
		{OutcomeOK, 0},
		{OutcomeMayHaveCommitted, 0},
		{OutcomeUnknown, 1},
		{OutcomeFenced, 1},
		{OutcomeContext, 1},
		{OutcomeProducer, 1},
	} {
		h = clean()
		h.Events = append(h.Events, Event{Kind: "write", Role: "r", Member: "a", PID: 1, Epoch: 0, Seq: 1, Began: t0 + 500, Outcome: tc.outcome, Err: "the error", Wall: t0 + 900})
		r := Audit(h)
		vs := reported(r, KindZombie)
		assert.Len(t, vs, tc.want, tc.outcome)
		if tc.want > 0 {
			assert.Contains(t, vs[0].Evidence, "returned "+tc.outcome+" to a")
		}
		assert.Equal(t, 1, r.Writes[tc.outcome])
	}
}

// (d) A role without a holder for 14 s after a 1 s Produce stall, with a
// live candidate, is reported, though the stall explains the election
// that ends it; a gap within the bound the stall extends is not, nor one
// while every member was down.
func TestAuditGap(t *testing.T) {
	stall := func(b0 int64) History {
		h := clean()
		// no kill: a stall at t0+1000 for 1 s, after which b is elected
		// at b0 (a gave up at its deadline)
		h.Faults = []Fault{{Kind: FaultStall, Detail: "Produce held 1s", Start: t0 + 1000, End: t0 + 2000}}
		h.Events = h.Events[:4]
		h.Leases = h.Leases[:3]
		h.Events = append(h.Events, Event{Kind: "revoked", Role: "r", Member: "a", PID: 1, Epoch: 0, Reason: "lease lost", Wall: t0 + 2400})
		elect(&h, "b", 1, b0)
		return h
	}
	// a's last lease begun at t0+800; bound: 2 s + 0.4 s + 0.2 s + 1 s,
	// + the stall's 1 s + 1 s request timeout = 5.6 s, to t0+6400.
	assert.Equal(t, 5600*time.Millisecond, GapBound(stall(t0+6300), "r", "a", t0+800))

	h := stall(t0 + 14800)
	r := Audit(h)
	vs := reported(r, KindGap)
	require.Len(t, vs, 1, "%v", r.Violations)
	assert.Contains(t, vs[0].Evidence, "(the last renewal of token 1/0 begun) to")
	assert.Contains(t, vs[0].Evidence, "b elected under token 1/1")
	assert.Contains(t, vs[0].Evidence, "bound 5600 ms")
	require.Len(t, r.Elections, 2)
	assert.Contains(t, r.Elections[1].Cause, "stall", "the stall explains the election, however late: that is the gap audit's to judge")
	assert.Empty(t, reported(r, KindFailover), "no member fault: the failover audit has nothing to measure")
	var sb strings.Builder
	r.Write(&sb)
	assert.Contains(t, sb.String(), "longest gap: role r from")

	r = Audit(stall(t0 + 6300))
	assert.Empty(t, r.Violations)
	assert.NotEmpty(t, r.Gaps)

	// The same gap while both members were down at some moment: no live
	// candidate, not judged.
	h = stall(t0 + 14800)
	h.Faults = append(h.Faults,
		Fault{Kind: FaultStop, Target: "a", Start: t0 + 5000, End: t0 + 8000},
		Fault{Kind: FaultPartition, Target: "b", Start: t0 + 7000, End: t0 + 9000})
	assert.Empty(t, reported(Audit(h), KindGap), "a and b both down at t0+7000")
	// Only one of them down: a fault of the holder adds a lease and a
	// request timeout, not its length (5.6 s + 3 s = 8.6 s, to t0+9400).
	h.Faults = h.Faults[:2]
	assert.Equal(t, 8600*time.Millisecond, GapBound(h, "r", "a", t0+800))
	assert.Len(t, reported(Audit(h), KindGap), 1)
	// A fault of a member with no challenge of the role in it adds a
	// request timeout and the staggers (1 s + 0.2 s); one of a member
	// that minted a token of the role meanwhile, a lease and a request
	// timeout.
	h.Faults = append(h.Faults, Fault{Kind: FaultPartition, Target: "b", Start: t0 + 9000, End: t0 + 9300})
	assert.Equal(t, 9800*time.Millisecond, GapBound(h, "r", "a", t0+800))
	h.Events = append(h.Events, Event{Kind: "minted", Role: "r", Member: "b", PID: 1, Epoch: 1, Wall: t0 + 9100})
	assert.Equal(t, 11600*time.Millisecond, GapBound(h, "r", "a", t0+800))

	// A role without a holder until the shutdown.
	h = clean()
	h.Events = h.Events[:4]
	h.Leases = h.Leases[:3]
	h.Faults = nil
	h.Events = append(h.Events, Event{Kind: "revoked", Role: "r", Member: "a", PID: 1, Epoch: 0, Reason: "resigned", Wall: t0 + 900})
	vs = reported(Audit(h), KindGap)
	require.Len(t, vs, 1)
	assert.Contains(t, vs[0].Evidence, "until the shutdown")
}

// The gap bound counts chained faults whole, as the failover bound does.
func TestGapBoundChain(t *testing.T) {
	h := clean()
	h.Faults = nil
	base := GapBound(h, "r", "a", t0)
	assert.Equal(t, 3600*time.Millisecond, base)
	h.Faults = []Fault{
		{Kind: FaultStall, Start: t0 + 3000, End: t0 + 4000}, // within the base: +2 s, to t0+5600
		{Kind: FaultError, Start: t0 + 5500, End: t0 + 6000}, // within that: +1.5 s, to t0+7100
		{Kind: FaultDelay, Start: t0 + 9000, End: t0 + 9100}, // beyond: not counted
		{Kind: FaultStart, Target: "a", Start: t0 + 1000},    // starts add nothing
		{Kind: FaultError, Start: t0 - 5000, End: t0 - 1500}, // over before (its request timeout too)
	}
	assert.Equal(t, base+2000*time.Millisecond+1500*time.Millisecond, GapBound(h, "r", "a", t0))
}

// A history written and read back is judged alike, batches included.
func TestHistoryRoundTrip(t *testing.T) {
	h := clean()
	h.Records[1].Timestamp = t0 + 3500 // after b's mint: one after-mint
	path := t.TempDir() + "/history.json"
	require.NoError(t, WriteHistory(path, &h))
	back, err := ReadHistory(path)
	require.NoError(t, err)
	assert.Equal(t, h, *back)
	assert.Equal(t, kinds(Audit(h)), kinds(Audit(*back)))
	assert.Equal(t, []Kind{KindAfterMint}, kinds(Audit(*back)))
}
