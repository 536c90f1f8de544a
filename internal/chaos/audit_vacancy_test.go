package chaos

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var (
	sessC = Session{PID: 102, Epoch: 0, Nonce: "nc"}
	sessD = Session{PID: 103, Epoch: 0, Nonce: "nd"}
)

// win adds member's election of r under token 1/e whose challenge
// returned at at: its minted line then, its elected line 10 ms later, and
// its lease, naming session s, begun at at+5.
func win(h *History, member string, s Session, e int16, at int64) {
	h.Events = append(h.Events,
		Event{Kind: "minted", Role: "r", Member: member, PID: 1, Epoch: e, Wall: at},
		Event{Kind: "elected", Role: "r", Member: member, PID: 1, Epoch: e, Wall: at + 10})
	l := leaseAt("r", member, tok(e), int64(len(h.Leases)), at+5)
	l.Session = &s
	h.Leases = append(h.Leases, l)
}

// release adds member's release of r under token 1/e, begun at at.
func release(h *History, member string, e int16, at int64) {
	l := leaseAt("r", member, tok(e), int64(len(h.Leases)), at)
	l.GrantedAt, l.Deadline = 0, 1
	h.Leases = append(h.Leases, l)
}

// failedOver is sessioned with a third member: a, killed at t0+1000
// (last heartbeat t0+800), leaves r vacant from t0+2800, when its lease
// expires, and b takes it (minted t0+2990, lease begun t0+2995).
func failedOver() History {
	h := sessioned()
	h.Members = 3
	return h
}

// A double win in the failover of a member holding many roles: b and c
// both confirmed r vacant while the other's challenge was in flight, and
// both won it; b never released. Reported with the
// role, the tokens, the members and the lease offsets; a third win of the
// same vacancy is named in the same violation.
func TestAuditDoubleWin(t *testing.T) {
	h := failedOver()
	win(&h, "c", sessC, 2, t0+3300)
	r := Audit(h)
	vs := reported(r, KindDoubleWin)
	require.Len(t, vs, 1, "%v", r.Violations)
	assert.Equal(t, "r", vs[0].Role)
	for _, s := range []string{
		"won 2 times within one vacancy",
		"a's token 1/0 expired",
		"b token 1/1 (lease at partition 0 offset 1,",
		"c token 1/2 (lease at partition 0 offset 2,",
	} {
		assert.Contains(t, vs[0].Evidence, s)
	}
	assert.Equal(t, 1, r.Vacancies)
	assert.Equal(t, 1, r.WonTwice)
	var sb strings.Builder
	r.Write(&sb)
	assert.Contains(t, sb.String(), "vacancies: 1 (won more than once: 1, 0 of them while a fault could hold a challenge in flight)\n")

	win(&h, "b", sessB, 3, t0+3600) // b again, while c's lease is live
	vs = reported(Audit(h), KindDoubleWin)
	require.Len(t, vs, 1)
	assert.Contains(t, vs[0].Evidence, "won 3 times within one vacancy")
	assert.Contains(t, vs[0].Evidence, "b token 1/3 (lease at partition 0 offset 3,")

	// A fault that can hold a challenge in flight (a Produce delay while
	// b's was under way) explains it: counted, not reported.
	h = failedOver()
	win(&h, "c", sessC, 2, t0+3300)
	h.Faults = append(h.Faults, Fault{Kind: FaultDelay, Detail: "Produce by 300ms", Start: t0 + 3000, End: t0 + 3200})
	r = Audit(h)
	assert.Empty(t, reported(r, KindDoubleWin))
	assert.Equal(t, 1, r.WonTwice)
	assert.Equal(t, 1, r.WonTwiceInAFault)

	// The kill of the holder before the vacancy explains nothing, nor a
	// stop of a member that won nothing.
	h = failedOver()
	win(&h, "c", sessC, 2, t0+3300)
	h.Faults = append(h.Faults, Fault{Kind: FaultStop, Target: "d", Start: t0 + 3000, End: t0 + 3200})
	assert.Len(t, reported(Audit(h), KindDoubleWin), 1)
}

// Successions are one win per vacancy: b resigns (its release) or hands
// over (its session's end), and c takes the role at once; b's lease
// expires (its heartbeats stopped at t0+3795) and c takes the role after
// that, but not before.
func TestAuditSuccessionIsNoDoubleWin(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func(h *History)
		won   int
	}{
		{"resigned", func(h *History) {
			release(h, "b", 1, t0+3500)
			win(h, "c", sessC, 2, t0+3520)
		}, 0},
		{"handed over with the session's end", func(h *History) {
			end := heartbeat("b", sessB, int64(len(h.Heartbeats)), t0+3500)
			end.GrantedAt, end.Deadline, end.End = 0, 0, true
			h.Heartbeats = append(h.Heartbeats, end)
			win(h, "c", sessC, 2, t0+3520)
		}, 0},
		{"expired", func(h *History) {
			h.Heartbeats = h.Heartbeats[:2] // a's
			beat(h, "b", sessB, t0+3395, t0+3800)
			win(h, "c", sessC, 2, t0+5800)
		}, 0},
		{"challenged 5 ms before it expired", func(h *History) {
			h.Heartbeats = h.Heartbeats[:2]
			beat(h, "b", sessB, t0+3395, t0+3800)
			win(h, "c", sessC, 2, t0+5790)
		}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := failedOver()
			tc.build(&h)
			r := Audit(h)
			assert.Len(t, reported(r, KindDoubleWin), tc.won, "%v", r.Violations)
			assert.Equal(t, 2-tc.won, r.Vacancies, "a's, and b's unless c won it too")
		})
	}
}

// A member taking back its own lease (package processor, rule 5) wins no
// vacancy: b's token retired, b takes the role back at once under 1/2.
// Another member's win while b's holding lasts is a second win of the
// vacancy b won. When b's own heartbeat excluded the role first, a
// candidate that saw the exclusion may race b's take-back (rule 6 makes b
// the one that waits): that is one win, a third member's is not.
func TestAuditTakeBackIsNoDoubleWin(t *testing.T) {
	h := failedOver()
	h.Events = append(h.Events, Event{Kind: "revoked", Role: "r", Member: "b", PID: 1, Epoch: 1, Reason: "token retired", Wall: t0 + 3500})
	win(&h, "b", sessB, 2, t0+3510)
	r := Audit(h)
	assert.Empty(t, reported(r, KindDoubleWin), "%v", r.Violations)
	assert.Equal(t, 1, r.Vacancies)

	win(&h, "c", sessC, 3, t0+3600)
	vs := reported(Audit(h), KindDoubleWin)
	require.Len(t, vs, 1, "c took the role while b held it")
	assert.Contains(t, vs[0].Evidence, "b token 1/1")
	assert.Contains(t, vs[0].Evidence, "c token 1/3")

	h = failedOver()
	h.Members = 4
	h.Heartbeats = append(h.Heartbeats, heartbeat("b", sessB, int64(len(h.Heartbeats)), t0+3500, "r"))
	win(&h, "b", sessB, 2, t0+3520)
	win(&h, "c", sessC, 3, t0+3540)
	r = Audit(h)
	assert.Empty(t, reported(r, KindDoubleWin), "%v", r.Violations)
	assert.Equal(t, 2, r.Vacancies, "a's, and the one b's exclusion opened, which c won")

	win(&h, "d", sessD, 4, t0+3700)
	vs = reported(Audit(h), KindDoubleWin)
	require.Len(t, vs, 1)
	assert.Contains(t, vs[0].Evidence, "b's token 1/1 excluded by its session's heartbeat")
	assert.Contains(t, vs[0].Evidence, "won 2 times")
}
