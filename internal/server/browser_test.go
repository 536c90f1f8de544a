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
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/testcluster"
	"github.com/krabka/krole/rolestate"
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
	page := b.openWatching(srv.URL+"/", statusLog)

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
	var rows [][]string
	page.waitFor("the page shows db held by m1 and queue without holder", table, &rows, func() bool {
		db, q := rowOf(rows, "db"), rowOf(rows, "queue")
		return len(db) == 6 && db[1] == "m1" && len(q) == 6
	})
	db, q := rowOf(rows, "db"), rowOf(rows, "queue")
	assert.Equal(t, []string{"db", "m1", "10.0.0.1:80", l1.Token.String()}, db[:4], "holder, its value, token")
	assert.Regexp(t, live, db[4], "time left on an hour's lease")
	assert.Equal(t, "m1, m2", db[5], "candidates in rank order")
	assert.Equal(t, []string{"queue", "none", "-", "-", "none", "q1"}, q)
	var status string
	page.waitFor("the stream is connected", `document.getElementById("status").textContent`, &status, func() bool { return status == "live" })
	// Before the stream first opened, the page said it was connecting,
	// never that it was disconnected.
	var statuses []string
	require.NoError(t, page.eval(testCtx(t), `window.__statuses`, &statuses))
	assert.NotEmpty(t, statuses)
	for _, s := range statuses {
		assert.Contains(t, []string{"connecting\u2026", "live"}, s, "status shown on first load: %q", statuses)
	}
	var noHistory string
	require.NoError(t, page.eval(testCtx(t), `document.getElementById("timeline").textContent`, &noHistory))
	assert.Equal(t, "This server keeps no history.", noHistory, "no timeline without a history")

	// Live: a new holder, under a new token, with a short lease.
	l2 := m.Lease("db", "m2", 3*time.Second)
	page.waitFor("the page shows db held by m2", table, &rows, func() bool {
		db := rowOf(rows, "db")
		return len(db) == 6 && db[1] == "m2"
	})
	db = rowOf(rows, "db")
	assert.Equal(t, "-", db[2], "m2 registered no value")
	assert.Equal(t, l2.Token.String(), db[3])
	if time.Now().UnixMilli() < l2.Deadline-500 { // not on a slow machine
		assert.Regexp(t, live, db[4])
	}
	// Live: a new role.
	m.Register("cron", "c1")
	page.waitFor("the page shows the new role cron", table, &rows, func() bool { return len(rowOf(rows, "cron")) == 6 })
	assert.Equal(t, []string{"cron", "none", "-", "-", "none", "c1"}, rowOf(rows, "cron"))
	// The countdown runs out on the page.
	page.waitFor("db's lease shows expired", table, &rows, func() bool {
		db := rowOf(rows, "db")
		return len(db) == 6 && db[4] == "expired"
	})
	assert.GreaterOrEqual(t, time.Now().UnixMilli(), l2.Deadline-1000, "not before the deadline (1s for clock rounding)")

	// A holder whose clock runs 30 s ahead writes a 20 s lease: the page
	// shows at most its span left, not the 50 s to its deadline.
	now := time.Now()
	m.LeaseAt("skewed", "s1", now.Add(30*time.Second), now.Add(50*time.Second))
	page.waitFor("the page shows skewed's lease", table, &rows, func() bool {
		r := rowOf(rows, "skewed")
		return len(r) == 6 && r[1] == "s1"
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

// live matches a time left the page shows on a live lease.
var live = regexp.MustCompile(`^\d+(\.\d)?s$|^\d+m\d\ds$|^\d+h\d\dm$`)

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

// statusLog, run in a page before its own scripts, keeps every text the
// page's status line shows in window.__statuses.
const statusLog = `window.__statuses = [];
new MutationObserver(() => {
  const s = document.getElementById("status");
  if (s && window.__statuses[window.__statuses.length - 1] !== s.textContent) window.__statuses.push(s.textContent);
}).observe(document, {subtree: true, childList: true, characterData: true});`

// openWatching opens url in a new tab after arranging for script to run
// in it before the page's own scripts.
func (b *browser) openWatching(url, script string) *tab {
	b.t.Helper()
	p := b.open("about:blank")
	ctx := testCtx(b.t)
	_, err := b.call(ctx, p.session, "Page.enable", nil)
	require.NoError(b.t, err)
	_, err = b.call(ctx, p.session, "Page.addScriptToEvaluateOnNewDocument", map[string]any{"source": script})
	require.NoError(b.t, err)
	_, err = b.call(ctx, p.session, "Page.navigate", map[string]any{"url": url})
	require.NoError(b.t, err)
	return p
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

// TestPageTimeline: with a history, the page names the cluster and topic
// it reads, says when the data was last current, and shows what the test
// does to role db (m1's lease runs out and m2 takes over; m2 releases and
// m3 takes over; m3 is made to step down and m1 takes over; m2 takes the
// role from m1's live lease) three ways, each checked as rendered:
//
//   - the timeline: one lane per role, the holders named in their
//     segments and beside the lane, in colors that are not the red of the
//     failover marks, a mark of its own shape per cause that does not
//     shrink away, the last span of m1's lease, which ran out unrenewed,
//     drawn apart from holding, and an axis that agrees with the heading
//     for each window (1 min, 15 min, 1 h);
//   - the members: who holds what, who waits for what;
//   - the history of each role: from -> to, token, cause, unheld time.
//
// Then the cluster goes away: the outage shows as a grey band and a
// banner, and the lease that runs out meanwhile as not seen, never as a
// failover. KROLE_SCREENSHOT=file.png saves a screenshot of the page
// before the outage.
func TestPageTimeline(t *testing.T) {
	bin := chromiumBinary()
	if bin == "" {
		t.Skip("chromium not installed: apt-get install chromium (or set KROLE_CHROMIUM to a Chrome/Chromium binary)")
	}
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	m := c.Members(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	_, err := m.Transport.RegisterValue(ctx, "db", "m1", "10.0.0.1:5432")
	require.NoError(t, err)
	_, err = m.Transport.RegisterValue(ctx, "db", "m2", "10.0.0.2:5432")
	require.NoError(t, err)
	m.Register("db", "m3")
	l1 := m.LeaseValue("db", "m1", 2*time.Second, "10.0.0.1:5432")
	m.Register("queue", "q1")
	m.Lease("queue", "q1", time.Hour)

	v := runView(t, c)
	caughtUp(t, v)
	hist := NewHistory(time.Hour, 0, nil)
	hctx, stopHist := context.WithCancel(context.Background())
	histDone := make(chan error, 1)
	histStarted := time.Now()
	go func() { histDone <- hist.Run(hctx, v) }()
	t.Cleanup(func() { stopHist(); <-histDone })
	base, stop := context.WithCancel(context.Background())
	srv := httptest.NewUnstartedServer(newHandler(t, v, Options{History: hist, Source: Source{Brokers: c.Config.Brokers, Topic: c.Config.Topic}}))
	srv.Config.BaseContext = func(net.Listener) context.Context { return base }
	srv.Start()
	t.Cleanup(srv.Close)
	t.Cleanup(stop)

	b := startChromium(t, bin)
	page := b.open(srv.URL + "/")
	_, err = b.call(ctx, page.session, "Emulation.setDeviceMetricsOverride",
		map[string]any{"width": 1400, "height": 900, "deviceScaleFactor": 1, "mobile": false})
	require.NoError(t, err)

	var src string
	page.waitFor("the page names its source", `document.getElementById("source").textContent`, &src, func() bool {
		return src == "topic "+c.Config.Topic+" at "+strings.Join(c.Config.Brokers, ", ")
	})
	var cur string
	page.waitFor("the page says the data is current and the cluster answers", `document.getElementById("current").textContent`, &cur, func() bool {
		return strings.HasPrefix(cur, "data current as of ") && strings.Contains(cur, "; cluster answering (last answer ")
	})

	// What the test does to db: each step waits until the page shows it.
	const segs = `[...document.querySelectorAll('#timeline .track[data-role="db"] .seg:not(.tail):not(.nohist)')].map(s => s.dataset.member || s.dataset.kind)`
	var got []string
	page.waitFor("m1's lease runs out: unheld after m1", segs, &got, func() bool { return len(got) >= 2 && got[len(got)-1] == "unheld" })
	assert.Equal(t, []string{"m1", "unheld"}, got)
	l2 := m.LeaseValue("db", "m2", time.Hour, "10.0.0.2:5432") // failover
	page.waitFor("m2 holds after the gap", segs, &got, func() bool { return len(got) == 3 })
	require.NoError(t, leaseErr(m.Transport.WriteLease(ctx, "db", l2.Token, codec.ReleaseLease("m2", l2.Token)))) // m2 leaves
	require.NoError(t, m.Transport.Deregister(ctx, "db", "m2"))
	page.waitFor("m2 released", segs, &got, func() bool { return len(got) == 4 })
	l3 := m.Lease("db", "m3", time.Hour) // handover
	page.waitFor("m3 holds", segs, &got, func() bool { return len(got) == 5 })
	require.NoError(t, m.Transport.Deregister(ctx, "db", "m3")) // the operator's step-down: m3's registration goes first
	var members [][]string
	const memberRows = `[...document.querySelectorAll("#members tr")].map(tr => [...tr.cells].map(td => td.textContent))`
	page.waitFor("m3 is no longer a candidate", memberRows, &members, func() bool {
		for _, r := range members {
			if len(r) == 3 && r[0] == "m3" {
				return r[1] == "db" && r[2] == "-"
			}
		}
		return false
	})
	// The member releases once its view shows the removal; the history
	// tells a step-down from a member leaving by seeing the removal
	// first, so the test waits for that too.
	require.Eventually(t, func() bool {
		hist.mu.Lock()
		defer hist.mu.Unlock()
		hd := hist.holding["db"]
		return hd != nil && hd.deregistered
	}, 30*time.Second, 10*time.Millisecond, "the history sees m3's registration removed")
	require.NoError(t, leaseErr(m.Transport.WriteLease(ctx, "db", l3.Token, codec.ReleaseLease("m3", l3.Token)))) // then its release
	m.Register("db", "m3")
	page.waitFor("m3 released", segs, &got, func() bool { return len(got) == 6 })
	l4 := m.Lease("db", "m1", time.Hour) // after the step-down
	page.waitFor("m1 holds", segs, &got, func() bool { return len(got) == 7 })
	m.Register("db", "m2")
	l5 := m.Lease("db", "m2", time.Hour) // a new token while m1's lease is live: m1 is fenced
	page.waitFor("m2 holds", segs, &got, func() bool { return len(got) == 8 })
	assert.Equal(t, []string{"m1", "unheld", "m2", "unheld", "m3", "unheld", "m1", "m2"}, got)

	// The timeline: the window was picked for a young history; the axis
	// agrees with the heading.
	type axis struct {
		Head    string   `json:"head"`
		Ticks   []string `json:"ticks"`
		Pressed []string `json:"pressed"`
	}
	const axisExpr = `({head: document.getElementById("timeline-head").textContent,
		ticks: [...document.querySelectorAll("#timeline .tick")].map(t => t.textContent),
		pressed: [...document.querySelectorAll('#window button[aria-pressed="true"]')].map(b => b.textContent)})`
	axes := map[string]axis{
		"1 h":    {Head: "Holders, last 1 h", Ticks: []string{"-60 min", "-45 min", "-30 min", "-15 min", "now"}, Pressed: []string{"1 h"}},
		"15 min": {Head: "Holders, last 15 min", Ticks: []string{"-15 min", "-10 min", "-5 min", "now"}, Pressed: []string{"15 min"}},
		"1 min":  {Head: "Holders, last 1 min", Ticks: []string{"-60 s", "-45 s", "-30 s", "-15 s", "now"}, Pressed: []string{"1 min"}},
	}
	var ax axis
	require.NoError(t, page.eval(ctx, axisExpr, &ax))
	require.Len(t, ax.Pressed, 1)
	assert.Equal(t, axes[ax.Pressed[0]], ax, "the window picked: heading, axis and button agree")
	if time.Since(histStarted) < 50*time.Second {
		assert.Equal(t, "1 min", ax.Pressed[0], "the shortest window that shows the whole history")
	}
	// Names: in the segments (where they fit: m2's, the latest, does),
	// beside each lane (the holder now), and as visible text.
	var names struct {
		Labels []string `json:"labels"`
		Now    []string `json:"now"`
		Text   string   `json:"text"`
	}
	page.waitFor("m2's name fits its growing segment", `({
		labels: [...document.querySelectorAll('#timeline .track[data-role="db"] .seg.held:not(.narrow) .seg-label')].map(l => l.textContent),
		now: [...document.querySelectorAll("#timeline .lane-now")].map(n => n.dataset.role + " " + n.textContent),
		text: document.getElementById("timeline").innerText})`, &names, func() bool { return slices.Contains(names.Labels, "m2") })
	assert.Equal(t, []string{"db now: m2", "queue now: q1"}, names.Now)
	for _, s := range []string{"db", "queue", "m2", "q1", "now: m2"} {
		assert.Contains(t, names.Text, s, "visible in the timeline")
	}
	// Colors: no holder is drawn in red, the color of failover marks.
	var colors []string
	require.NoError(t, page.eval(ctx, `[...document.querySelectorAll("#timeline .seg.held")].map(s => getComputedStyle(s).backgroundColor)`, &colors))
	require.NotEmpty(t, colors)
	var failRed string
	require.NoError(t, page.eval(ctx, `getComputedStyle(document.querySelector('#timeline .mark.failover i')).borderTopColor`, &failRed))
	assert.Equal(t, "rgb(209, 36, 47)", failRed)
	for _, col := range colors {
		var r, g, bl int
		_, err := fmt.Sscanf(col, "rgb(%d, %d, %d)", &r, &g, &bl)
		require.NoError(t, err, "color %q", col)
		assert.False(t, r > g+60 && r > bl+60, "holder color %s is red or orange", col)
	}
	// Marks: one per change of holder, shaped by cause, none too small to see.
	type mark struct {
		Kind string  `json:"kind"`
		W    float64 `json:"w"`
		H    float64 `json:"h"`
	}
	var marks []mark
	require.NoError(t, page.eval(ctx, `[...document.querySelectorAll('#timeline .track[data-role="db"] .mark')].map(m => {
		const r = m.querySelector("i").getBoundingClientRect(); return {kind: m.dataset.kind, w: r.width, h: r.height}; })`, &marks))
	var kinds []string
	for _, mk := range marks {
		kinds = append(kinds, mk.Kind)
		assert.GreaterOrEqual(t, mk.W, 8.0, "mark %s visible", mk.Kind)
		assert.GreaterOrEqual(t, mk.H, 8.0, "mark %s visible", mk.Kind)
	}
	assert.Equal(t, []string{"failover", "handover", "step-down", "fenced"}, kinds)
	// m1's lease ran out unrenewed: its last span is drawn apart from
	// holding.
	var tails []string
	require.NoError(t, page.eval(ctx, `[...document.querySelectorAll('#timeline .track[data-role="db"] .seg.tail')].map(s => s.dataset.member + " " + s.dataset.kind)`, &tails))
	assert.Equal(t, []string{"m1 unrenewed"}, tails)

	// The members: who holds what, who waits for what, with its rank.
	page.waitFor("the members view", memberRows, &members, func() bool { return len(members) == 4 })
	assert.Equal(t, [][]string{
		{"m1", "nothing", "db #1"},
		{"m2", "db", "-"},
		{"m3", "nothing", "db #2"},
		{"q1", "queue", "-"},
	}, members)

	// The history of db, newest first: from -> to, token, cause, unheld.
	const histRows = `[...document.querySelectorAll('.role-history[data-role="db"] tbody tr')].map(tr => [...tr.cells].map(td => td.textContent))`
	var hrows [][]string
	page.waitFor("db's history", histRows, &hrows, func() bool { return len(hrows) == 5 })
	col := func(i int) []string {
		var out []string
		for _, r := range hrows {
			out = append(out, r[i])
		}
		return out
	}
	assert.Equal(t, []string{"m1\u2192m2", "m3\u2192m1", "m2\u2192m3", "m1\u2192m2", "m1"}, col(1), "from -> to")
	assert.Equal(t, []string{l5.Token.String(), l4.Token.String(), l3.Token.String(), l2.Token.String(), l1.Token.String()}, col(2), "tokens")
	causes := col(3)
	assert.Equal(t, []string{"fenced", "step-down", "handover"}, causes[:3])
	assert.Equal(t, "failover", causes[3], "the page does not judge how long the holder was silent")
	assert.Equal(t, "holder when the server started", causes[4])
	unheld := col(4)
	assert.Equal(t, "none", unheld[0], "a fenced holder's role was never unheld")
	for _, u := range unheld[1:4] {
		assert.Regexp(t, `^\d+ ms$|^\d+\.\ds$|^\d+s$|^\d+m\d\ds$`, u)
	}

	// The window: 1 h, 15 min and back to 1 min; heading, axis and the
	// button pressed agree.
	for _, w := range []string{"1 h", "15 min", "1 min"} {
		var ok bool
		require.NoError(t, page.eval(ctx, `(() => { const b = [...document.querySelectorAll("#window button")].find(b => b.textContent === "`+w+`"); b.click(); return true; })()`, &ok))
		require.NoError(t, page.eval(ctx, axisExpr, &ax))
		assert.Equal(t, axes[w], ax, "window %s", w)
	}
	var hash string
	require.NoError(t, page.eval(ctx, `location.hash`, &hash))
	assert.Equal(t, "#window=1m", hash, "the window chosen is in the address")

	// A holder that renews every 300 ms, then stops: while its lease
	// runs (as its row says), it is drawn holding, never as silent, and
	// its lane names it alone; once the row says the lease ran out, the
	// lease's last span is drawn apart from holding.
	m.Register("quiet", "s1")
	ls := m.Lease("quiet", "s1", 4*time.Second)
	for range 5 {
		time.Sleep(300 * time.Millisecond)
		now := time.Now()
		l, err := codec.NewLease("s1", ls.Token, now.UnixMilli(), now.Add(4*time.Second).UnixMilli())
		require.NoError(t, err)
		require.NoError(t, leaseErr(m.Transport.WriteLease(ctx, "quiet", ls.Token, l)))
	}
	stoppedAt := time.Now()
	var quiet struct {
		Tail []string `json:"tail"`
		Now  string   `json:"now"`
		Left string   `json:"left"`
	}
	const quietExpr = `({
		tail: [...document.querySelectorAll('#timeline .track[data-role="quiet"] .seg.tail')].map(s => s.dataset.member + " " + s.dataset.kind),
		now: document.querySelector('#timeline .lane-now[data-role="quiet"]')?.textContent ?? "",
		left: document.querySelector('#roles tr[data-role="quiet"] td.left')?.textContent ?? ""})`
	page.waitFor("s1 drawn holding quiet", quietExpr, &quiet, func() bool { return quiet.Now != "" })
	if time.Since(stoppedAt) < 2*time.Second { // the lease surely runs: not on a slow machine
		assert.Empty(t, quiet.Tail, "a live lease is not drawn as unrenewed")
		assert.Equal(t, "now: s1", quiet.Now)
		assert.Regexp(t, live, quiet.Left)
	}
	page.waitFor("s1's lease ran out: its last span drawn apart", quietExpr, &quiet, func() bool { return len(quiet.Tail) > 0 })
	assert.Equal(t, []string{"s1 unrenewed"}, quiet.Tail)
	assert.Equal(t, "expired", quiet.Left)
	assert.GreaterOrEqual(t, time.Since(stoppedAt), 3*time.Second, "not before the lease's span since its last renewal")

	if path := os.Getenv("KROLE_SCREENSHOT"); path != "" {
		screenshot(t, b, page, path)
	}

	// The outage: a holder that renews every half second until the
	// cluster goes away; its lease runs out while the server cannot
	// read the cluster.
	if c.Fake == nil {
		t.Log("KROLE_BROKERS names an outside cluster: the test cannot stop it")
		return
	}
	m.Register("beat", "b1")
	lb := m.Lease("beat", "b1", 3*time.Second)
	renewing, stopRenewing := context.WithCancel(context.Background())
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		for renewing.Err() == nil {
			now := time.Now()
			l, _ := codec.NewLease("b1", lb.Token, now.UnixMilli(), now.Add(3*time.Second).UnixMilli())
			wctx, cancel := context.WithTimeout(renewing, time.Second)
			_, _ = m.Transport.WriteLease(wctx, "beat", lb.Token, l)
			cancel()
			select {
			case <-renewing.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { stopRenewing(); <-renewed })
	page.waitFor("beat held by b1", `document.querySelector('#timeline .lane-now[data-role="beat"]')?.textContent ?? ""`, &src, func() bool { return src == "now: b1" })
	c.Fake.Close()
	var banner string
	page.waitFor("the outage banner", `document.getElementById("outage").hidden ? "" : document.getElementById("outage").textContent`, &banner, func() bool {
		return strings.HasPrefix(banner, "Outage: the cluster has not answered this server since ")
	})
	var bands []string
	page.waitFor("a grey band across every lane", `[...document.querySelectorAll("#timeline .band")].map(b => b.parentElement.dataset.role)`, &bands, func() bool { return len(bands) == 4 })
	assert.Equal(t, []string{"beat", "db", "queue", "quiet"}, bands)
	var band string
	require.NoError(t, page.eval(ctx, `getComputedStyle(document.querySelector("#timeline .band")).backgroundColor`, &band))
	assert.Equal(t, "rgba(140, 149, 159, 0.35)", band, "grey")
	page.waitFor("beat's lease runs out, drawn as not seen", `[...document.querySelectorAll('#timeline .track[data-role="beat"] .seg:not(.tail):not(.nohist)')].map(s => s.dataset.member || s.dataset.kind)`, &got, func() bool {
		return len(got) == 2
	})
	assert.Equal(t, []string{"b1", "unseen"}, got)
	require.NoError(t, page.eval(ctx, `[...document.querySelectorAll("#timeline .mark")].map(m => m.dataset.kind)`, &kinds))
	assert.Equal(t, []string{"failover", "handover", "step-down", "fenced"}, kinds, "no mark for the outage")
	page.waitFor("beat's history", `[...document.querySelectorAll('.role-history[data-role="beat"] tbody tr')].map(tr => [...tr.cells].map(td => td.textContent))`, &hrows, func() bool {
		return len(hrows) == 3
	})
	assert.Equal(t, []string{"b1\u2192none", "-", "lease ran out during the outage"}, hrows[0][1:4])
	rest := [][]string{hrows[1][1:4], hrows[2][1:4]} // by time: the outage began at the last contact, maybe before b1 was noted
	assert.ElementsMatch(t, [][]string{{"cluster unreachable", "", "outage"}, {"none\u2192b1", lb.Token.String(), "elected"}}, rest)
	for _, r := range hrows[1:] {
		if r[1] == "cluster unreachable" {
			assert.Equal(t, "ongoing", r[4])
		}
	}
}

// screenshot saves the page as a PNG at path.
func screenshot(t *testing.T, b *browser, page *tab, path string) {
	t.Helper()
	res, err := b.call(testCtx(t), page.session, "Page.captureScreenshot", map[string]any{"format": "png"})
	require.NoError(t, err)
	var shot struct {
		Data []byte `json:"data"` // base64 in JSON: decoded by encoding/json
	}
	require.NoError(t, json.Unmarshal(res, &shot))
	require.NoError(t, os.WriteFile(path, shot.Data, 0o644))
}

// manyRoles returns a table of n roles, role-0000 on: each held for an
// hour by one of seven members (m-0 to m-6), with that member and the
// next as candidates.
func manyRoles(n int, now time.Time) *fakeTable {
	f := &fakeTable{caughtUp: true, roles: make(map[codec.Role]rolestate.State, n)}
	for i := range n {
		role := codec.Role(fmt.Sprintf("role-%04d", i))
		holder, next := codec.MemberID(fmt.Sprintf("m-%d", i%7)), codec.MemberID(fmt.Sprintf("m-%d", (i+1)%7))
		l := codec.Lease{Member: holder, Token: codec.Token{ProducerID: int64(1000 + i), Epoch: 1},
			GrantedAt: now.UnixMilli(), Deadline: now.Add(time.Hour).UnixMilli(), Value: fmt.Sprintf("10.0.%d.%d:80", i/256, i%256)}
		f.roles[role] = rolestate.State{Role: role, Lease: &l, LeaseOffset: int64(3 * i), LeaseSeenAt: now,
			Candidates: []rolestate.Candidate{{Member: holder, Offset: int64(3*i + 1)}, {Member: next, Offset: int64(3*i + 2), Rank: 1}}}
	}
	return f
}

// TestPageManyRoles loads the page over 3,000 roles (with a history) and
// checks that it answers: it shows every role's row, the last one
// included; a change of one role shows in its row and among the members;
// the timeline draws the lanes on screen and those scrolled to, not all
// of them. Values that reach the page from another writer are shown as
// the CLI shows them (codec.PrintableValue): a bidi override quoted and
// escaped, never applied. A candidate whose member session is gone is
// shown as gone.
func TestPageManyRoles(t *testing.T) {
	bin := chromiumBinary()
	if bin == "" {
		t.Skip("chromium not installed: apt-get install chromium (or set KROLE_CHROMIUM to a Chrome/Chromium binary)")
	}
	const n = 3000
	now := time.Now()
	f := manyRoles(n, now)
	forged := f.roles["role-0001"]
	forged.Lease.Value = "\u202egnp.exe" // written by another client: krole refuses it
	gone := f.roles["role-0002"]
	gone.Candidates[1].Session = &rolestate.SessionSeen{Heartbeat: codec.Heartbeat{Member: gone.Candidates[1].Member, End: true}}

	hist := NewHistory(time.Hour, 0, nil)
	hctx, stopHist := context.WithCancel(context.Background())
	histDone := make(chan error, 1)
	go func() { histDone <- hist.Run(hctx, f) }()
	t.Cleanup(func() { stopHist(); <-histDone })
	base, stop := context.WithCancel(context.Background())
	srv := httptest.NewUnstartedServer(newHandler(t, f, Options{History: hist, Source: Source{Brokers: []string{"127.0.0.1:9092"}, Topic: "many.roles"}}))
	srv.Config.BaseContext = func(net.Listener) context.Context { return base }
	srv.Start()
	t.Cleanup(srv.Close)
	t.Cleanup(stop)

	b := startChromium(t, bin)
	page := b.open(srv.URL + "/")
	ctx := testCtx(t)

	const rowOf = `(role => { const tr = document.querySelector('#roles tr[data-role="' + role + '"]'); return tr ? [...tr.cells].map(td => td.textContent) : []; })`
	var last []string
	page.waitFor("the last role's row", rowOf+`("role-2999")`, &last, func() bool { return len(last) == 6 })
	assert.Equal(t, []string{"role-2999", "m-3", "10.0.11.183:80", "3999/1"}, last[:4])
	assert.Regexp(t, live, last[4])
	assert.Equal(t, "m-3, m-4", last[5])
	var count int
	require.NoError(t, page.eval(ctx, `document.querySelectorAll("#roles tr").length`, &count))
	assert.Equal(t, n, count, "a row per role")

	// A value with a bidi override is shown quoted and escaped.
	var row []string
	require.NoError(t, page.eval(ctx, rowOf+`("role-0001")`, &row))
	require.Len(t, row, 6)
	assert.Equal(t, `"\u202egnp.exe"`, row[2])
	assert.Equal(t, codec.PrintableValue(forged.Lease.Value), row[2], "as the CLI prints it")
	// The page's escaping is the CLI's, character for character.
	values := []string{"10.0.0.7:8080", "a b", "zürich-1", "日本", "\u202egnp.exe", "a\u2066b\u2069", "zero\u200bwidth", "\ufeffbom",
		"evil\x1b[2J\a\r\n", "tab\t", "del\x7f", "c1\u0085", `"quoted"`, `back\slash`, "nbsp\u00a0x", "emoji \U0001F600", "tag\U000E0041"}
	in, err := json.Marshal(values)
	require.NoError(t, err)
	var escaped []string
	require.NoError(t, page.eval(ctx, string(in)+`.map(shown)`, &escaped))
	require.Len(t, escaped, len(values))
	for i, v := range values {
		assert.Equal(t, codec.PrintableValue(v), escaped[i], "%q", v)
	}
	// A candidate whose session is gone.
	require.NoError(t, page.eval(ctx, rowOf+`("role-0002")`, &row))
	require.Len(t, row, 6)
	assert.Equal(t, "m-2, m-3 (gone)", row[5])

	// One role changes: its row and the members follow.
	l := codec.Lease{Member: "newcomer", Token: codec.Token{ProducerID: 99999, Epoch: 1}, GrantedAt: now.UnixMilli(), Deadline: now.Add(time.Hour).UnixMilli()}
	f.set(rolestate.State{Role: "role-1500", Lease: &l, LeaseOffset: 1 << 20, LeaseSeenAt: time.Now(),
		Candidates: []rolestate.Candidate{{Member: "newcomer", Offset: 1 << 20}}})
	page.waitFor("role-1500's new holder", rowOf+`("role-1500")`, &row, func() bool { return len(row) == 6 && row[1] == "newcomer" })
	assert.Equal(t, []string{"role-1500", "newcomer", "-", "99999/1"}, row[:4])
	var holds string
	page.waitFor("newcomer among the members", `document.querySelector('#members tr[data-member="newcomer"]')?.cells[1].textContent ?? ""`, &holds, func() bool { return holds == "role-1500" })
	var more string
	require.NoError(t, page.eval(ctx, `document.querySelector('#members tr[data-member="m-0"] .holds .more')?.textContent ?? ""`, &more))
	assert.Equal(t, "and 379 more", more, "m-0 holds 429 roles: 50 chips and a count")

	// The timeline: the lanes on screen, not 3,000 of them.
	type lanes struct {
		Roles []string `json:"roles"`
	}
	const laneExpr = `({roles: [...document.querySelectorAll("#timeline .track")].map(t => t.dataset.role)})`
	var ls lanes
	require.NoError(t, page.eval(ctx, `(document.getElementById("timeline").scrollIntoView(), true)`, new(bool)))
	page.waitFor("the first lanes", laneExpr, &ls, func() bool { return len(ls.Roles) > 0 && ls.Roles[0] == "role-0000" })
	assert.Less(t, len(ls.Roles), 200, "only the lanes near the screen are drawn")
	require.NoError(t, page.eval(ctx, `(() => { const t = document.getElementById("timeline"); scrollTo(0, t.getBoundingClientRect().bottom + scrollY - innerHeight); return true; })()`, new(bool)))
	page.waitFor("the last lane, scrolled to", laneExpr, &ls, func() bool { return slices.Contains(ls.Roles, "role-2999") })
	assert.Less(t, len(ls.Roles), 200)
	var nowText string
	require.NoError(t, page.eval(ctx, `document.querySelector('#timeline .lane-now[data-role="role-2999"]').textContent`, &nowText))
	assert.Equal(t, "now: m-3", nowText)
}

// TestPageTimeToUsable measures, with KROLE_PAGE_ROLES=N, how soon the page
// over N roles is usable: it writes N roles (each held for an hour, with
// two candidates) to a new role topic of the cluster (KROLE_BROKERS, say
// `krole dev`; else an embedded one), serves them as `krole serve` does (a
// view and a history), keeps re-electing one role every 100 ms, and loads
// the page in Chromium. It logs when the last role's row showed, the main
// thread's long tasks (over 50 ms) until 10 s after load, and how long
// an evaluation in the page took to answer then. A measurement, not a
// test: it skips without KROLE_PAGE_ROLES.
func TestPageTimeToUsable(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("KROLE_PAGE_ROLES"))
	if n <= 0 {
		t.Skip("a measurement: set KROLE_PAGE_ROLES=N (and KROLE_BROKERS to use an outside cluster, such as krole dev)")
	}
	bin := chromiumBinary()
	if bin == "" {
		t.Skip("chromium not installed")
	}
	c := testcluster.Start(t, testcluster.Options{Partitions: 12})
	m := c.Members(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	began := time.Now()
	work := make(chan int)
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				role := codec.Role(fmt.Sprintf("role-%05d", i))
				holder, next := codec.MemberID(fmt.Sprintf("m-%d", i%7)), codec.MemberID(fmt.Sprintf("m-%d", (i+1)%7))
				if err := writeRole(ctx, m.Transport, role, holder, next, fmt.Sprintf("10.0.%d.%d:80", i/256%256, i%256)); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("wrote %d roles in %s", n, time.Since(began).Round(time.Millisecond))

	v := runView(t, c)
	require.NoError(t, v.WaitCaughtUp(ctx))
	hist := NewHistory(time.Hour, 0, nil)
	hctx, stopHist := context.WithCancel(context.Background())
	histDone := make(chan error, 1)
	go func() { histDone <- hist.Run(hctx, v) }()
	t.Cleanup(func() { stopHist(); <-histDone })
	base, stop := context.WithCancel(context.Background())
	srv := httptest.NewUnstartedServer(newHandler(t, v, Options{History: hist, Source: Source{Brokers: c.Config.Brokers, Topic: c.Config.Topic}}))
	srv.Config.BaseContext = func(net.Listener) context.Context { return base }
	srv.Start()
	t.Cleanup(srv.Close)
	t.Cleanup(stop)

	// Changes while the page loads: role-00000 passes from member to member.
	churn, stopChurn := context.WithCancel(ctx)
	churned := make(chan int)
	go func() {
		k := 0
		defer func() { churned <- k }()
		for churn.Err() == nil {
			tok, err := m.Transport.AcquireEpoch(churn, "role-00000")
			if err != nil {
				return
			}
			now := time.Now()
			l, _ := codec.NewLease(codec.MemberID(fmt.Sprintf("churn-%d", k%3)), tok, now.UnixMilli(), now.Add(time.Hour).UnixMilli())
			if leaseErr(m.Transport.WriteLease(churn, "role-00000", tok, l)) == nil {
				k++
			}
			select {
			case <-churn.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { stopChurn(); <-churned })

	last := fmt.Sprintf("role-%05d", n-1)
	b := startChromium(t, bin)
	page := b.openWatching(srv.URL+"/", `window.__long = [];
new PerformanceObserver(l => { for (const e of l.getEntries()) window.__long.push([Math.round(e.startTime), Math.round(e.duration)]); }).observe({type: "longtask", buffered: true});
new MutationObserver((_, o) => {
  if (!window.__firstRow && document.querySelector('#roles tr')) window.__firstRow = performance.now();
  if (document.querySelector('#roles tr[data-role="`+last+`"]')) { window.__lastRow = performance.now(); o.disconnect(); }
}).observe(document, {subtree: true, childList: true});`)
	var lastRow float64
	page.waitFor("the last role's row", `window.__lastRow || 0`, &lastRow, func() bool { return lastRow > 0 })
	time.Sleep(10*time.Second - time.Duration(lastRow)*time.Millisecond)
	asked := time.Now()
	var rowsShown int
	require.NoError(t, page.eval(ctx, `document.querySelectorAll("#roles tr").length`, &rowsShown))
	answered := time.Since(asked)
	var long [][2]float64
	require.NoError(t, page.eval(ctx, `window.__long`, &long))
	var firstRow float64
	require.NoError(t, page.eval(ctx, `window.__firstRow`, &firstRow))
	var holder string
	require.NoError(t, page.eval(ctx, `document.querySelector('#roles tr[data-role="role-00000"]').cells[1].textContent`, &holder))
	assert.Equal(t, n, rowsShown)
	assert.True(t, strings.HasPrefix(holder, "churn-"), "the changes show: %q", holder)
	longest := 0.0
	for _, l := range long {
		longest = max(longest, l[1])
	}
	t.Logf("%d roles: first row shown %.0f ms, last row %.0f ms after navigation; longest task %.0f ms; long tasks (start ms, duration ms) until 10 s: %v; an evaluation then answered in %s",
		n, firstRow, lastRow, longest, long, answered.Round(time.Millisecond))
}

// writeRole registers holder and next for role and makes holder its holder
// for an hour, with value.
func writeRole(ctx context.Context, tr *fencing.BrokerTransport, role codec.Role, holder, next codec.MemberID, value string) error {
	if _, err := tr.Register(ctx, role, holder); err != nil {
		return err
	}
	if _, err := tr.Register(ctx, role, next); err != nil {
		return err
	}
	tok, err := tr.AcquireEpoch(ctx, role)
	if err != nil {
		return err
	}
	now := time.Now()
	l, err := codec.NewLease(holder, tok, now.UnixMilli(), now.Add(time.Hour).UnixMilli())
	if err != nil {
		return err
	}
	l.Value = value
	return leaseErr(tr.WriteLease(ctx, role, tok, l))
}

// leaseErr is the error of a WriteLease, for tests that do not look at
// the offset.
func leaseErr(_ int64, err error) error { return err }
