package server

import (
	"context"
	"encoding/json"
	"github.com/krabka/krole/rolestate"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/testcluster"
	"github.com/krabka/krole/view"
)

// TestMain fails the run when a goroutine of the server, the view or sarama
// outlives the tests (sarama's process-wide metrics ticker is allowed).
func TestMain(m *testing.M) {
	testcluster.VerifyNoLeaks(m)
}

// runView starts a view of c's role topic, stopped (and Run's result
// checked) when the test ends.
func runView(t *testing.T, c *testcluster.Cluster) *view.View {
	t.Helper()
	return runViewWith(t, view.Options{Config: c.Config})
}

func runViewWith(t *testing.T, opts view.Options) *view.View {
	t.Helper()
	v, err := view.New(opts)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- v.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-errc:
			assert.NoError(t, err, "view Run")
		case <-time.After(20 * time.Second):
			t.Error("the view's Run did not return")
		}
	})
	return v
}

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func caughtUp(t *testing.T, v *view.View) {
	t.Helper()
	require.NoError(t, v.WaitCaughtUp(testCtx(t)))
}

// TestOverARealView serves a view of an embedded cluster: the rows follow
// what members write, the stream shows a new holder live and the expiry
// of its lease.
func TestOverARealView(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 2})
	idle, err := view.New(view.Options{Config: c.Config})
	require.NoError(t, err)
	h := newHandler(t, idle, Options{Wait: 50 * time.Millisecond, Heartbeat: time.Second})
	assert.Equal(t, http.StatusServiceUnavailable, get(t, h, "/v1/roles").Code, "not running: not caught up")
	assert.Equal(t, http.StatusServiceUnavailable, get(t, h, "/healthz").Code)

	m := c.Members(t)
	off1 := m.Register("svc", "m1")
	off2 := m.Register("svc", "m2")
	m.Register("solo", "s1")
	l := m.Lease("svc", "m1", time.Hour)
	f1 := m.LastLease
	m.Lease("leaseonly", "x", time.Hour)

	rv := runView(t, c)
	h = newHandler(t, rv, Options{Heartbeat: time.Second})
	caughtUp(t, rv)
	require.Equal(t, http.StatusOK, get(t, h, "/healthz").Code)

	rec := get(t, h, "/v1/roles")
	require.Equal(t, http.StatusOK, rec.Code)
	var rows []Row
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &rows))
	require.Len(t, rows, 3)
	assert.Equal(t, []codec.Role{"leaseonly", "solo", "svc"}, []codec.Role{rows[0].Role, rows[1].Role, rows[2].Role})
	assert.Empty(t, rows[0].Candidates)
	assert.Nil(t, rows[1].Holder)
	svc := rows[2]
	require.NotNil(t, svc.Holder)
	assert.Equal(t, &Holder{Member: "m1", Token: l.Token, Fence: f1, GrantedAt: l.GrantedAt, Deadline: l.Deadline, VouchedAt: l.GrantedAt, LeftMS: svc.Holder.LeftMS}, svc.Holder)
	assert.LessOrEqual(t, svc.Holder.LeftMS, time.Hour.Milliseconds())
	require.Len(t, svc.Candidates, 2)
	assert.Equal(t, rolestate.Candidate{Member: "m1", Offset: off1, RegisteredAt: svc.Candidates[0].RegisteredAt, Rank: 0}, svc.Candidates[0])
	assert.Equal(t, rolestate.Candidate{Member: "m2", Offset: off2, RegisteredAt: svc.Candidates[1].RegisteredAt, Rank: 1}, svc.Candidates[1])

	assert.Equal(t, http.StatusNotFound, get(t, h, "/v1/roles/nobody").Code)

	// Live: a new holder with a short lease, then its expiry.
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	s, _ := openSSE(t, testCtx(t), srv.URL+"/v1/roles/svc/watch")
	assert.Equal(t, "m1", string(s.row().Holder.Member))
	l2 := m.Lease("svc", "m2", 1500*time.Millisecond)
	f2 := m.LastLease
	r := s.row()
	require.NotNil(t, r.Holder)
	assert.Equal(t, &Holder{Member: "m2", Token: l2.Token, Fence: f2, GrantedAt: l2.GrantedAt, Deadline: l2.Deadline, VouchedAt: l2.GrantedAt, LeftMS: r.Holder.LeftMS}, r.Holder, "not expired yet")
	assert.LessOrEqual(t, r.Holder.LeftMS, int64(1500))
	r = s.row()
	require.NotNil(t, r.Holder)
	assert.Equal(t, codec.MemberID("m2"), r.Holder.Member)
	assert.True(t, r.Holder.Expired, "a row when the lease runs out")
	assert.GreaterOrEqual(t, time.Now().UnixMilli(), l2.Deadline)
}

// TestHealthzOverARealView: /healthz is 200 while the view reaches its
// cluster, and 503 with the reason once the cluster is gone; a holder
// whose clock runs 30 s ahead shows at most its span left.
func TestHealthzOverARealView(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	c.RequireFake(t)
	m := c.Members(t)
	v := runViewWith(t, view.Options{Config: c.Config, HealthInterval: 50 * time.Millisecond, StaleAfter: time.Second})
	h := newHandler(t, v, Options{})
	caughtUp(t, v)
	require.Eventually(t, func() bool { return get(t, h, "/healthz").Code == http.StatusOK }, 20*time.Second, 10*time.Millisecond)

	// A 20 s lease written by a holder whose clock runs 30 s ahead.
	now := time.Now()
	l := m.LeaseAt("skewed", "s1", now.Add(30*time.Second), now.Add(50*time.Second))
	caughtUp(t, v)
	rec := get(t, h, "/v1/roles/skewed")
	require.Equal(t, http.StatusOK, rec.Code)
	var row Row
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &row))
	require.NotNil(t, row.Holder)
	assert.Equal(t, l.Deadline, row.Holder.Deadline)
	assert.False(t, row.Holder.Expired)
	assert.LessOrEqual(t, row.Holder.LeftMS, int64(20_000), "at most its span, not the 50 s to its deadline")

	c.Fake.Close()
	var body map[string]any
	require.Eventually(t, func() bool {
		rec = get(t, h, "/healthz")
		return rec.Code == http.StatusServiceUnavailable
	}, 30*time.Second, 20*time.Millisecond, "/healthz never turned 503 with the cluster gone")
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
	assert.Equal(t, false, body["healthy"])
	assert.Equal(t, true, body["unreachable"])
	assert.Equal(t, true, body["caught_up"], "the table is there; it is not current")
	assert.Contains(t, body["reason"], "no broker has answered")
	assert.NotEmpty(t, body["last_contact"])
	assert.NotEmpty(t, body["caught_up_at"])
	assert.Equal(t, http.StatusOK, get(t, h, "/v1/roles").Code, "lookups still answer from the table")
}
