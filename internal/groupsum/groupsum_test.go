package groupsum

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/group"
)

// The document: groups in name order, a group without members has
// "members":[] and null mean and max_mean, a draining member weighs 0,
// and roles held by members of no group count for nobody.
func TestBuildJSON(t *testing.T) {
	got := Build(map[string][]group.Member{
		"web":   {{ID: "w1", Weight: 2}, {ID: "w2", Weight: 1}, {ID: "w3", Weight: 0}},
		"empty": nil,
	}, map[codec.MemberID]int{"w1": 4, "w2": 2, "w3": 1, "other": 9})
	b, err := json.Marshal(got)
	require.NoError(t, err)
	assert.Equal(t, `[{"group":"empty","members":[],"roles":0,"max":0,"mean":null,"max_mean":null},`+
		`{"group":"web","members":[{"member":"w1","weight":2,"draining":false,"roles":4},{"member":"w2","weight":1,"draining":false,"roles":2},`+
		`{"member":"w3","weight":0,"draining":true,"roles":1}],"roles":7,"max":4,"mean":3.5,"max_mean":1.1428571428571428}]`, string(b))
	b, err = json.Marshal(Build(nil, nil))
	require.NoError(t, err)
	assert.Equal(t, "[]", string(b), "no group: an empty array, never null")
}
