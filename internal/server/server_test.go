package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"github.com/krabka/krole/rolestate"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/view"
)

// fakeTable answers from a set of roles, or with err. Changes sent on
// changes are applied to the roles and handed to every watcher.
type fakeTable struct {
	mu       sync.Mutex
	roles    map[codec.Role]rolestate.State
	err      error
	caughtUp bool
	health   *view.Health // nil: healthy when caught up
	watchers []*fakeWatcher
	watched  chan []codec.Role // each Watch call's roles, when set
}

type fakeWatcher struct {
	roles map[codec.Role]bool
	ch    chan view.Change
	ctx   context.Context
}

func (f *fakeTable) Lookup(_ context.Context, role codec.Role) (rolestate.State, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return rolestate.State{Role: role, LeaseOffset: -1}, false, f.err
	}
	st, ok := f.roles[role]
	if !ok {
		return rolestate.State{Role: role, LeaseOffset: -1}, false, nil
	}
	return st.Clone(), true, nil
}

func (f *fakeTable) Snapshot(context.Context) ([]rolestate.State, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	out := []rolestate.State{}
	for _, st := range f.roles {
		out = append(out, st.Clone())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Role < out[j].Role })
	return out, nil
}

func (f *fakeTable) Watch(ctx context.Context, roles ...codec.Role) <-chan view.Change {
	w := &fakeWatcher{ch: make(chan view.Change, 16), ctx: ctx}
	if len(roles) > 0 {
		w.roles = map[codec.Role]bool{}
		for _, r := range roles {
			w.roles[r] = true
		}
	}
	f.mu.Lock()
	f.watchers = append(f.watchers, w)
	watched := f.watched
	f.mu.Unlock()
	if watched != nil {
		watched <- roles
	}
	out := make(chan view.Change)
	go func() {
		defer close(out)
		for {
			select {
			case c := <-w.ch:
				select {
				case out <- c:
				case <-ctx.Done():
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// set makes st the role's state and hands the change to the watchers.
func (f *fakeTable) set(st rolestate.State) {
	f.mu.Lock()
	defer f.mu.Unlock()
	before := f.roles[st.Role]
	if st.Lease == nil && len(st.Candidates) == 0 {
		delete(f.roles, st.Role)
	} else {
		f.roles[st.Role] = st
	}
	for _, w := range f.watchers {
		if w.ctx.Err() == nil && (w.roles == nil || w.roles[st.Role]) {
			w.ch <- view.Change{Role: st.Role, Before: before, After: st.Clone()}
		}
	}
}

func (f *fakeTable) CaughtUp() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.caughtUp
}

func (f *fakeTable) Health() view.Health {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.health != nil {
		return *f.health
	}
	if !f.caughtUp {
		return view.Health{Reason: "the view has not caught up with the role topic yet"}
	}
	return view.Health{Healthy: true}
}

func (f *fakeTable) Stats() view.Stats {
	return view.Stats{Applied: 3, Skipped: map[view.SkipReason]int64{view.SkipKey: 1, view.SkipVersion: 2}, Roles: 2, CaughtUp: true,
		Partitions: []view.PartitionStats{{Partition: 0, Next: 4, HighWatermark: 5, Lag: 1, CaughtUpTo: 5}, {Partition: 1, Next: 0, HighWatermark: 0}}}
}

var dbLease = codec.Lease{Member: "a", Token: codec.Token{ProducerID: 9, Epoch: 2}, GrantedAt: 1000, Deadline: 2000}

// fixture has a role with a lease and two candidates, one with a lease and
// no candidate, and one with a candidate and no lease.
func fixture() *fakeTable {
	l, l2 := dbLease, codec.Lease{Member: "x", Token: codec.Token{ProducerID: 4, Epoch: 0}, GrantedAt: 1000, Deadline: 1100}
	return &fakeTable{
		caughtUp: true,
		roles: map[codec.Role]rolestate.State{
			"db": {Role: "db", Lease: &l, LeaseOffset: 4, Candidates: []rolestate.Candidate{
				{Member: "a", Offset: 1, RegisteredAt: 900, Rank: 0}, {Member: "b", Offset: 3, RegisteredAt: 950, Rank: 1}}},
			"cron":  {Role: "cron", Lease: &l2, LeaseOffset: 7},
			"queue": {Role: "queue", LeaseOffset: -1, Candidates: []rolestate.Candidate{{Member: "q", Offset: 2, RegisteredAt: 990}}},
		},
	}
}

func newHandler(t *testing.T, tb Table, opts Options) http.Handler {
	t.Helper()
	h, err := New(tb, opts)
	require.NoError(t, err)
	return h
}

func at(ms int64) func() time.Time { return func() time.Time { return time.UnixMilli(ms) } }

func get(t *testing.T, h http.Handler, path string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec
}

func TestRolesIsTheTableJSON(t *testing.T) {
	h := newHandler(t, fixture(), Options{Clock: at(1500)})

	rec := get(t, h, "/v1/roles")
	require.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	assert.Equal(t, "1500", rec.Header().Get(nowHeader))
	// The exact shape: roles sorted, a lease without candidates and
	// candidates without a lease both present, candidates in rank order.
	assert.JSONEq(t, `[
	  {"role":"cron","holder":{"member":"x","token":{"producer_id":4,"epoch":0},"fence":7,"granted_at":1000,"deadline":1100,"vouched_at":1000,"expired":true,"left_ms":0},"candidates":[]},
	  {"role":"db","holder":{"member":"a","token":{"producer_id":9,"epoch":2},"fence":4,"granted_at":1000,"deadline":2000,"vouched_at":1000,"expired":false,"left_ms":500},
	   "candidates":[{"member":"a","offset":1,"registered_at":900,"rank":0},{"member":"b","offset":3,"registered_at":950,"rank":1}]},
	  {"role":"queue","holder":null,"candidates":[{"member":"q","offset":2,"registered_at":990,"rank":0}]}
	]`, rec.Body.String())

	rec = get(t, h, "/v1/roles/db")
	require.Equal(t, http.StatusOK, rec.Code)
	var one Row
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &one))
	rows, err := Rows(context.Background(), fixture(), at(1500), "db")
	require.NoError(t, err)
	rows[0].Holder.Ends = time.Time{} // not in the JSON
	assert.Equal(t, rows, []Row{one}, "one element of the array")
}

func TestExpiredIsJudgedAtRequestTime(t *testing.T) {
	clock := int64(1999)
	h := newHandler(t, fixture(), Options{Clock: func() time.Time { return time.UnixMilli(clock) }})
	expired := func() bool {
		var r Row
		require.NoError(t, json.Unmarshal(get(t, h, "/v1/roles/db").Body.Bytes(), &r))
		require.NotNil(t, r.Holder)
		return r.Holder.Expired
	}
	assert.False(t, expired())
	clock = 2000
	assert.True(t, expired(), "expired at its deadline")
}

func TestReleasedLeaseIsExpired(t *testing.T) {
	r := NewRow(rolestate.State{Role: "db", Lease: new(codec.ReleaseLease("a", codec.Token{ProducerID: 1}))}, time.UnixMilli(0))
	require.NotNil(t, r.Holder)
	assert.True(t, r.Holder.Expired, "a release is expired under every clock")
	assert.True(t, r.Holder.Released())
	assert.Equal(t, []rolestate.Candidate{}, r.Candidates, "never null")
}

func TestRoleErrors(t *testing.T) {
	h := newHandler(t, fixture(), Options{})
	rec := get(t, h, "/v1/roles/nobody")
	assert.Equal(t, http.StatusNotFound, rec.Code)
	assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	assert.JSONEq(t, `{"error":"role nobody is not in the table: it has no lease and no candidate"}`, rec.Body.String())

	rec = get(t, h, "/v1/roles/bad%20name")
	assert.Equal(t, http.StatusBadRequest, rec.Code)
	assert.Contains(t, rec.Body.String(), `"error":"invalid role`)

	rec = get(t, h, "/v2/nothing")
	assert.Equal(t, http.StatusNotFound, rec.Code)
	assert.JSONEq(t, `{"error":"no such endpoint /v2/nothing"}`, rec.Body.String())

	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/roles", nil))
	assert.Equal(t, http.StatusMethodNotAllowed, rec.Code)
}

func TestNotCaughtUpIs503(t *testing.T) {
	f := fixture()
	f.err = fmt.Errorf("%w: %w", view.ErrNotCaughtUp, context.DeadlineExceeded)
	f.caughtUp = false
	h := newHandler(t, f, Options{Wait: time.Millisecond})
	for _, path := range []string{"/v1/roles", "/v1/roles/db", "/healthz"} {
		rec := get(t, h, path)
		assert.Equal(t, http.StatusServiceUnavailable, rec.Code, path)
	}
	rec := get(t, h, "/v1/roles")
	assert.Equal(t, "1", rec.Header().Get("Retry-After"))
	assert.Contains(t, rec.Body.String(), "not caught up")
	assert.JSONEq(t, `{"healthy":false,"caught_up":false,"unreachable":false,"reason":"the view has not caught up with the role topic yet"}`,
		get(t, h, "/healthz").Body.String())

	f.err, f.caughtUp = nil, true
	rec = get(t, h, "/healthz")
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.JSONEq(t, `{"healthy":true,"caught_up":true,"unreachable":false}`, rec.Body.String())

	f.err = view.ErrStopped
	assert.Equal(t, http.StatusServiceUnavailable, get(t, h, "/v1/roles/db").Code)
}

func TestStats(t *testing.T) {
	rec := get(t, newHandler(t, fixture(), Options{}), "/v1/stats")
	require.Equal(t, http.StatusOK, rec.Code)
	var body map[string]any
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
	assert.Equal(t, float64(3), body["applied"])
	assert.Equal(t, float64(1), body["skipped"].(map[string]any)["bad_key"])
	assert.Equal(t, float64(1), body["partitions"].([]any)[0].(map[string]any)["lag"])
}

// metricLine matches one sample of the text format: name, labels, value.
var metricLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)$`)

func scrape(t *testing.T, h http.Handler) map[string]string {
	t.Helper()
	rec := get(t, h, "/metrics")
	require.Equal(t, http.StatusOK, rec.Code)
	assert.Contains(t, rec.Header().Get("Content-Type"), "text/plain")
	out := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(rec.Body.String()), "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		m := metricLine.FindStringSubmatch(line)
		require.NotNil(t, m, "not a sample: %q", line)
		assert.True(t, strings.HasPrefix(m[1], "krole_"), "metric %s is not prefixed krole_", m[1])
		out[m[1]+m[2]] = m[3]
	}
	return out
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := newHandler(t, fixture(), Options{Registry: reg})
	get(t, h, "/v1/roles")
	get(t, h, "/v1/roles")
	get(t, h, "/v1/roles/db")
	get(t, h, "/v1/roles/nobody")
	get(t, h, "/healthz") // not a lookup

	m := scrape(t, h)
	assert.Equal(t, "3", m["krole_view_records_applied_total"])
	assert.Equal(t, "1", m[`krole_view_records_skipped_total{reason="bad_key"}`])
	assert.Equal(t, "2", m[`krole_view_records_skipped_total{reason="unknown_version"}`])
	assert.Equal(t, "0", m[`krole_view_records_skipped_total{reason="wrong_partition"}`], "every reason shows")
	assert.Equal(t, "1", m[`krole_view_lag_records{partition="0"}`])
	assert.Equal(t, "0", m[`krole_view_lag_records{partition="1"}`])
	assert.Equal(t, "1", m["krole_view_caught_up"])
	assert.Equal(t, "1", m["krole_view_healthy"])
	assert.Equal(t, "2", m["krole_view_roles"])
	assert.Equal(t, "2", m[`krole_lookups_total{endpoint="/v1/roles"}`])
	assert.Equal(t, "2", m[`krole_lookups_total{endpoint="/v1/roles/{role}"}`])
	assert.Equal(t, "0", m[`krole_lookups_total{endpoint="/v1/watch"}`])
	assert.NotContains(t, m, `krole_lookups_total{endpoint="/healthz"}`)

	// The registry is the caller's: a second server on it is refused.
	_, err := New(fixture(), Options{Registry: reg})
	assert.ErrorContains(t, err, "registering metrics")
}

func TestPage(t *testing.T) {
	rec := get(t, newHandler(t, fixture(), Options{}), "/")
	require.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, "text/html; charset=utf-8", rec.Header().Get("Content-Type"))
	body := rec.Body.String()
	assert.Contains(t, body, `new EventSource("v1/watch?snapshot=1")`)
	assert.Contains(t, body, `<tbody id="roles">`)
	assert.NotRegexp(t, `(?i)(src|href)\s*=\s*["']?(https?:)?//`, body, "no external assets")
}

// sse reads server-sent events from a stream.
type sse struct {
	t  *testing.T
	sc *bufio.Scanner
}

func openSSE(t *testing.T, ctx context.Context, url string) (*sse, *http.Response) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	return &sse{t: t, sc: bufio.NewScanner(resp.Body)}, resp
}

// next returns the next event's data, or "" and the comment of the next
// comment-only block.
func (s *sse) next() (data, comment string) {
	s.t.Helper()
	for s.sc.Scan() {
		line := s.sc.Text()
		switch {
		case line == "":
			if data != "" || comment != "" {
				return data, comment
			}
		case strings.HasPrefix(line, "data: "):
			data += strings.TrimPrefix(line, "data: ")
		case strings.HasPrefix(line, ":"):
			comment = strings.TrimSpace(strings.TrimPrefix(line, ":"))
		}
	}
	require.NoError(s.t, s.sc.Err())
	require.Fail(s.t, "the stream ended")
	return "", ""
}

// row returns the next event's row, skipping comments.
func (s *sse) row() Row {
	s.t.Helper()
	for {
		data, _ := s.next()
		if data == "" {
			continue
		}
		var r Row
		require.NoError(s.t, json.Unmarshal([]byte(data), &r), data)
		return r
	}
}

func TestWatchRole(t *testing.T) {
	f := fixture()
	f.watched = make(chan []codec.Role, 1)
	srv := httptest.NewServer(newHandler(t, f, Options{Clock: at(1500)}))
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	s, resp := openSSE(t, ctx, srv.URL+"/v1/roles/db/watch")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	assert.Equal(t, []codec.Role{"db"}, <-f.watched)

	first := s.row()
	assert.Equal(t, codec.Role("db"), first.Role)
	require.NotNil(t, first.Holder)
	assert.Equal(t, codec.MemberID("a"), first.Holder.Member)
	assert.Len(t, first.Candidates, 2)

	// A change of another role is not sent; one of db is.
	f.set(rolestate.State{Role: "queue", LeaseOffset: -1})
	l := codec.Lease{Member: "b", Token: codec.Token{ProducerID: 9, Epoch: 3}, GrantedAt: 1400, Deadline: 9000}
	f.set(rolestate.State{Role: "db", Lease: &l, LeaseOffset: 8, Candidates: []rolestate.Candidate{{Member: "b", Offset: 3, RegisteredAt: 950}}})
	next := s.row()
	assert.Equal(t, codec.Role("db"), next.Role)
	assert.Equal(t, &Holder{Member: "b", Token: l.Token, Fence: 8, GrantedAt: 1400, Deadline: 9000, VouchedAt: 1400, LeftMS: 7500}, next.Holder)
	assert.Equal(t, []rolestate.Candidate{{Member: "b", Offset: 3, RegisteredAt: 950}}, next.Candidates)

	// A role the table does not have: an empty row first, then its rows.
	s2, _ := openSSE(t, ctx, srv.URL+"/v1/roles/newrole/watch")
	<-f.watched
	assert.Equal(t, Row{Role: "newrole", Candidates: []rolestate.Candidate{}}, s2.row())
	f.set(rolestate.State{Role: "newrole", LeaseOffset: -1, Candidates: []rolestate.Candidate{{Member: "n", Offset: 1}}})
	assert.Equal(t, Row{Role: "newrole", Candidates: []rolestate.Candidate{{Member: "n", Offset: 1}}}, s2.row())

	resp2 := get(t, newHandler(t, f, Options{}), "/v1/roles/no%2Fsuch/watch")
	assert.Equal(t, http.StatusBadRequest, resp2.Code)
}

func TestWatchAllWithHeartbeats(t *testing.T) {
	f := fixture()
	f.watched = make(chan []codec.Role, 1)
	srv := httptest.NewServer(newHandler(t, f, Options{Clock: at(1500), Heartbeat: 20 * time.Millisecond}))
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	s, _ := openSSE(t, ctx, srv.URL+"/v1/watch")
	assert.Empty(t, <-f.watched, "every role")
	var got []codec.Role
	for range 3 {
		got = append(got, s.row().Role)
	}
	assert.Equal(t, []codec.Role{"cron", "db", "queue"}, got, "the current rows first, sorted")

	// Idle: heartbeats.
	for {
		data, comment := s.next()
		require.Empty(t, data)
		if comment == "ping" {
			break
		}
	}
	// A role that loses its last record shows as an empty row.
	f.set(rolestate.State{Role: "queue", LeaseOffset: -1})
	assert.Equal(t, Row{Role: "queue", Candidates: []rolestate.Candidate{}}, s.row())

	// ?role= filters, and accepts a comma-separated list.
	s2, _ := openSSE(t, ctx, srv.URL+"/v1/watch?role=db,cron")
	assert.ElementsMatch(t, []codec.Role{"db", "cron"}, <-f.watched)
	assert.Equal(t, codec.Role("cron"), s2.row().Role)
	assert.Equal(t, codec.Role("db"), s2.row().Role)
}

// TestWatchWaitsForCatchUp: before the view has caught up, a stream sends
// heartbeats and no rows; the rows follow once it has.
func TestWatchWaitsForCatchUp(t *testing.T) {
	f := fixture()
	f.caughtUp = false
	gate := &gatedTable{fakeTable: f, open: make(chan struct{})}
	srv := httptest.NewServer(newHandler(t, gate, Options{Clock: at(1500), Heartbeat: 10 * time.Millisecond}))
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	s, resp := openSSE(t, ctx, srv.URL+"/v1/roles/db/watch")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	_, comment := s.next()
	assert.Equal(t, "waiting for the view to catch up", comment)
	for range 2 {
		data, comment := s.next()
		assert.Empty(t, data)
		assert.Equal(t, "ping", comment)
	}
	close(gate.open)
	assert.Equal(t, codec.Role("db"), s.row().Role)
}

// gatedTable blocks lookups until open is closed, as a view that has not
// caught up does.
type gatedTable struct {
	*fakeTable
	open chan struct{}
}

func (g *gatedTable) Lookup(ctx context.Context, role codec.Role) (rolestate.State, bool, error) {
	select {
	case <-g.open:
	case <-ctx.Done():
		return rolestate.State{}, false, fmt.Errorf("%w: %w", view.ErrNotCaughtUp, ctx.Err())
	}
	return g.fakeTable.Lookup(ctx, role)
}

// TestStreamEndsWithItsContext: a server that shuts down cancels its
// requests' base context, and the streams end.
func TestStreamEndsWithItsContext(t *testing.T) {
	base, stop := context.WithCancel(context.Background())
	srv := httptest.NewUnstartedServer(newHandler(t, fixture(), Options{}))
	srv.Config.BaseContext = func(net.Listener) context.Context { return base }
	srv.Start()
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, _ := openSSE(t, ctx, srv.URL+"/v1/watch")
	for range 3 {
		s.row()
	}
	stop()
	for s.sc.Scan() {
		assert.NotContains(t, s.sc.Text(), "data:", "nothing after the end")
	}
	assert.NoError(t, s.sc.Err(), "the server ended the stream before the client gave up")
}

// TestHealthz: /healthz is the view's Health: 503 with its reason and
// times when unhealthy (caught up or not), 200 when healthy.
func TestHealthz(t *testing.T) {
	f := fixture()
	h := newHandler(t, f, Options{})
	contact := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	f.health = &view.Health{Unreachable: true, Reason: "no broker has answered the view for 6s", LastContact: contact, CaughtUpAt: contact.Add(-time.Second)}
	rec := get(t, h, "/healthz")
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code, "unhealthy although caught up")
	assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	assert.JSONEq(t, `{"healthy":false,"caught_up":true,"unreachable":true,"reason":"no broker has answered the view for 6s",
		"last_contact":"2030-01-02T03:04:05Z","caught_up_at":"2030-01-02T03:04:04Z"}`, rec.Body.String())
	assert.Equal(t, http.StatusOK, get(t, h, "/v1/roles").Code, "lookups answer from the table meanwhile")

	assert.Equal(t, "0", scrape(t, h)["krole_view_healthy"])

	f.health = &view.Health{Healthy: true, LastContact: contact, CaughtUpAt: contact}
	assert.Equal(t, "1", scrape(t, h)["krole_view_healthy"])
	rec = get(t, h, "/healthz")
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.JSONEq(t, `{"healthy":true,"caught_up":true,"unreachable":false,"last_contact":"2030-01-02T03:04:05Z","caught_up_at":"2030-01-02T03:04:05Z"}`, rec.Body.String())
}

// TestTimeLeftIsTheObservers: a lease's time left runs from when the view
// applied it plus its span, whatever deadline the holder's clock wrote.
func TestTimeLeftIsTheObservers(t *testing.T) {
	seen := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	// The holder's clock runs 30 s ahead: granted 30 s in the future, a
	// 2 s lease.
	l := codec.Lease{Member: "a", Token: codec.Token{ProducerID: 1}, GrantedAt: seen.Add(30 * time.Second).UnixMilli(), Deadline: seen.Add(32 * time.Second).UnixMilli()}
	st := rolestate.State{Role: "db", Lease: &l, LeaseSeenAt: seen}
	r := NewRow(st, seen.Add(500*time.Millisecond))
	require.NotNil(t, r.Holder)
	assert.False(t, r.Holder.Expired)
	assert.Equal(t, int64(1500), r.Holder.LeftMS, "the span from when it was seen, not 31.5 s")
	assert.Equal(t, seen.Add(2*time.Second), r.Holder.Ends)
	r = NewRow(st, seen.Add(2*time.Second))
	assert.True(t, r.Holder.Expired, "expired at the end of its span, 30 s before its deadline")
	assert.Equal(t, int64(0), r.Holder.LeftMS)

	// A holder 30 s behind: its clock says the lease ran out, so it lives
	// while a renewal is waited for, half its span from when it was seen
	// (package liveness), then is expired.
	l2 := codec.Lease{Member: "a", Token: codec.Token{ProducerID: 1}, GrantedAt: seen.Add(-30 * time.Second).UnixMilli(), Deadline: seen.Add(-28 * time.Second).UnixMilli()}
	r = NewRow(rolestate.State{Role: "db", Lease: &l2, LeaseSeenAt: seen}, seen.Add(500*time.Millisecond))
	assert.False(t, r.Holder.Expired)
	assert.Equal(t, int64(500), r.Holder.LeftMS)
	r = NewRow(rolestate.State{Role: "db", Lease: &l2, LeaseSeenAt: seen}, seen.Add(time.Second))
	assert.True(t, r.Holder.Expired)

	// A span longer than rolestate.MaxLeaseSpan counts as that.
	l3 := codec.Lease{Member: "a", Token: codec.Token{ProducerID: 1}, GrantedAt: 0, Deadline: seen.Add(1000 * time.Hour).UnixMilli()}
	r = NewRow(rolestate.State{Role: "db", Lease: &l3, LeaseSeenAt: seen}, seen)
	assert.Equal(t, rolestate.MaxLeaseSpan.Milliseconds(), r.Holder.LeftMS)
}

// TestRowJudgesByHeartbeats: a holder elected three spans ago, renewed by
// its member session's heartbeats alone, is live with the time left from
// its latest heartbeat and vouched_at that heartbeat's start; a candidate
// whose session ran out is gone, and a role whose candidates are all gone
// without a live holder is dead.
func TestRowJudgesByHeartbeats(t *testing.T) {
	const span = 2 * time.Second
	seen := time.UnixMilli(1_000_000)
	sess := codec.Session{ProducerID: 9, Epoch: 0, Nonce: "n1"}
	l := codec.Lease{Member: "a", Token: codec.Token{ProducerID: 1}, GrantedAt: seen.UnixMilli(), Deadline: seen.Add(span).UnixMilli(), Session: &sess}
	now := seen.Add(3 * span)
	hb := codec.Heartbeat{Member: "a", Session: sess, GrantedAt: now.Add(-300 * time.Millisecond).UnixMilli(), Deadline: now.Add(span - 300*time.Millisecond).UnixMilli()}
	other := codec.Session{ProducerID: 10, Epoch: 0, Nonce: "n2"}
	bGone := &rolestate.SessionSeen{Heartbeat: codec.Heartbeat{Member: "b", Session: other, GrantedAt: now.Add(-2 * span).UnixMilli(), Deadline: now.Add(-span).UnixMilli()}, SeenAt: now.Add(-2 * span)}
	st := rolestate.State{Role: "db", Lease: &l, LeaseSeenAt: seen,
		Session: &rolestate.SessionSeen{Heartbeat: hb, SeenAt: now.Add(-250 * time.Millisecond)},
		Candidates: []rolestate.Candidate{
			{Member: "a", Rank: 0, Session: &rolestate.SessionSeen{Heartbeat: hb, SeenAt: now.Add(-250 * time.Millisecond)}},
			{Member: "b", Rank: 1, Session: bGone},
			{Member: "c", Rank: 2}, // never read: not known to be gone
		}}
	r := NewRow(st, now)
	require.NotNil(t, r.Holder)
	assert.False(t, r.Holder.Expired, "three spans after its lease record")
	assert.Equal(t, (span - 250*time.Millisecond).Milliseconds(), r.Holder.LeftMS)
	assert.Equal(t, hb.GrantedAt, r.Holder.VouchedAt)
	assert.Equal(t, l.GrantedAt, r.Holder.GrantedAt, "granted_at stays the lease's")
	assert.Equal(t, []bool{false, true, false}, []bool{r.Candidates[0].Gone, r.Candidates[1].Gone, r.Candidates[2].Gone})
	assert.Nil(t, r.Candidates[0].Session, "the row shares nothing with the state")
	assert.False(t, r.Dead)
	body, err := json.Marshal(r)
	require.NoError(t, err)
	assert.Contains(t, string(body), fmt.Sprintf(`"vouched_at":%d`, hb.GrantedAt))
	assert.Contains(t, string(body), `{"member":"b","offset":0,"registered_at":0,"rank":1,"gone":true}`)

	// The holder's session ended, and so did every candidate's: dead.
	end := &rolestate.SessionSeen{Heartbeat: codec.Heartbeat{Member: "a", Session: sess, End: true}, SeenAt: now}
	st.Session = end
	st.Candidates = []rolestate.Candidate{{Member: "a", Session: end}, {Member: "b", Rank: 1, Session: bGone}}
	r = NewRow(st, now)
	assert.True(t, r.Holder.Expired)
	assert.True(t, r.Dead)
}

// TestMetricsRoleStates: krole_roles counts the roles as the rows judge
// them at the scrape: a holder renewed by heartbeats long after its lease
// record is held, a role whose candidates are all gone is dead.
func TestMetricsRoleStates(t *testing.T) {
	const span = 2 * time.Second
	now := time.Now()
	sess := codec.Session{ProducerID: 9, Epoch: 0, Nonce: "n1"}
	l := codec.Lease{Member: "a", Token: codec.Token{ProducerID: 1}, GrantedAt: now.Add(-time.Hour).UnixMilli(), Deadline: now.Add(-time.Hour + span).UnixMilli(), Session: &sess}
	hb := codec.Heartbeat{Member: "a", Session: sess, GrantedAt: now.UnixMilli(), Deadline: now.Add(span).UnixMilli()}
	ended := &rolestate.SessionSeen{Heartbeat: codec.Heartbeat{Member: "b", Session: codec.Session{ProducerID: 10, Nonce: "n2"}, End: true}, SeenAt: now}
	old := codec.Lease{Member: "b", Token: codec.Token{ProducerID: 2}, GrantedAt: now.Add(-time.Hour).UnixMilli(), Deadline: now.Add(-time.Hour + span).UnixMilli()}
	f := &fakeTable{caughtUp: true, roles: map[codec.Role]rolestate.State{
		"live":  {Role: "live", Lease: &l, LeaseSeenAt: now.Add(-time.Hour), Session: &rolestate.SessionSeen{Heartbeat: hb, SeenAt: now}},
		"dead":  {Role: "dead", Lease: &old, LeaseSeenAt: now.Add(-time.Hour), Candidates: []rolestate.Candidate{{Member: "b", Session: ended}}},
		"queue": {Role: "queue", LeaseOffset: -1, Candidates: []rolestate.Candidate{{Member: "q"}}},
	}}
	m := scrape(t, newHandler(t, f, Options{}))
	assert.Equal(t, "1", m[`krole_roles{state="held"}`])
	assert.Equal(t, "1", m[`krole_roles{state="dead"}`])
	assert.Equal(t, "1", m[`krole_roles{state="unheld"}`])
}
