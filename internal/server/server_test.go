package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/view"
)

// fakeTable answers from a fixed set of roles, or with err.
type fakeTable struct {
	mu      sync.Mutex
	roles   map[codec.Role]view.RoleState
	err     error
	changes chan view.Change
	watched []codec.Role
}

func (f *fakeTable) Lookup(_ context.Context, role codec.Role) (view.RoleState, bool, error) {
	if f.err != nil {
		return view.RoleState{}, false, f.err
	}
	st, ok := f.roles[role]
	if !ok {
		return view.RoleState{Role: role, LeaseOffset: -1}, false, nil
	}
	return st, true, nil
}

func (f *fakeTable) Holder(ctx context.Context, role codec.Role, now time.Time) (codec.Lease, bool, error) {
	st, _, err := f.Lookup(ctx, role)
	if err != nil || st.Lease == nil {
		return codec.Lease{}, false, err
	}
	l, held := st.Holder(now.UnixMilli())
	if !held {
		return *st.Lease, false, nil
	}
	return l, true, nil
}

func (f *fakeTable) Candidates(ctx context.Context, role codec.Role) ([]view.Candidate, error) {
	st, _, err := f.Lookup(ctx, role)
	return st.Candidates, err
}

func (f *fakeTable) Roles(context.Context) ([]codec.Role, error) {
	if f.err != nil {
		return nil, f.err
	}
	var out []codec.Role
	for r := range f.roles {
		out = append(out, r)
	}
	return out, nil
}

func (f *fakeTable) Snapshot(context.Context) ([]view.RoleState, error) {
	if f.err != nil {
		return nil, f.err
	}
	var out []view.RoleState
	for _, st := range f.roles {
		out = append(out, st)
	}
	return out, nil
}

func (f *fakeTable) Watch(ctx context.Context, roles ...codec.Role) <-chan view.Change {
	f.mu.Lock()
	f.watched = roles
	f.mu.Unlock()
	out := make(chan view.Change)
	go func() {
		defer close(out)
		for {
			select {
			case c := <-f.changes:
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

func (f *fakeTable) CaughtUp() bool { return f.err == nil }

func (f *fakeTable) Stats() view.Stats {
	return view.Stats{Applied: 3, Skipped: map[view.SkipReason]int64{view.SkipKey: 1}, Roles: len(f.roles), CaughtUp: true,
		Partitions: []view.PartitionStats{{Partition: 0, Next: 4, HighWatermark: 5, Lag: 1, CaughtUpTo: 5}}}
}

func fixture() *fakeTable {
	l := codec.Lease{Member: "a", Token: codec.Token{ProducerID: 9, Epoch: 2}, GrantedAt: 1000, Deadline: 2000}
	return &fakeTable{
		roles: map[codec.Role]view.RoleState{
			"db": {Role: "db", Lease: &l, LeaseOffset: 4, Candidates: []view.Candidate{
				{Member: "a", Offset: 1, Rank: 0}, {Member: "b", Offset: 3, Rank: 1}}},
		},
		changes: make(chan view.Change),
	}
}

func get(t *testing.T, h http.Handler, path string) (*httptest.ResponseRecorder, map[string]any) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	var body map[string]any
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body), rec.Body.String())
	return rec, body
}

func TestLookups(t *testing.T) {
	h := New(fixture(), Options{Clock: func() time.Time { return time.UnixMilli(1500) }})

	rec, body := get(t, h, "/v1/roles")
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, []any{"db"}, body["roles"])

	rec, body = get(t, h, "/v1/roles/db")
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, "db", body["role"])
	assert.Equal(t, float64(4), body["lease_offset"])
	assert.Equal(t, "a", body["lease"].(map[string]any)["member"])
	assert.Len(t, body["candidates"], 2)

	rec, body = get(t, h, "/v1/roles/db/holder")
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, true, body["held"])
	assert.Equal(t, float64(1500), body["at"])
	rec, body = get(t, h, "/v1/roles/db/holder?at=2000")
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, false, body["held"], "expired at its deadline")
	assert.NotNil(t, body["lease"])

	rec, body = get(t, h, "/v1/roles/db/candidates")
	assert.Equal(t, http.StatusOK, rec.Code)
	cs := body["candidates"].([]any)
	require.Len(t, cs, 2)
	assert.Equal(t, "b", cs[1].(map[string]any)["member"])
	assert.Equal(t, float64(1), cs[1].(map[string]any)["rank"])

	rec, _ = get(t, h, "/v1/roles/nobody")
	assert.Equal(t, http.StatusNotFound, rec.Code)
	rec, body = get(t, h, "/v1/roles/nobody/candidates")
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, []any{}, body["candidates"])
	rec, _ = get(t, h, "/v1/roles/bad%20name")
	assert.Equal(t, http.StatusBadRequest, rec.Code)
	rec, _ = get(t, h, "/v1/roles/db/holder?at=soon")
	assert.Equal(t, http.StatusBadRequest, rec.Code)

	rec, body = get(t, h, "/v1/snapshot")
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.Len(t, body["roles"], 1)

	rec, body = get(t, h, "/v1/stats")
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, float64(3), body["applied"])
	assert.Equal(t, float64(1), body["skipped"].(map[string]any)["bad_key"])
	assert.Equal(t, float64(1), body["partitions"].([]any)[0].(map[string]any)["lag"])

	rec, body = get(t, h, "/healthz")
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, true, body["caught_up"])
}

func TestNotCaughtUpIs503(t *testing.T) {
	f := fixture()
	f.err = fmt.Errorf("%w: %w", view.ErrNotCaughtUp, context.DeadlineExceeded)
	h := New(f, Options{})
	for _, path := range []string{"/v1/roles", "/v1/roles/db", "/v1/roles/db/holder", "/v1/roles/db/candidates", "/v1/snapshot", "/healthz"} {
		rec, _ := get(t, h, path)
		assert.Equal(t, http.StatusServiceUnavailable, rec.Code, path)
	}
	rec, body := get(t, h, "/v1/roles")
	assert.Equal(t, "1", rec.Header().Get("Retry-After"))
	assert.Contains(t, body["error"], "not caught up")
}

func TestWatchStreamsChanges(t *testing.T) {
	f := fixture()
	srv := httptest.NewServer(New(f, Options{}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/v1/watch?role=db&role=cache", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))

	f.changes <- view.Change{Role: "db", Offset: 7, HolderChanged: true, Joined: []codec.MemberID{"c"}}
	sc := bufio.NewScanner(resp.Body)
	var lines []string
	for sc.Scan() {
		if sc.Text() == "" {
			break
		}
		lines = append(lines, sc.Text())
	}
	require.Len(t, lines, 2)
	assert.Equal(t, "event: change", lines[0])
	var c map[string]any
	require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(lines[1], "data: ")), &c))
	assert.Equal(t, "db", c["role"])
	assert.Equal(t, true, c["holder_changed"])
	assert.Equal(t, []any{"c"}, c["joined"])
	f.mu.Lock()
	assert.Equal(t, []codec.Role{"db", "cache"}, f.watched)
	f.mu.Unlock()

	rec, _ := get(t, New(f, Options{}), "/v1/watch?role=no/such")
	assert.Equal(t, http.StatusBadRequest, rec.Code)
}
