package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/server"
	"github.com/krabka/krole/internal/testcluster"
)

// startServe runs `krole serve` in-process on a free port and returns its
// base URL, from the line it prints.
func startServe(t *testing.T, c *testcluster.Cluster, extra ...string) (*background, string) {
	t.Helper()
	b := startBackground(t, append(append([]string{"serve", "--listen", "127.0.0.1:0"}, extra...), clusterFlags(c)...)...)
	line := b.line("the listening line")
	url, ok := strings.CutPrefix(line, "listening: ")
	require.True(t, ok, "first line: %q", line)
	require.Regexp(t, `^http://127\.0\.0\.1:\d+$`, url)
	require.NotEqual(t, "http://127.0.0.1:0", url, "the real port")
	return b, url
}

func httpGet(t *testing.T, url string) (*http.Response, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(body)
}

// waitHealthy polls /healthz until it answers 200: 503 until the view has
// caught up.
func waitHealthy(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		resp, body := httpGet(t, url+"/healthz")
		if resp.StatusCode == http.StatusOK {
			var h map[string]any
			require.NoError(t, json.Unmarshal([]byte(body), &h), body)
			assert.Equal(t, true, h["healthy"])
			assert.Equal(t, true, h["caught_up"])
			return
		}
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, body)
		require.True(t, time.Now().Before(deadline), "not healthy within a minute")
		time.Sleep(20 * time.Millisecond)
	}
}

// TestServe runs `krole serve` against a cluster and uses its API over
// HTTP: the same rows as `krole table -o json`, one role, a 404, metrics,
// the page, and a watch stream; an interrupt stops it with exit 0.
func TestServe(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{})
	m, _, _ := fixtureRoles(t, c)
	b, url := startServe(t, c)
	waitHealthy(t, url)

	resp, body := httpGet(t, url+"/v1/roles")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	table, _ := tableJSON(t, c)
	assert.JSONEq(t, withoutLeft(t, table), withoutLeft(t, body), "GET /v1/roles is `krole table -o json` (each judges left_ms when it answers)")

	resp, body = httpGet(t, url+"/v1/roles/db")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var all []json.RawMessage
	require.NoError(t, json.Unmarshal([]byte(table), &all))
	assert.JSONEq(t, withoutLeft(t, string(all[1])), withoutLeft(t, body), "one element of the array")

	resp, body = httpGet(t, url+"/v1/roles/nosuch")
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
	assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	assert.JSONEq(t, `{"error":"role nosuch is not in the table: it has no lease and no candidate"}`, body)

	resp, body = httpGet(t, url+"/")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Contains(t, body, "<title>krole: roles</title>")

	// A watch stream: the current row, then a change.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/v1/roles/queue/watch", nil)
	require.NoError(t, err)
	stream, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer stream.Body.Close()
	assert.Equal(t, "text/event-stream", stream.Header.Get("Content-Type"))
	events := sseRows(stream.Body)
	first := <-events
	assert.Equal(t, codec.Role("queue"), first.Role)
	assert.Nil(t, first.Holder)
	require.Len(t, first.Candidates, 1)
	l := m.Lease("queue", "q1", time.Hour)
	next := <-events
	require.NotNil(t, next.Holder, "the new holder, live")
	assert.Equal(t, l.Token, next.Holder.Token)

	resp, body = httpGet(t, url+"/metrics")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	for _, want := range []string{
		"krole_view_records_applied_total 6\n", // 3 registrations, 3 leases
		`krole_view_records_skipped_total{reason="bad_value"} 0` + "\n",
		`krole_view_lag_records{partition="0"} `,
		"krole_view_caught_up 1\n",
		`krole_lookups_total{endpoint="/v1/roles"} 1` + "\n",
		`krole_lookups_total{endpoint="/v1/roles/{role}"} 2` + "\n",
		`krole_lookups_total{endpoint="/v1/roles/{role}/watch"} 1` + "\n",
	} {
		assert.Contains(t, body, want)
	}
	for _, line := range strings.Split(strings.TrimSpace(body), "\n") {
		if !strings.HasPrefix(line, "#") {
			assert.True(t, strings.HasPrefix(line, "krole_"), "not prefixed krole_: %q", line)
		}
	}

	// Interrupted with a stream open: it ends the stream and exits 0.
	assert.Equal(t, ExitOK, b.stop(), "stderr: %s", b.stderr.String())
	_, open := <-events
	assert.False(t, open, "the stream ended")
	errOut := b.stderr.String()
	assert.Contains(t, errOut, "krole serve: following topic "+c.Config.Topic)
	assert.Contains(t, errOut, "krole serve: view caught up: 3 role(s)\n")
	assert.True(t, strings.HasSuffix(errOut, "krole serve: stopped\n"), "stderr: %s", errOut)
	_, err = net.DialTimeout("tcp", strings.TrimPrefix(url, "http://"), time.Second)
	assert.Error(t, err, "no longer listening")
}

// sseRows decodes the rows of an event stream until it ends.
func sseRows(r io.Reader) <-chan server.Row {
	out := make(chan server.Row, 100)
	go func() {
		defer close(out)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var row server.Row
			if json.Unmarshal([]byte(data), &row) == nil {
				out <- row
			}
		}
	}()
	return out
}

// TestServeHelpNamesEveryRoute: `krole serve --help` lists every route
// the server answers, and the --history flag.
func TestServeHelpNamesEveryRoute(t *testing.T) {
	t.Parallel()
	r := run(t, "serve", "--help")
	requireOK(t, r)
	for _, route := range append(server.APIRoutes(), "/healthz", "/metrics") {
		want := strings.ReplaceAll(route, "{role}", "ROLE")
		assert.Regexp(t, `\n\s+`+regexp.QuoteMeta(want)+`[ \[]`, r.Stdout, "the help lists %s", want)
	}
	assert.Contains(t, r.Stdout, "[--history D]")
	assert.Contains(t, r.Stdout, "--history D")
}

func TestServeErrors(t *testing.T) {
	t.Parallel()
	r := run(t, "serve", "--listen", "nope")
	assertOneLineError(t, r, ExitUsage)
	assert.Contains(t, r.Stderr, `krole: --listen "nope" is not HOST:PORT`)
	r = run(t, "serve", "extra")
	assertOneLineError(t, r, ExitUsage)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	r = run(t, "serve", "--listen", ln.Addr().String(), "--brokers", "127.0.0.1:1")
	assertOneLineError(t, r, ExitFailure)
	assert.Contains(t, r.Stderr, "address already in use")

	// A bad --history is a usage error before any network work.
	r = run(t, "serve", "--history", "0s", "--listen", "127.0.0.1:0", "--brokers", "127.0.0.1:1")
	assertOneLineError(t, r, ExitUsage)
	assert.Contains(t, r.Stderr, "krole: --history 0s: must be positive")

	// No broker at the start: an error, without a "listening:" first.
	r = run(t, "serve", "--listen", "127.0.0.1:0", "--brokers", "127.0.0.1:1")
	assertOneLineError(t, r, ExitFailure)
	assert.Contains(t, r.Stderr, "krole: no broker answered at 127.0.0.1:1")
}

// TestServeHealthzWhenTheClusterStops: with the cluster gone, /healthz
// turns 503 and says why and since when, while the lookups keep answering
// from the table.
func TestServeHealthzWhenTheClusterStops(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{})
	c.RequireFake(t)
	fixtureRoles(t, c)
	b, url := startServe(t, c)
	waitHealthy(t, url)

	c.Fake.Close()
	// The lag check may trip before the contact check does (the last
	// confirmed catch-up can be older than the last answer); every
	// unhealthy answer is a 503, and within a minute one says unreachable.
	var h map[string]any
	deadline := time.Now().Add(time.Minute)
	for {
		resp, body := httpGet(t, url+"/healthz")
		h = nil
		require.NoError(t, json.Unmarshal([]byte(body), &h), body)
		if resp.StatusCode != http.StatusOK {
			require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, body)
			require.Equal(t, false, h["healthy"], body)
			if h["unreachable"] == true {
				break
			}
		}
		require.True(t, time.Now().Before(deadline), "/healthz not unreachable a minute after the cluster stopped: %s", body)
		time.Sleep(100 * time.Millisecond)
	}
	assert.Contains(t, h["reason"], "no broker has answered")
	assert.NotEmpty(t, h["caught_up_at"], "as of when the data is current")
	resp, _ := httpGet(t, url+"/v1/roles")
	assert.Equal(t, http.StatusOK, resp.StatusCode, "lookups answer from the table")
	assert.Equal(t, ExitOK, b.stop(), "stderr: %s", b.stderr.String())
}

// withoutLeft returns a row or an array of rows without the holders'
// left_ms, which each answer judges at its own moment; it checks that
// each is there and no more than an hour.
func withoutLeft(t *testing.T, doc string) string {
	t.Helper()
	var v any
	require.NoError(t, json.Unmarshal([]byte(doc), &v), doc)
	rows, ok := v.([]any)
	if !ok {
		rows = []any{v}
	}
	for _, r := range rows {
		if h, ok := r.(map[string]any)["holder"].(map[string]any); ok {
			require.Contains(t, h, "left_ms")
			assert.LessOrEqual(t, h["left_ms"], float64(time.Hour.Milliseconds()))
			delete(h, "left_ms")
		}
	}
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}
