package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/groupsum"
	"github.com/krabka/krole/internal/grouptest"
	"github.com/krabka/krole/internal/testcluster"
)

// tableMembersJSON runs `table --members -o json` with args and returns
// its groups without their moves, checking the field names of each.
func tableMembersJSON(t *testing.T, c *testcluster.Cluster, args ...string) []groupsum.Group {
	t.Helper()
	out := tableMembersMovesJSON(t, c, args...)
	for i := range out {
		out[i].Moves = nil
	}
	return out
}

// tableMembersMovesJSON is tableMembersJSON with the moves.
func tableMembersMovesJSON(t *testing.T, c *testcluster.Cluster, args ...string) []groupsum.Group {
	t.Helper()
	r := runOn(t, c, append([]string{"table", "--members", "-o", "json"}, args...)...)
	requireOK(t, r)
	assert.Equal(t, 1, bytes.Count([]byte(r.Stdout), []byte("\n")), "one JSON document: %s", r.Stdout)
	var raw []map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.Stdout), &raw), r.Stdout)
	for _, g := range raw {
		assert.ElementsMatch(t, []string{"group", "members", "roles", "max", "mean", "max_mean", "moves"}, keys(g))
		for _, m := range g["members"].([]any) {
			assert.ElementsMatch(t, []string{"member", "weight", "draining", "roles"}, keys(m.(map[string]any)))
		}
		for _, m := range g["moves"].([]any) {
			assert.ElementsMatch(t, []string{"role", "from", "to", "cause", "at", "offset", "unheld_ms"}, keys(m.(map[string]any)))
		}
	}
	var out []groupsum.Group
	require.NoError(t, json.Unmarshal([]byte(r.Stdout), &out))
	return out
}

func ptr(f float64) *float64 { return &f }

// Three members of the group shards over 12 roles: the table shows each
// live member with 4 roles and a max/mean of 1.00; a role held outside
// the group counts for nobody. Once one member has drained, it shows
// draining with weight 0 and no role, and the others 6 each.
func TestTableMembersShowsAGroupsBalance(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{})
	c.Members(t).Lease("cron", "x1", time.Hour) // a holder in no group
	shards := grouptest.StartShards(t, c)

	r := runOn(t, c, "table", "--members", "--moves", "0")
	requireOK(t, r)
	assert.Equal(t, ""+
		"GROUP   MEMBER  WEIGHT  DRAINING  ROLES\n"+
		"shards  node-a  1       no        4\n"+
		"shards  node-b  1       no        4\n"+
		"shards  node-c  1       no        4\n"+
		"\n"+
		"GROUP   MEMBERS  ROLES  MAX  MEAN  MAX/MEAN\n"+
		"shards  3        12     4    4.00  1.00\n", r.Stdout)
	want := []groupsum.Group{{Group: "shards", Members: []groupsum.Member{
		{Member: "node-a", Weight: 1, Roles: 4},
		{Member: "node-b", Weight: 1, Roles: 4},
		{Member: "node-c", Weight: 1, Roles: 4},
	}, Roles: 12, Max: 4, Mean: ptr(4), MaxMean: ptr(1)}}
	assert.Equal(t, want, tableMembersJSON(t, c))
	assert.Equal(t, want, tableMembersJSON(t, c, "--group", "shards"))

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, shards.Sessions["node-b"].Drain(ctx))
	shards.Await(t, map[codec.MemberID]int{"node-a": 6, "node-c": 6})

	r = runOn(t, c, "table", "--members", "--group", "shards")
	requireOK(t, r)
	tables, moves, ok := strings.Cut(r.Stdout, "\n\nGROUP   ROLE")
	require.True(t, ok, "a third table, of the moves: %s", r.Stdout)
	assert.Equal(t, ""+
		"GROUP   MEMBER  WEIGHT  DRAINING  ROLES\n"+
		"shards  node-a  1       no        6\n"+
		"shards  node-b  0       yes       0\n"+
		"shards  node-c  1       no        6\n"+
		"\n"+
		"GROUP   MEMBERS  ROLES  MAX  MEAN  MAX/MEAN\n"+
		"shards  3        12     6    6.00  1.00", tables)
	// node-b's four roles were its last moves, each released to drain.
	lines := strings.Split(strings.TrimSuffix(moves, "\n"), "\n")
	require.Greater(t, len(lines), 4, moves)
	assert.Equal(t, []string{"FROM", "TO", "CAUSE", "AT", "UNHELD"}, strings.Fields(lines[0]), "the moves' header")
	for _, l := range lines[len(lines)-4:] {
		f := strings.Fields(l)
		require.GreaterOrEqual(t, len(f), 6, l)
		assert.Equal(t, []string{"shards", "node-b", "drain"}, []string{f[0], f[2], f[4]}, l)
		assert.Contains(t, []string{"node-a", "node-c"}, f[3], l)
	}
	drained := 0
	for _, g := range tableMembersMovesJSON(t, c, "--moves", "1000") {
		for _, m := range g.Moves {
			if m.From == "node-b" && m.Cause == "drain" {
				drained++
			}
		}
	}
	assert.Equal(t, 4, drained, "each of node-b's roles moved once to drain")
	assert.Equal(t, []groupsum.Group{{Group: "shards", Members: []groupsum.Member{
		{Member: "node-a", Weight: 1, Roles: 6},
		{Member: "node-b", Weight: 0, Draining: true, Roles: 0},
		{Member: "node-c", Weight: 1, Roles: 6},
	}, Roles: 12, Max: 6, Mean: ptr(6), MaxMean: ptr(1)}}, tableMembersJSON(t, c))

	// A group with no live member: named, it shows empty.
	r = runOn(t, c, "table", "--members", "--group", "other")
	requireOK(t, r)
	assert.Equal(t, "group other has no live members\n", r.Stdout)
	assert.Equal(t, []groupsum.Group{{Group: "other", Members: []groupsum.Member{}}}, tableMembersJSON(t, c, "--group", "other"))
	r = runOn(t, c, "table", "--members", "--group", "other", "-o", "json")
	requireOK(t, r)
	assert.Equal(t, `[{"group":"other","members":[],"roles":0,"max":0,"mean":null,"max_mean":null,"moves":[]}]`+"\n", r.Stdout)
}

// With no group on the topic: a line saying so, and [] in JSON.
func TestTableMembersWithoutGroups(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{})
	fixtureRoles(t, c)
	r := runOn(t, c, "table", "--members")
	requireOK(t, r)
	assert.Equal(t, "no group has live members\n", r.Stdout)
	r = runOn(t, c, "table", "--members", "-o", "json")
	requireOK(t, r)
	assert.Equal(t, "[]\n", r.Stdout)
}

// Bad command lines exit 2 with one line before any connection; an
// unreachable cluster exits 1 with one line.
func TestTableMembersErrors(t *testing.T) {
	t.Parallel()
	nowhere := []string{"--brokers", "127.0.0.1:1"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"table", "--group", "shards"}, "krole: --group needs --members"},
		{[]string{"table", "--moves", "3"}, "krole: --moves needs --members"},
		{[]string{"table", "--members", "--moves", "-1"}, "krole: --moves -1: it is 0 (none) or more"},
		{[]string{"table", "--members", "db"}, "krole: --members takes no ROLE"},
		{[]string{"table", "--members", "--watch"}, "krole: --members does not --watch"},
		{[]string{"table", "--members", "--changes"}, "krole: --changes needs --watch"},
		{[]string{"table", "--members", "--group", "bad/name"}, `krole: invalid group "bad/name"`},
		{[]string{"table", "--members", "--group", ""}, `krole: invalid group ""`},
		{[]string{"table", "--members", "--timeout", "-1s"}, "krole: --timeout -1s: must not be negative"},
	} {
		r := run(t, append(tc.args, nowhere...)...)
		assertOneLineError(t, r, ExitUsage)
		assert.Contains(t, r.Stderr, tc.want, "%v", tc.args)
	}
	r := run(t, append([]string{"table", "--members"}, nowhere...)...)
	assertOneLineError(t, r, ExitFailure)
	assert.Contains(t, r.Stderr, "krole: no broker answered at 127.0.0.1:1")
}
