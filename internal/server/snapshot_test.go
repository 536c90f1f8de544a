package server

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/rolestate"
)

// namedEvent is one server-sent event: its name ("" for a plain message)
// and its data.
type namedEvent struct{ name, data string }

// readEvent returns the next event of sc that carries data.
func readEvent(t *testing.T, sc *bufio.Scanner) namedEvent {
	t.Helper()
	var ev namedEvent
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "" && ev.data != "":
			return ev
		case line == "":
			ev = namedEvent{}
		case strings.HasPrefix(line, "event: "):
			ev.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			ev.data += strings.TrimPrefix(line, "data: ")
		}
	}
	require.NoError(t, sc.Err())
	require.Fail(t, "the stream ended")
	return ev
}

// TestWatchSnapshot: with ?snapshot=1 a stream sends the current rows as
// one event named "snapshot" (their JSON array, sorted by role), then each
// change as a plain event of one row, as without it; a snapshot value that
// is not a boolean is a 400.
func TestWatchSnapshot(t *testing.T) {
	f := fixture()
	f.watched = make(chan []codec.Role, 2)
	srv := httptest.NewServer(newHandler(t, f, Options{Clock: at(1500), Heartbeat: time.Hour}))
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	open := func(path string) *bufio.Scanner {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
		require.NoError(t, err)
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		t.Cleanup(func() { res.Body.Close() })
		require.Equal(t, http.StatusOK, res.StatusCode)
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(nil, 1<<20)
		return sc
	}

	all := open("/v1/watch?snapshot=1")
	<-f.watched
	ev := readEvent(t, all)
	assert.Equal(t, "snapshot", ev.name)
	var rows []Row
	require.NoError(t, json.Unmarshal([]byte(ev.data), &rows))
	var roles []codec.Role
	for _, r := range rows {
		roles = append(roles, r.Role)
	}
	assert.Equal(t, []codec.Role{"cron", "db", "queue"}, roles, "every row in one event, sorted")
	assert.Equal(t, "a", string(rows[1].Holder.Member))

	one := open("/v1/roles/db/watch?snapshot=true")
	<-f.watched
	ev = readEvent(t, one)
	assert.Equal(t, "snapshot", ev.name)
	require.NoError(t, json.Unmarshal([]byte(ev.data), &rows))
	require.Len(t, rows, 1)
	assert.Equal(t, codec.Role("db"), rows[0].Role)

	f.set(rolestate.State{Role: "db", LeaseOffset: -1, Candidates: []rolestate.Candidate{{Member: "b", Offset: 3, RegisteredAt: 950}}})
	for _, sc := range []*bufio.Scanner{all, one} {
		ev = readEvent(t, sc)
		assert.Empty(t, ev.name, "a change is a plain event")
		var r Row
		require.NoError(t, json.Unmarshal([]byte(ev.data), &r))
		assert.Equal(t, codec.Role("db"), r.Role)
		assert.Nil(t, r.Holder)
	}

	rec := get(t, newHandler(t, fixture(), Options{}), "/v1/watch?snapshot=maybe")
	assert.Equal(t, http.StatusBadRequest, rec.Code)
	assert.Contains(t, rec.Body.String(), `snapshot=\"maybe\"`)
}
