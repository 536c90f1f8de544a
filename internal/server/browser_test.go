package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/internal/testcluster"
)

// TestPageInChromium loads the page at / in headless Chromium, driven over
// the DevTools protocol, and checks that it shows the table and follows
// its changes live: a new holder, a new role, and the countdown of a lease
// running out. It needs a Chromium binary (Debian: apt-get install
// chromium; or KROLE_CHROMIUM=/path/to/chrome) and skips without one.
func TestPageInChromium(t *testing.T) {
	bin := chromiumBinary()
	if bin == "" {
		t.Skip("chromium not installed: apt-get install chromium (or set KROLE_CHROMIUM to a Chrome/Chromium binary)")
	}
	c := testcluster.Start(t, testcluster.Options{Partitions: 2})
	m := c.Members(t)
	_, err := m.Transport.RegisterValue(m.Context(), "db", "m1", "10.0.0.1:80")
	require.NoError(t, err)
	m.Register("db", "m2")
	l1 := m.LeaseValue("db", "m1", time.Hour, "10.0.0.1:80")
	m.Register("queue", "q1")

	v := runView(t, c)
	caughtUp(t, v)
	base, stop := context.WithCancel(context.Background())
	srv := httptest.NewUnstartedServer(newHandler(t, v, Options{}))
	srv.Config.BaseContext = func(net.Listener) context.Context { return base }
	srv.Start()
	t.Cleanup(srv.Close)
	t.Cleanup(stop) // end the page's event stream before srv.Close waits for it

	b := startChromium(t, bin)
	page := b.open(srv.URL + "/")

	// The table as the page shows it: one row of cell texts per role.
	const table = `[...document.querySelectorAll("#roles tr")].map(tr => [tr.dataset.role, ...[...tr.cells].map(td => td.textContent)])`
	rowOf := func(rows [][]string, role string) []string {
		for _, r := range rows {
			if r[0] == role {
				return r[1:]
			}
		}
		return nil
	}
	live := regexp.MustCompile(`^\d+(\.\d)?s$|^\d+m\d\ds$|^\d+h\d\dm$`)
	var rows [][]string
	page.waitFor("the page shows db held by m1 and queue without holder", table, &rows, func() bool {
		db, q := rowOf(rows, "db"), rowOf(rows, "queue")
		return len(db) == 7 && db[1] == "m1" && len(q) == 7
	})
	db, q := rowOf(rows, "db"), rowOf(rows, "queue")
	assert.Equal(t, []string{"db", "m1", "10.0.0.1:80", l1.Token.String()}, db[:4], "holder, its value, token")
	assert.Regexp(t, live, db[4], "time left on an hour's lease")
	assert.Equal(t, "m1, m2", db[5], "candidates in rank order")
	assert.Equal(t, []string{"queue", "none", "-", "-", "none", "q1", "-"}, q, "no timeline without a history")
	var status string
	page.waitFor("the stream is connected", `document.getElementById("status").textContent`, &status, func() bool { return status == "live" })

	// Live: a new holder, under a new token, with a short lease.
	l2 := m.Lease("db", "m2", 3*time.Second)
	page.waitFor("the page shows db held by m2", table, &rows, func() bool {
		db := rowOf(rows, "db")
		return len(db) == 7 && db[1] == "m2"
	})
	db = rowOf(rows, "db")
	assert.Equal(t, "-", db[2], "m2 registered no value")
	assert.Equal(t, l2.Token.String(), db[3])
	if time.Now().UnixMilli() < l2.Deadline-500 { // not on a slow machine
		assert.Regexp(t, live, db[4])
	}
	// Live: a new role.
	m.Register("cron", "c1")
	page.waitFor("the page shows the new role cron", table, &rows, func() bool { return len(rowOf(rows, "cron")) == 7 })
	assert.Equal(t, []string{"cron", "none", "-", "-", "none", "c1", "-"}, rowOf(rows, "cron"))
	// The countdown runs out on the page.
	page.waitFor("db's lease shows expired", table, &rows, func() bool {
		db := rowOf(rows, "db")
		return len(db) == 7 && db[4] == "expired"
	})
	assert.GreaterOrEqual(t, time.Now().UnixMilli(), l2.Deadline-1000, "not before the deadline (1s for clock rounding)")

	// A holder whose clock runs 30 s ahead writes a 20 s lease: the page
	// shows at most its span left, not the 50 s to its deadline.
	now := time.Now()
	m.LeaseAt("skewed", "s1", now.Add(30*time.Second), now.Add(50*time.Second))
	page.waitFor("the page shows skewed's lease", table, &rows, func() bool {
		r := rowOf(rows, "skewed")
		return len(r) == 7 && r[1] == "s1"
	})
	assert.LessOrEqual(t, seconds(t, rowOf(rows, "skewed")[4]), 20.0, "time left as this observer judges it")

	// The cluster goes away: the page stops claiming "live", says since
	// when the cluster is unreachable and as of when the data is current.
	if c.Fake == nil {
		t.Log("KROLE_BROKERS names an outside cluster: the test cannot stop it")
		return
	}
	page.waitFor("the status is live", `document.getElementById("status").textContent`, &status, func() bool { return status == "live" })
	c.Fake.Close()
	page.waitFor("the page says the cluster is unreachable", `document.getElementById("status").textContent`, &status, func() bool {
		return strings.HasPrefix(status, "cluster unreachable since ") && strings.Contains(status, "; data as of ")
	})
	var class string
	require.NoError(t, page.eval(testCtx(t), `document.getElementById("status").className`, &class))
	assert.NotEqual(t, "live", class)
}

// seconds parses a time left the page shows ("4.2s", "42s", "1m05s").
func seconds(t *testing.T, s string) float64 {
	t.Helper()
	m := regexp.MustCompile(`^(?:(\d+)m)?(\d+(?:\.\d)?)s$`).FindStringSubmatch(s)
	require.NotNil(t, m, "not a time left: %q", s)
	var mins, secs float64
	if m[1] != "" {
		_, err := fmt.Sscan(m[1], &mins)
		require.NoError(t, err)
	}
	_, err := fmt.Sscan(m[2], &secs)
	require.NoError(t, err)
	return 60*mins + secs
}

// chromiumBinary returns the browser to drive, or "" when there is none.
func chromiumBinary() string {
	if p := os.Getenv("KROLE_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// browser is a headless Chromium driven over --remote-debugging-pipe: the
// DevTools protocol as NUL-terminated JSON messages on fds 3 (to the
// browser) and 4 (from it). No WebSocket, no debugging port.
type browser struct {
	t       *testing.T
	cmd     *exec.Cmd
	w       *os.File
	mu      sync.Mutex // serializes writes
	id      atomic.Int64
	pending sync.Map // id -> chan cdpResponse
	done    chan struct{}
	stderr  *strings.Builder
}

type cdpResponse struct {
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Message string `json:"message"`
	} `json:"error"`
}

func startChromium(t *testing.T, bin string) *browser {
	t.Helper()
	toBrowserR, toBrowserW, err := os.Pipe()
	require.NoError(t, err)
	fromBrowserR, fromBrowserW, err := os.Pipe()
	require.NoError(t, err)
	cmd := exec.Command(bin,
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-extensions", "--no-first-run", "--no-default-browser-check", "--mute-audio",
		"--user-data-dir="+t.TempDir(), "--remote-debugging-pipe", "about:blank")
	cmd.ExtraFiles = []*os.File{toBrowserR, fromBrowserW}
	stderr := &strings.Builder{}
	cmd.Stderr = &lockedWriter{w: stderr}
	require.NoError(t, cmd.Start(), "start %s", bin)
	toBrowserR.Close()
	fromBrowserW.Close()
	b := &browser{t: t, cmd: cmd, w: toBrowserW, done: make(chan struct{}), stderr: stderr}
	go b.read(fromBrowserR)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = b.call(ctx, "", "Browser.close", nil)
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		toBrowserW.Close()
		<-b.done
	})
	return b
}

type lockedWriter struct {
	mu sync.Mutex
	w  *strings.Builder
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// read hands each response to the call waiting for its id; events are
// dropped.
func (b *browser) read(r *os.File) {
	defer close(b.done)
	defer r.Close()
	br := bufio.NewReader(r)
	for {
		msg, err := br.ReadBytes(0)
		if err != nil {
			return
		}
		var head struct {
			ID int64 `json:"id"`
		}
		if json.Unmarshal(msg[:len(msg)-1], &head) != nil || head.ID == 0 {
			continue
		}
		var resp cdpResponse
		_ = json.Unmarshal(msg[:len(msg)-1], &resp)
		if ch, ok := b.pending.LoadAndDelete(head.ID); ok {
			ch.(chan cdpResponse) <- resp
		}
	}
}

// call sends one command (to the session, or to the browser when session
// is "") and waits for its answer.
func (b *browser) call(ctx context.Context, session, method string, params any) (json.RawMessage, error) {
	id := b.id.Add(1)
	msg := map[string]any{"id": id, "method": method}
	if params != nil {
		msg["params"] = params
	}
	if session != "" {
		msg["sessionId"] = session
	}
	data, err := json.Marshal(msg)
	if err != nil {
		return nil, err
	}
	ch := make(chan cdpResponse, 1)
	b.pending.Store(id, ch)
	b.mu.Lock()
	_, err = b.w.Write(append(data, 0))
	b.mu.Unlock()
	if err != nil {
		b.pending.Delete(id)
		return nil, fmt.Errorf("%s: %w", method, err)
	}
	select {
	case resp := <-ch:
		if resp.Error != nil {
			return nil, fmt.Errorf("%s: %s", method, resp.Error.Message)
		}
		return resp.Result, nil
	case <-b.done:
		return nil, fmt.Errorf("%s: the browser went away", method)
	case <-ctx.Done():
		b.pending.Delete(id)
		return nil, fmt.Errorf("%s: %w", method, ctx.Err())
	}
}

// tab is one page of the browser.
type tab struct {
	b       *browser
	session string
}

func (b *browser) open(url string) *tab {
	b.t.Helper()
	ctx := testCtx(b.t)
	res, err := b.call(ctx, "", "Target.createTarget", map[string]any{"url": url})
	require.NoError(b.t, err, "chromium stderr: %s", b.stderr)
	var target struct {
		TargetID string `json:"targetId"`
	}
	require.NoError(b.t, json.Unmarshal(res, &target))
	res, err = b.call(ctx, "", "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true})
	require.NoError(b.t, err)
	var att struct {
		SessionID string `json:"sessionId"`
	}
	require.NoError(b.t, json.Unmarshal(res, &att))
	return &tab{b: b, session: att.SessionID}
}

// eval evaluates a JavaScript expression in the page and decodes its JSON
// value into out.
func (p *tab) eval(ctx context.Context, expr string, out any) error {
	res, err := p.b.call(ctx, p.session, "Runtime.evaluate", map[string]any{
		"expression": "JSON.stringify(" + expr + ")", "returnByValue": true,
	})
	if err != nil {
		return err
	}
	var r struct {
		Result struct {
			Value string `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text string `json:"text"`
		} `json:"exceptionDetails"`
	}
	if err := json.Unmarshal(res, &r); err != nil {
		return err
	}
	if r.ExceptionDetails != nil {
		return errors.New("javascript: " + r.ExceptionDetails.Text)
	}
	if r.Result.Value == "" {
		return errors.New("javascript: no value")
	}
	return json.Unmarshal([]byte(r.Result.Value), out)
}

// waitFor evaluates expr into out until ok() holds, and fails the test
// when it does not within half a minute.
func (p *tab) waitFor(what, expr string, out any, ok func() bool) {
	p.b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var lastErr error
	for {
		if lastErr = p.eval(ctx, expr, out); lastErr == nil && ok() {
			return
		}
		select {
		case <-ctx.Done():
			last, _ := json.Marshal(out)
			require.Failf(p.b.t, "timed out waiting", "%s: last value %s, last error %v", what, last, lastErr)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// TestPageTimelineShowsFailover: with a history, the page names the
// cluster and topic it reads, says when the data was last current and
// that the cluster answers, and draws each role's holders over the last
// minutes: the failover the test causes (m1's lease runs out, m2 takes
// the role) shows as m1's segment, a gap, a failover mark and m2's
// segment. KROLE_SCREENSHOT=file.png saves a screenshot of the page.
func TestPageTimelineShowsFailover(t *testing.T) {
	bin := chromiumBinary()
	if bin == "" {
		t.Skip("chromium not installed: apt-get install chromium (or set KROLE_CHROMIUM to a Chrome/Chromium binary)")
	}
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	m := c.Members(t)
	_, err := m.Transport.RegisterValue(m.Context(), "db", "m1", "10.0.0.1:5432")
	require.NoError(t, err)
	_, err = m.Transport.RegisterValue(m.Context(), "db", "m2", "10.0.0.2:5432")
	require.NoError(t, err)
	m.LeaseValue("db", "m1", 2*time.Second, "10.0.0.1:5432")
	m.Register("queue", "q1")
	m.Lease("queue", "q1", time.Hour)

	v := runView(t, c)
	caughtUp(t, v)
	hist := NewHistory(5*time.Minute, 0, nil)
	hctx, stopHist := context.WithCancel(context.Background())
	histDone := make(chan error, 1)
	go func() { histDone <- hist.Run(hctx, v) }()
	t.Cleanup(func() { stopHist(); assert.NoError(t, <-histDone) })
	base, stop := context.WithCancel(context.Background())
	srv := httptest.NewUnstartedServer(newHandler(t, v, Options{History: hist, Source: Source{Brokers: c.Config.Brokers, Topic: c.Config.Topic}}))
	srv.Config.BaseContext = func(net.Listener) context.Context { return base }
	srv.Start()
	t.Cleanup(srv.Close)
	t.Cleanup(stop)

	b := startChromium(t, bin)
	page := b.open(srv.URL + "/")
	ctx := testCtx(t)
	_, err = b.call(ctx, page.session, "Emulation.setDeviceMetricsOverride",
		map[string]any{"width": 1400, "height": 420, "deviceScaleFactor": 1, "mobile": false})
	require.NoError(t, err)

	var src string
	page.waitFor("the page names its source", `document.getElementById("source").textContent`, &src, func() bool {
		return src == "topic "+c.Config.Topic+" at "+strings.Join(c.Config.Brokers, ", ")
	})
	var cur string
	page.waitFor("the page says the data is current and the cluster answers", `document.getElementById("current").textContent`, &cur, func() bool {
		return strings.HasPrefix(cur, "data current as of ") && strings.Contains(cur, "; cluster answering (last answer ")
	})

	// The failover: m1's lease runs out, then m2 takes the role.
	const segs = `[...document.querySelectorAll('#roles tr[data-role="db"] .seg')].map(s => s.dataset.member || "gap")`
	var got []string
	page.waitFor("m1's lease runs out: a gap after m1", segs, &got, func() bool { return len(got) >= 2 && got[len(got)-1] == "gap" })
	assert.Equal(t, []string{"m1", "gap"}, got)
	m.LeaseValue("db", "m2", time.Hour, "10.0.0.2:5432")
	page.waitFor("m2 holds after the gap", segs, &got, func() bool { return len(got) == 3 })
	assert.Equal(t, []string{"m1", "gap", "m2"}, got)
	var marks []string
	require.NoError(t, page.eval(ctx, `[...document.querySelectorAll('#roles tr[data-role="db"] .mark')].map(m => m.dataset.kind)`, &marks))
	assert.Equal(t, []string{"expired", "failover"}, marks)
	var title string
	require.NoError(t, page.eval(ctx, `document.querySelector('#roles tr[data-role="db"] .seg[data-member="m2"]').title`, &title))
	assert.Contains(t, title, "m2 (10.0.0.2:5432), token ")
	require.NoError(t, page.eval(ctx, `[...document.querySelectorAll('#roles tr[data-role="queue"] .seg')].map(s => s.dataset.member || "gap")`, &got))
	assert.Equal(t, []string{"q1"}, got, "a role held throughout: one segment")

	if path := os.Getenv("KROLE_SCREENSHOT"); path != "" {
		var w int // let m2's segment grow visible (the page refreshes the history every 5s)
		page.waitFor("m2's segment is drawn", `document.querySelector('#roles tr[data-role="db"] .seg[data-member="m2"]').offsetWidth`, &w, func() bool { return w >= 6 })
		res, err := b.call(ctx, page.session, "Page.captureScreenshot", map[string]any{"format": "png"})
		require.NoError(t, err)
		var shot struct {
			Data []byte `json:"data"` // base64 in JSON: decoded by encoding/json
		}
		require.NoError(t, json.Unmarshal(res, &shot))
		require.NoError(t, os.WriteFile(path, shot.Data, 0o644))
	}
}
