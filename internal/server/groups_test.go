package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/group"
	"github.com/krabka/krole/internal/groupsum"
	"github.com/krabka/krole/internal/grouptest"
	"github.com/krabka/krole/internal/testcluster"
	"github.com/krabka/krole/view"
)

// awaitBody polls GET path until it answers 200 with want, and fails with
// the last answer when it does not within a minute: the server's view
// reads the members' records a moment after the members see their events.
func awaitBody(t *testing.T, h http.Handler, path, want string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		rec := get(t, h, path)
		if rec.Code == http.StatusOK && rec.Body.String() == want {
			assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
			return
		}
		if !time.Now().Before(deadline) {
			require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
			require.Equal(t, want, rec.Body.String(), "GET %s", path)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Three members of the group shards over 12 roles, on an embedded
// cluster: GET /v1/groups shows each with 4 roles and a max/mean of 1,
// a role held outside the group counting for nobody; once one member has
// drained, it shows with weight 0, draining, and no role, the others 6
// each. Before any member runs, the answer is []; the route is counted.
func TestGroupsOverARealView(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{})
	c.Members(t).Lease("cron", "x1", time.Hour) // a holder in no group
	v := runView(t, c)
	caughtUp(t, v)
	h := newHandler(t, WithSessions(v), Options{})
	awaitBody(t, h, "/v1/groups", "[]\n")

	shards := grouptest.StartShards(t, c)
	awaitBody(t, h, "/v1/groups?moves=0", `[{"group":"shards","members":[`+
		`{"member":"node-a","weight":1,"draining":false,"roles":4},`+
		`{"member":"node-b","weight":1,"draining":false,"roles":4},`+
		`{"member":"node-c","weight":1,"draining":false,"roles":4}],`+
		`"roles":12,"max":4,"mean":4,"max_mean":1,"moves":[]}]`+"\n")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, shards.Sessions["node-b"].Drain(ctx))
	shards.Await(t, map[codec.MemberID]int{"node-a": 6, "node-c": 6})
	awaitBody(t, h, "/v1/groups?moves=0", `[{"group":"shards","members":[`+
		`{"member":"node-a","weight":1,"draining":false,"roles":6},`+
		`{"member":"node-b","weight":0,"draining":true,"roles":0},`+
		`{"member":"node-c","weight":1,"draining":false,"roles":6}],`+
		`"roles":12,"max":6,"mean":6,"max_mean":1,"moves":[]}]`+"\n")

	// node-b's roles moved to drain, each once, the last moves; the view
	// saw them happen, so it knows how long each role was unheld.
	rec := get(t, h, "/v1/groups")
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	var gs []groupsum.Group
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &gs))
	require.Len(t, gs, 1)
	moves := gs[0].Moves
	require.GreaterOrEqual(t, len(moves), 4)
	require.LessOrEqual(t, len(moves), DefaultMoves)
	for _, m := range moves[len(moves)-4:] {
		assert.Equal(t, codec.MemberID("node-b"), m.From, "%+v", m)
		assert.Equal(t, group.MoveDrain, m.Cause, "%+v", m)
		assert.Contains(t, []codec.MemberID{"node-a", "node-c"}, m.To, "%+v", m)
		if assert.NotNil(t, m.UnheldMS, "%+v", m) {
			assert.GreaterOrEqual(t, *m.UnheldMS, 0.0)
		}
	}

	m := scrape(t, h)
	assert.NotEqual(t, "0", m[`krole_lookups_total{endpoint="/v1/groups"}`], "GET /v1/groups is counted")
}

// groupTable is a fakeTable that reads groups: members, or err.
type groupTable struct {
	*fakeTable
	members map[string][]group.Member
	err     error
	asked   []time.Time // the now of each Groups call
}

func (g *groupTable) Groups(_ context.Context, now time.Time) (map[string][]group.Member, error) {
	g.asked = append(g.asked, now)
	return g.members, g.err
}

// GET /v1/groups from a table's rows and groups at the server's clock: a
// member holds the roles whose lease is live and names it (db's, not
// cron's, run out); MEAN counts the members of positive weight; a group
// whose members all drain has no mean.
func TestGroupsBalance(t *testing.T) {
	tb := &groupTable{fakeTable: fixture(), members: map[string][]group.Member{
		"web":  {{ID: "a", Weight: 1}, {ID: "b", Weight: 2}, {ID: "x", Weight: 1}},
		"idle": {{ID: "q", Weight: 0}},
	}}
	h := newHandler(t, tb, Options{Clock: at(1500)})
	rec := get(t, h, "/v1/groups")
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	assert.Equal(t, `[{"group":"idle","members":[{"member":"q","weight":0,"draining":true,"roles":0}],"roles":0,"max":0,"mean":null,"max_mean":null,"moves":[]},`+
		`{"group":"web","members":[{"member":"a","weight":1,"draining":false,"roles":1},{"member":"b","weight":2,"draining":false,"roles":0},`+
		`{"member":"x","weight":1,"draining":false,"roles":0}],"roles":1,"max":1,"mean":0.3333333333333333,"max_mean":3,"moves":[]}]`+"\n", rec.Body.String())
	assert.Equal(t, []time.Time{time.UnixMilli(1500)}, tb.asked, "the groups read at the server's clock")
}

// moveTable is a groupTable that reads moves.
type moveTable struct {
	*groupTable
	moves map[string][]group.Move
}

func (m *moveTable) GroupMoves(_ context.Context, name string) ([]group.Move, error) {
	return m.moves[name], nil
}

// GET /v1/groups shows each group's last moves, oldest first: 20 unless
// ?moves=N says otherwise, 0 for none; a bad N is refused. A table
// wrapped by WithSessions shows them as it does.
func TestGroupsMoves(t *testing.T) {
	var ms []group.Move
	for i := range 25 {
		ms = append(ms, group.Move{Role: codec.Role(fmt.Sprintf("r%d", i)), From: "a", To: "b", Offset: int64(i), At: 1000, Cause: group.MoveRebalance, Unheld: -1})
	}
	ms[24].Unheld, ms[24].Cause = 1500*time.Microsecond, group.MoveDrain
	tb := &moveTable{groupTable: &groupTable{fakeTable: fixture(), members: map[string][]group.Member{"web": {{ID: "a", Weight: 1}}}},
		moves: map[string][]group.Move{"web": ms}}
	got, err := sessionGroupTable{gr: tb}.GroupMoves(context.Background(), "web")
	require.NoError(t, err)
	assert.Equal(t, ms, got, "WithSessions passes the moves on")
	got, err = sessionGroupTable{gr: tb.groupTable}.GroupMoves(context.Background(), "web")
	require.NoError(t, err)
	assert.Empty(t, got, "from a table that reads none")
	for _, h := range []http.Handler{newHandler(t, tb, Options{Clock: at(1500)})} {
		var gs []groupsum.Group
		rec := get(t, h, "/v1/groups")
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &gs))
		require.Len(t, gs[0].Moves, DefaultMoves)
		assert.Equal(t, codec.Role("r5"), gs[0].Moves[0].Role)
		assert.Nil(t, gs[0].Moves[0].UnheldMS)

		rec = get(t, h, "/v1/groups?moves=1")
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		assert.Contains(t, rec.Body.String(), `"moves":[{"role":"r24","from":"a","to":"b","cause":"drain","at":1000,"offset":24,"unheld_ms":1.5}]`)
		rec = get(t, h, "/v1/groups?moves=0")
		assert.Contains(t, rec.Body.String(), `"moves":[]`)
		for _, bad := range []string{"x", "-1"} {
			rec = get(t, h, "/v1/groups?moves="+bad)
			assert.Equal(t, http.StatusBadRequest, rec.Code, bad)
		}
	}
}

// GET /v1/groups answers 404 from a table that reads no groups, 503 with
// Retry-After before the view has caught up, the error of a failed read
// as the other lookups do, and counts every request.
func TestGroupsErrors(t *testing.T) {
	h := newHandler(t, fixture(), Options{})
	rec := get(t, h, "/v1/groups")
	assert.Equal(t, http.StatusNotFound, rec.Code)
	assert.JSONEq(t, `{"error":"this server reads no groups"}`, rec.Body.String())

	h = newHandler(t, &groupTable{fakeTable: &fakeTable{err: view.ErrNotCaughtUp}}, Options{Wait: 10 * time.Millisecond})
	rec = get(t, h, "/v1/groups")
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code, rec.Body.String())
	assert.Equal(t, "1", rec.Header().Get("Retry-After"))
	assert.JSONEq(t, `{"error":"`+view.ErrNotCaughtUp.Error()+`"}`, rec.Body.String())

	h = newHandler(t, &groupTable{fakeTable: fixture(), err: view.ErrStopped}, Options{})
	rec = get(t, h, "/v1/groups")
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code, rec.Body.String())
	assert.JSONEq(t, `{"error":"`+view.ErrStopped.Error()+`"}`, rec.Body.String())
	get(t, h, "/v1/groups")
	assert.Equal(t, "2", scrape(t, h)[`krole_lookups_total{endpoint="/v1/groups"}`])
}

// WithSessions keeps a table's groups: serve wraps its view in it.
func TestWithSessionsKeepsGroups(t *testing.T) {
	_, ok := WithSessions(fixture()).(GroupReader)
	assert.False(t, ok, "a table without groups")
	v, err := view.New(view.Options{Config: fencing.Config{Brokers: []string{"127.0.0.1:1"}, Topic: "t"}})
	require.NoError(t, err)
	_, ok = WithSessions(v).(GroupReader)
	assert.True(t, ok, "a view's groups")
}
