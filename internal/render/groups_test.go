package render

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/group"
	"github.com/krabka/krole/internal/groupsum"
	"github.com/krabka/krole/internal/server"
)

func ptr(f float64) *float64 { return &f }

// A member holds the roles whose lease in the rows is live and names it.
func TestGroupsCountLiveLeases(t *testing.T) {
	rows := []server.Row{
		{Role: "a", Holder: &server.Holder{Member: "m1"}},
		{Role: "b", Holder: &server.Holder{Member: "m1"}},
		{Role: "c", Holder: &server.Holder{Member: "m2", Expired: true}},
		{Role: "d", Holder: &server.Holder{Member: "m2"}},
		{Role: "e"},
	}
	assert.Equal(t, map[codec.MemberID]int{"m1": 2, "m2": 1}, server.HeldRoles(rows))
}

// The balance of each group from its members and their holdings: MEAN
// over the members of positive weight, none when every member drains,
// MAX/MEAN none when they hold no role; groups in name order, and a
// draining member's roles still count as the group's.
func TestGroupTablesBalance(t *testing.T) {
	got := groupsum.Build(map[string][]group.Member{
		"web":     {{ID: "w1", Weight: 2}, {ID: "w2", Weight: 1}, {ID: "w3", Weight: 0}},
		"idle":    {{ID: "i1", Weight: 1}},
		"leaving": {{ID: "l1", Weight: 0}},
	}, map[codec.MemberID]int{"w1": 6, "w2": 3, "w3": 1, "l1": 2, "x": 9}, nil, 0)
	for _, g := range got {
		assert.Equal(t, []groupsum.Move{}, g.Moves, "no moves given")
	}
	assert.Equal(t, []groupsum.Group{
		{Group: "idle", Members: []groupsum.Member{{Member: "i1", Weight: 1}}, Mean: ptr(0), Moves: []groupsum.Move{}},
		{Group: "leaving", Members: []groupsum.Member{{Member: "l1", Draining: true, Roles: 2}}, Roles: 2, Max: 2, Moves: []groupsum.Move{}},
		{Group: "web", Members: []groupsum.Member{{Member: "w1", Weight: 2, Roles: 6}, {Member: "w2", Weight: 1, Roles: 3}, {Member: "w3", Draining: true, Roles: 1}},
			Roles: 10, Max: 6, Mean: ptr(5), MaxMean: ptr(1.2), Moves: []groupsum.Move{}},
	}, got)

	var b bytes.Buffer
	require.NoError(t, GroupTables(&b, got, "", time.Now()))
	assert.Equal(t, ""+
		"GROUP    MEMBER  WEIGHT  DRAINING  ROLES\n"+
		"idle     i1      1       no        0\n"+
		"leaving  l1      0       yes       2\n"+
		"web      w1      2       no        6\n"+
		"web      w2      1       no        3\n"+
		"web      w3      0       yes       1\n"+
		"\n"+
		"GROUP    MEMBERS  ROLES  MAX  MEAN  MAX/MEAN\n"+
		"idle     1        0      0    0.00  -\n"+
		"leaving  1        2      2    -     -\n"+
		"web      3        10     6    5.00  1.20\n", b.String())
}

// The moves' table: the last moves of each group, "-" for nobody before
// and for an unheld time not known, times relative to now.
func TestGroupTablesMoves(t *testing.T) {
	now := time.UnixMilli(1_700_000_010_000)
	got := groupsum.Build(map[string][]group.Member{"web": {{ID: "w1", Weight: 1}, {ID: "w2", Weight: 1}}},
		map[codec.MemberID]int{"w1": 1, "w2": 1}, map[string][]group.Move{"web": {
			{Role: "r0", To: "w1", At: 1_700_000_000_000, Cause: group.MoveJoin, Unheld: -1},
			{Role: "r1", To: "w1", At: 1_700_000_001_000, Cause: group.MoveJoin, Unheld: -1},
			{Role: "r1", From: "w1", To: "w2", At: 1_700_000_007_500, Cause: group.MoveDrain, Unheld: 12 * time.Millisecond},
		}}, 2)
	var b bytes.Buffer
	require.NoError(t, GroupTables(&b, got, "", now))
	assert.Equal(t, ""+
		"GROUP  MEMBER  WEIGHT  DRAINING  ROLES\n"+
		"web    w1      1       no        1\n"+
		"web    w2      1       no        1\n"+
		"\n"+
		"GROUP  MEMBERS  ROLES  MAX  MEAN  MAX/MEAN\n"+
		"web    2        2      1    1.00  1.00\n"+
		"\n"+
		"GROUP  ROLE  FROM  TO  CAUSE  AT                                 UNHELD\n"+
		"web    r1    -     w1  join   2023-11-14T22:13:21.000Z (9s ago)  -\n"+
		"web    r1    w1    w2  drain  2023-11-14T22:13:27.500Z (2s ago)  12ms\n", b.String())
}
