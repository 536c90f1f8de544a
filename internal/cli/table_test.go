package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/server"
	"github.com/krabka/krole/internal/testcluster"
	"github.com/krabka/krole/rolestate"
)

// fixtureRoles writes: db with a lease of m1 and candidates m1, m2; cron
// with a lease and no candidate; queue with a candidate and no lease.
func fixtureRoles(t *testing.T, c *testcluster.Cluster) (m *testcluster.Members, dbLease codec.Lease, dbOffsets [2]int64) {
	t.Helper()
	m = c.Members(t)
	dbOffsets[0] = m.Register("db", "m1")
	dbOffsets[1] = m.Register("db", "m2")
	dbLease = m.Lease("db", "m1", time.Hour)
	m.Lease("cron", "x1", time.Hour)
	m.Register("queue", "q1")
	return m, dbLease, dbOffsets
}

// firstLeaseOffset returns the offset of role's first lease under tok:
// the fencing number of that holding.
func firstLeaseOffset(t *testing.T, c *testcluster.Cluster, role codec.Role, tok codec.Token) int64 {
	t.Helper()
	for _, r := range readRole(t, c.Config, role) {
		if l := r.Record.Lease; l != nil && l.Token == tok {
			return r.Offset
		}
	}
	t.Fatalf("role %s has no lease under token %s", role, tok)
	return -1
}

func tableJSON(t *testing.T, c *testcluster.Cluster, roles ...string) (string, []map[string]any) {
	t.Helper()
	r := runOn(t, c, append(append([]string{"table"}, roles...), "-o", "json")...)
	requireOK(t, r)
	var rows []map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.Stdout), &rows), r.Stdout)
	return r.Stdout, rows
}

func keys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestTableJSON(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{})
	_, l, offs := fixtureRoles(t, c)

	out, rows := tableJSON(t, c)
	assert.Equal(t, 1, strings.Count(out, "\n"), "one JSON document")
	require.Len(t, rows, 3)
	for i, role := range []string{"cron", "db", "queue"} {
		assert.Equal(t, role, rows[i]["role"], "role order")
		assert.ElementsMatch(t, []string{"role", "holder", "candidates"}, keys(rows[i]))
	}
	assert.Equal(t, []any{}, rows[0]["candidates"], "a lease without candidates: [] not null")
	assert.Nil(t, rows[2]["holder"], "candidates without a lease: holder null")
	assert.Contains(t, rows[2], "holder")

	var typed []server.Row
	require.NoError(t, json.Unmarshal([]byte(out), &typed))
	db := typed[1]
	h := rows[1]["holder"].(map[string]any)
	assert.ElementsMatch(t, []string{"member", "token", "fence", "granted_at", "deadline", "vouched_at", "expired", "left_ms"}, keys(h))
	assert.ElementsMatch(t, []string{"producer_id", "epoch"}, keys(h["token"].(map[string]any)))
	fence := firstLeaseOffset(t, c, "db", l.Token)
	assert.Greater(t, fence, offs[1], "the lease follows the registrations")
	assert.Equal(t, &server.Holder{Member: "m1", Token: l.Token, Fence: fence, GrantedAt: l.GrantedAt, Deadline: l.Deadline, VouchedAt: l.GrantedAt, Expired: false, LeftMS: db.Holder.LeftMS}, db.Holder)
	assert.LessOrEqual(t, db.Holder.LeftMS, time.Hour.Milliseconds())
	assert.Contains(t, out, `"producer_id":`+jsonInt(l.Token.ProducerID), "the token's int64 in full")
	require.Len(t, db.Candidates, 2)
	for i, m := range []codec.MemberID{"m1", "m2"} {
		cand := rows[1]["candidates"].([]any)[i].(map[string]any)
		assert.ElementsMatch(t, []string{"member", "offset", "registered_at", "rank"}, keys(cand))
		assert.Equal(t, rolestate.Candidate{Member: m, Offset: offs[i], RegisteredAt: db.Candidates[i].RegisteredAt, Rank: i}, db.Candidates[i], "rank order")
		assert.InDelta(t, time.Now().UnixMilli(), db.Candidates[i].RegisteredAt, float64(time.Hour.Milliseconds()))
	}

	// Named roles: sorted, once each; one the table does not have shows
	// with no holder and no candidates.
	_, named := tableJSON(t, c, "queue", "nosuch", "db", "queue")
	require.Len(t, named, 3)
	// left_ms is each run's own judgement, from when its view saw the
	// lease (after verifying its author): compared apart.
	leftA, leftB := rows[1]["holder"].(map[string]any)["left_ms"], named[0]["holder"].(map[string]any)["left_ms"]
	assert.InDelta(t, leftA, leftB, float64(time.Minute.Milliseconds()))
	delete(rows[1]["holder"].(map[string]any), "left_ms")
	delete(named[0]["holder"].(map[string]any), "left_ms")
	assert.Equal(t, rows[1], named[0])
	assert.Equal(t, map[string]any{"role": "nosuch", "holder": nil, "candidates": []any{}}, named[1])
	assert.Equal(t, rows[2], named[2])
}

func jsonInt(n int64) string { b, _ := json.Marshal(n); return string(b) }

func TestTableText(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{})
	m, l, _ := fixtureRoles(t, c)
	m.LeaseAt("short", "s1", time.Now().Add(-3*time.Second), time.Now().Add(-2*time.Second))
	rl := m.Lease("resigned", "r1", time.Hour)
	require.NoError(t, leaseErr(m.Transport.WriteLease(m.Context(), "resigned", rl.Token, codec.ReleaseLease("r1", rl.Token))))

	r := runOn(t, c, "table", "nosuch")
	requireOK(t, r)
	assert.Regexp(t, `^ROLE\s+HOLDER\s+VALUE\s+TOKEN\s+LEFT\s+CANDIDATES\nnosuch\s+-\s+-\s+-\s+none\s+-\n$`, r.Stdout)

	r = runOn(t, c, "table")
	requireOK(t, r)
	lines := strings.Split(strings.TrimRight(r.Stdout, "\n"), "\n")
	require.Len(t, lines, 6, r.Stdout)
	// An hour's lease: a view credits a lease with rolestate.MaxLeaseSpan
	// at most.
	assert.Regexp(t, `^cron\s+x1\s+-\s+\d+/\d+\s+(9m[0-5]\ds|10m00s)\s+-$`, lines[1])
	assert.Regexp(t, `^db\s+m1\s+-\s+`+l.Token.String()+`\s+(9m[0-5]\ds|10m00s)\s+m1, m2$`, lines[2])
	assert.Regexp(t, `^queue\s+-\s+-\s+-\s+none\s+q1$`, lines[3])
	assert.Regexp(t, `^resigned\s+r1\s+-\s+\d+/\d+\s+expired \(released\)\s+-$`, lines[4])
	// Expired by its holder's clock two seconds ago (more than
	// liveness.ClockTolerance), a 1s lease, no renewal within half of
	// it: expired, although this view read it only now.
	assert.Regexp(t, `^short\s+s1\s+-\s+\d+/\d+\s+expired\s+-$`, lines[5])
	assert.Equal(t, strings.Index(lines[0], "LEFT"), strings.Index(lines[3], "none"), "columns align")
}

func TestTableEmptyAndErrors(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{})
	r := runOn(t, c, "table")
	requireOK(t, r)
	assert.Equal(t, "topic "+c.Config.Topic+" has no roles\n", r.Stdout)
	r = runOn(t, c, "table", "-o", "json")
	requireOK(t, r)
	assert.Equal(t, "[]\n", r.Stdout)

	r = runOn(t, c, "table", "db", "bad/role")
	assertOneLineError(t, r, ExitUsage)
	assert.Contains(t, r.Stderr, `krole: invalid role "bad/role": 1-128 characters of`)
	r = runOn(t, c, "table", "--timeout", "-1s")
	assertOneLineError(t, r, ExitUsage)
	r = runOn(t, c, "table", "--changes")
	assertOneLineError(t, r, ExitUsage)
	assert.Contains(t, r.Stderr, "krole: --changes needs --watch")

	r = run(t, "table", "--brokers", "127.0.0.1:1")
	assertOneLineError(t, r, ExitFailure)
	assert.Contains(t, r.Stderr, "krole: no broker answered at 127.0.0.1:1")
	r = run(t, "table", "--brokers", strings.Join(c.Config.Brokers, ","), "--topic", "no.such.topic")
	assertOneLineError(t, r, ExitFailure)
	assert.Contains(t, r.Stderr, "topic no.such.topic does not exist")
}

// background is a long-running command run in-process: its stdout is
// read line by line, and cancelling its context stops it, as SIGINT does.
type background struct {
	t      *testing.T
	cancel context.CancelFunc
	done   chan int
	lines  chan string
	stderr *testcluster.SyncBuffer
	code   *int
}

func startBackground(t *testing.T, args ...string) *background {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	outR, outW := io.Pipe()
	b := &background{t: t, cancel: cancel, done: make(chan int, 1), lines: make(chan string, 1000), stderr: &testcluster.SyncBuffer{}}
	done := startApp(t, ctx, args, outW, b.stderr)
	go func() {
		code := <-done
		_ = outW.Close()
		b.done <- code
	}()
	go func() {
		defer close(b.lines)
		sc := bufio.NewScanner(outR)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			b.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() { b.stop() })
	return b
}

// line returns the next line of stdout; it fails the test when the command
// ends first or prints nothing within a minute.
func (b *background) line(what string) string {
	b.t.Helper()
	select {
	case l, ok := <-b.lines:
		require.True(b.t, ok, "%s: the command ended; stderr: %s", what, b.stderr.String())
		return l
	case <-time.After(time.Minute):
		require.FailNow(b.t, "timed out", "%s; stderr: %s", what, b.stderr.String())
	}
	return ""
}

// stop cancels the command and returns its exit code.
func (b *background) stop() int {
	b.t.Helper()
	if b.code != nil {
		return *b.code
	}
	b.cancel()
	select {
	case code := <-b.done:
		b.code = &code
		for range b.lines {
		}
		return code
	case <-time.After(time.Minute):
		require.FailNow(b.t, "the command did not stop within a minute of its context ending", "stderr: %s", b.stderr.String())
	}
	return -1
}

func rowOf(t *testing.T, line string) server.Row {
	t.Helper()
	var r server.Row
	require.NoError(t, json.Unmarshal([]byte(line), &r), line)
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(line), &m))
	assert.ElementsMatch(t, []string{"role", "holder", "candidates"}, keys(m), "the row shape")
	return r
}

// TestTableWatchPipe: to a pipe, --watch prints the current rows, then one
// JSON line per change, and a line when a lease it showed as live runs out;
// an interrupt ends it with exit 0.
func TestTableWatchPipe(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{})
	m, l, _ := fixtureRoles(t, c)

	b := startBackground(t, append([]string{"table", "--watch", "db", "fresh"}, clusterFlags(c)...)...)
	first, second := rowOf(t, b.line("db's row")), rowOf(t, b.line("fresh's row"))
	assert.Equal(t, codec.Role("db"), first.Role)
	require.NotNil(t, first.Holder)
	assert.Equal(t, l.Token, first.Holder.Token)
	assert.Equal(t, server.Row{Role: "fresh", Candidates: []rolestate.Candidate{}}, second, "a named role the table does not have")

	// Changes of other roles do not show; db's new holder does, then its
	// lease running out.
	m.Register("queue", "q2")
	l2 := m.Lease("db", "m2", 2*time.Second)
	r := rowOf(t, b.line("db's new holder"))
	assert.Equal(t, codec.Role("db"), r.Role)
	require.NotNil(t, r.Holder)
	assert.Equal(t, &server.Holder{Member: "m2", Token: l2.Token, Fence: m.LastLease, GrantedAt: l2.GrantedAt, Deadline: l2.Deadline, VouchedAt: l2.GrantedAt, LeftMS: r.Holder.LeftMS}, r.Holder)
	assert.LessOrEqual(t, r.Holder.LeftMS, int64(2000))
	off := m.Register("fresh", "f1")
	r = rowOf(t, b.line("fresh's first candidate"))
	assert.Equal(t, server.Row{Role: "fresh", Candidates: []rolestate.Candidate{{Member: "f1", Offset: off, RegisteredAt: r.Candidates[0].RegisteredAt}}}, r)
	r = rowOf(t, b.line("db's lease runs out"))
	assert.Equal(t, codec.Role("db"), r.Role)
	require.NotNil(t, r.Holder)
	assert.True(t, r.Holder.Expired)
	assert.GreaterOrEqual(t, time.Now().UnixMilli(), l2.Deadline)

	assert.Equal(t, ExitOK, b.stop(), "stderr: %s", b.stderr.String())
	assert.NotContains(t, b.stderr.String(), "krole:", "no error")
}

// notes on stderr when the cluster stops answering, and keeps running.
func TestTableWatchSaysWhenTheClusterIsUnreachable(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{})
	c.RequireFake(t)
	fixtureRoles(t, c)
	b := startBackground(t, append([]string{"table", "--watch", "db"}, clusterFlags(c)...)...)
	assert.Equal(t, codec.Role("db"), rowOf(t, b.line("db's row")).Role)
	assert.NotContains(t, b.stderr.String(), "unreachable")

	c.Fake.Close()
	require.Eventually(t, func() bool { return strings.Contains(b.stderr.String(), "krole table: cluster unreachable since ") },
		time.Minute, 50*time.Millisecond, "stderr: %s", b.stderr.String())
	assert.Regexp(t, `krole table: cluster unreachable since \d\d:\d\d:\d\d; data as of \d\d:\d\d:\d\d; the rows are the table as of then\n`, b.stderr.String())
	assert.Equal(t, ExitOK, b.stop(), "stderr: %s", b.stderr.String())
}

// TestTableLeftIsTheObservers: a holder whose clock runs 30 s ahead writes
// a 20 s lease; LEFT and left_ms show at most its span, not the 50 s to
// its deadline.
func TestTableLeftIsTheObservers(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{})
	m := c.Members(t)
	now := time.Now()
	l := m.LeaseAt("skewed", "s1", now.Add(30*time.Second), now.Add(50*time.Second))

	_, rows := tableJSON(t, c, "skewed")
	require.Len(t, rows, 1)
	h := rows[0]["holder"].(map[string]any)
	assert.Equal(t, float64(l.Deadline), h["deadline"])
	assert.Equal(t, false, h["expired"])
	assert.LessOrEqual(t, h["left_ms"], float64(20_000))

	r := runOn(t, c, "table", "skewed")
	requireOK(t, r)
	lines := strings.Split(strings.TrimRight(r.Stdout, "\n"), "\n")
	require.Len(t, lines, 2, r.Stdout)
	m2 := regexp.MustCompile(`^skewed\s+s1\s+-\s+\d+/\d+\s+(\d+)(\.\d)?s\s+-$`).FindStringSubmatch(lines[1])
	require.NotNil(t, m2, lines[1])
	secs, err := strconv.Atoi(m2[1])
	require.NoError(t, err)
	assert.LessOrEqual(t, secs, 20, "LEFT: %s", lines[1])
}
