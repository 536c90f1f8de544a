package groupsum

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/group"
)

// The document: groups in name order, a group without members has
// "members":[] and null mean and max_mean, a draining member weighs 0,
// roles held by members of no group count for nobody, and each group
// has its last moves.
func TestBuildJSON(t *testing.T) {
	got := Build(map[string][]group.Member{
		"web":   {{ID: "w1", Weight: 2}, {ID: "w2", Weight: 1}, {ID: "w3", Weight: 0}},
		"empty": nil,
	}, map[codec.MemberID]int{"w1": 4, "w2": 2, "w3": 1, "other": 9}, map[string][]group.Move{
		"web": {
			{Role: "r1", Group: "web", To: "w1", Offset: 3, At: 1000, Cause: group.MoveJoin, Unheld: -1},
			{Role: "r2", Group: "web", From: "w1", To: "w2", Offset: 7, At: 2000, Cause: group.MoveRebalance, Unheld: 1500 * time.Microsecond},
			{Role: "r1", Group: "web", From: "w1", To: "w3", Offset: 9, At: 3000, Cause: group.MoveFailover, Unheld: 2 * time.Second},
		},
		"gone": {{Role: "x", To: "w9", Cause: group.MoveJoin}},
	}, 2)
	b, err := json.Marshal(got)
	require.NoError(t, err)
	assert.Equal(t, `[{"group":"empty","members":[],"roles":0,"max":0,"mean":null,"max_mean":null,"moves":[]},`+
		`{"group":"web","members":[{"member":"w1","weight":2,"draining":false,"roles":4},{"member":"w2","weight":1,"draining":false,"roles":2},`+
		`{"member":"w3","weight":0,"draining":true,"roles":1}],"roles":7,"max":4,"mean":3.5,"max_mean":1.1428571428571428,`+
		`"moves":[{"role":"r2","from":"w1","to":"w2","cause":"rebalance","at":2000,"offset":7,"unheld_ms":1.5},`+
		`{"role":"r1","from":"w1","to":"w3","cause":"failover","at":3000,"offset":9,"unheld_ms":2000}]}]`, string(b),
		"the last 2 moves, oldest first; a group with no live member is not listed for its moves")
	assert.Equal(t, []Move{}, Moves([]group.Move{{Role: "r"}}, 0), "none asked: []")
	assert.Len(t, Moves([]group.Move{{Role: "r", Unheld: -1}}, 5), 1)
	assert.Nil(t, Moves([]group.Move{{Role: "r", Unheld: -1}}, 5)[0].UnheldMS, "not known: null")
	b, err = json.Marshal(Build(nil, nil, nil, 20))
	require.NoError(t, err)
	assert.Equal(t, "[]", string(b), "no group: an empty array, never null")
}
