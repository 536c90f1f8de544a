package chaos

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// withRows is the clean history with rows in the database: a's holding
// (its first lease at offset 0, so number 0) writes two, b's (its first
// lease at offset 3, number 3, begun t0+2995) one after them.
func withRows() History {
	h := clean()
	h.Rows = []Row{
		dbRow("a", tok(0), 1, 0, 0, t0+20),
		dbRow("a", tok(0), 2, 0, 1, t0+520),
		dbRow("b", tok(1), 3, 3, 0, t0+3010),
	}
	return h
}

func dbRow(member string, t Token, pos, number, seq, began int64) Row {
	return Row{Role: "r", Pos: pos, Number: number, Member: member, PID: t.PID, Epoch: t.Epoch, Seq: seq, Began: began}
}

// insertRow puts r at commit position r.Pos, moving the rows from there
// one place on.
func insertRow(h *History, r Row) {
	var rows []Row
	for _, x := range h.Rows {
		if x.Pos >= r.Pos {
			x.Pos++
		}
		rows = append(rows, x)
	}
	rows = append(rows[:r.Pos-1], append([]Row{r}, rows[r.Pos-1:]...)...)
	h.Rows = rows
}

func TestAuditRowsClean(t *testing.T) {
	h := withRows()
	h.Events = append(h.Events,
		Event{Kind: "dbwrite", Role: "r", Member: "a", PID: 1, Epoch: 0, Seq: 2, Began: t0 + 900, Outcome: "context", Wall: t0 + 910},
		Event{Kind: "dbwrite", Role: "r", Member: "a", PID: 1, Epoch: 0, Seq: 3, Began: t0 + 3100, Outcome: "stale", Wall: t0 + 3110})
	r := Audit(h)
	assert.Empty(t, r.Violations)
	assert.Equal(t, 3, r.Rows)
	var sb strings.Builder
	r.Write(&sb)
	assert.Contains(t, sb.String(), ", 3 database rows\n")
	assert.Contains(t, sb.String(), "\ndatabase writes: 2 (context 1, stale 1)\n")
}

// A row of a's number committed after b's row is reported (db-order),
// though a's holding was live when it began (a's log has no revoked line:
// a was killed, and not started again).
func TestAuditRowsOrder(t *testing.T) {
	h := withRows()
	h.Rows = append(h.Rows, dbRow("a", tok(0), 4, 0, 2, t0+900))
	r := Audit(h)
	vs := reported(r, KindDBOrder)
	require.Len(t, vs, 1, "%v", r.Violations)
	assert.Equal(t, "row pos 4 of a under number 0 (token 1/0, seq 2) committed after row pos 3 of b under number 3 (token 1/1, seq 0)", vs[0].Evidence)
	assert.Len(t, r.Violations, 1)

	// Before b's row, it is in order.
	h = withRows()
	insertRow(&h, dbRow("a", tok(0), 3, 0, 2, t0+900))
	assert.Empty(t, Audit(h).Violations)
}

// A row's number must be the first-lease offset of a holding of its own
// member and token.
func TestAuditRowsNumber(t *testing.T) {
	for _, tc := range []struct {
		name string
		row  Row
		want string
	}{
		{"a number that is a later lease's offset", dbRow("a", tok(0), 3, 1, 2, t0+900),
			"row pos 3 of a under number 1 (token 1/0, seq 2): no holding of the role has its first lease at offset 1"},
		{"a number beyond every lease", dbRow("a", tok(0), 4, 99, 2, t0+900),
			"no holding of the role has its first lease at offset 99"},
		{"another member's number", dbRow("a", tok(0), 4, 3, 2, t0+3100),
			"row pos 4 of a under number 3 (token 1/0, seq 2): the holding numbered 3 is b's under token 1/1"},
		{"its number under another token", dbRow("b", tok(0), 4, 3, 1, t0+3100),
			"the holding numbered 3 is b's under token 1/1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := withRows()
			insertRow(&h, tc.row)
			r := Audit(h)
			vs := reported(r, KindDBHolding)
			require.Len(t, vs, 1, "%v", r.Violations)
			assert.Contains(t, vs[0].Evidence, tc.want)
			assert.Len(t, r.Violations, 1, "%v", r.Violations)
		})
	}
}

// A row of a's holding begun after a's revoked line and after b's first
// lease (t0+2995) is reported, though it committed before b's rows (the
// fence lets it through until b has written); begun before either, it is
// not.
func TestAuditRowsLive(t *testing.T) {
	revoked := func() History {
		h := withRows()
		h.Faults = nil // not killed: a steps down at t0+1500
		h.Events = append(h.Events, Event{Kind: "revoked", Role: "r", Member: "a", PID: 1, Epoch: 0, Reason: "lease lost", Wall: t0 + 1500})
		return h
	}
	h := revoked()
	insertRow(&h, dbRow("a", tok(0), 3, 0, 2, t0+2995))
	r := Audit(h)
	vs := reported(r, KindDBHolding)
	require.Len(t, vs, 1, "%v", r.Violations)
	assert.Contains(t, vs[0].Evidence, "row pos 3 of a under number 0 (token 1/0, seq 2) was begun at")
	assert.Contains(t, vs[0].Evidence, "when a's log did not show the holding, and after a later holding's lease")

	// Begun after the revoked line, but before b's lease was written:
	// the topic shows no later holding yet.
	h = revoked()
	insertRow(&h, dbRow("a", tok(0), 3, 0, 2, t0+2994))
	assert.Empty(t, reported(Audit(h), KindDBHolding))

	// Begun after b's lease, but at a's revoked line: a's log shows the
	// holding still.
	h = revoked()
	h.Events[len(h.Events)-1].Wall = t0 + 3200
	insertRow(&h, dbRow("a", tok(0), 3, 0, 2, t0+3200))
	assert.Empty(t, reported(Audit(h), KindDBHolding))

	// After a restart of a's process its old holding is over.
	h = withRows()
	h.Events = append(h.Events, Event{Kind: "start", Member: "a", Wall: t0 + 4000})
	insertRow(&h, dbRow("a", tok(0), 3, 0, 2, t0+4010))
	assert.Len(t, reported(Audit(h), KindDBHolding), 1)
}

// The rows come back from history.json as they went in, and are judged
// the same.
func TestHistoryRoundTripRows(t *testing.T) {
	h := withRows()
	h.Rows = append(h.Rows, dbRow("a", tok(0), 4, 0, 2, t0+900)) // db-order
	h.Events = append(h.Events, Event{Kind: "dbwrite", Role: "r", Member: "a", PID: 1, Epoch: 0, Fence: 0, Seq: 2, Began: t0 + 900, Outcome: "ok", Wall: t0 + 905})
	path := t.TempDir() + "/history.json"
	require.NoError(t, WriteHistory(path, &h))
	back, err := ReadHistory(path)
	require.NoError(t, err)
	assert.Equal(t, h, *back)
	r := Audit(*back)
	assert.Equal(t, []Kind{KindDBOrder}, kinds(r))
	assert.Equal(t, map[string]int{"ok": 1}, r.DBWrites)
}
