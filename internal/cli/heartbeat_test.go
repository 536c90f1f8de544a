package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/election"
	"github.com/krabka/krole/internal/liveness"
	"github.com/krabka/krole/internal/server"
	"github.com/krabka/krole/internal/testcluster"
	"github.com/krabka/krole/processor"
	"github.com/krabka/krole/rolestate"
)

// hbSpan is the lease of the members of these tests: short, so that
// several spans pass while their holder writes no lease record.
const hbSpan = 2 * time.Second

// startKeeper runs member as a candidate of role with a lease of hbSpan
// and KeepOnExit: stopped by the returned func, it writes neither a
// release nor a session end and keeps its registration, as a SIGKILLed
// member would. elected gets its token when it is elected.
func startKeeper(t *testing.T, c *testcluster.Cluster, member codec.MemberID, role codec.Role) (stop func(), elected <-chan codec.Token) {
	t.Helper()
	el := make(chan codec.Token, 1)
	settings := processor.Settings{LeaseDuration: hbSpan, KeepOnExit: true}
	cfg := c.Config
	cfg.TxnTimeout = settings.WithDefaults().TransactionTimeout
	sess, err := election.New(election.Config{
		Cluster: cfg, Member: member, Roles: []codec.Role{role}, Settings: settings,
		OnEvent: func(e processor.Event) {
			if e.Kind == processor.Elected {
				select {
				case el <- e.Token:
				default:
				}
			}
		},
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = sess.Run(ctx, nil) }()
	stop = func() { cancel(); <-done }
	t.Cleanup(stop)
	return stop, el
}

func awaitToken(t *testing.T, elected <-chan codec.Token) codec.Token {
	t.Helper()
	select {
	case tok := <-elected:
		return tok
	case <-time.After(30 * time.Second):
		require.FailNow(t, "not elected")
	}
	return codec.Token{}
}

// lastBeat returns member's latest heartbeat on the topic.
func lastBeat(t *testing.T, c *testcluster.Cluster, member codec.MemberID) codec.Heartbeat {
	t.Helper()
	beats := readSession(t, c.Config, member)
	require.NotEmpty(t, beats)
	hb := beats[len(beats)-1].Record.Heartbeat
	require.NotNil(t, hb)
	return *hb
}

// TestHolderRenewedByHeartbeatsIsLive: a holder whose lease record is
// several spans old, renewed by its member session's heartbeats alone,
// shows live with most of a span left and a recent last renewal in
// every answer: table (JSON and text), records, describe, serve's
// /v1/roles and history; table --watch prints no line for its renewals,
// and one when it stops.
func TestHolderRenewedByHeartbeatsIsLive(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	const role = "db"
	stop, elected := startKeeper(t, c, "y1", role)
	tok := awaitToken(t, elected)
	lease := lastLease(readRole(t, c.Config, role))
	require.NotNil(t, lease)
	b, url := startServe(t, c)
	defer b.stop()
	w := startBackground(t, append([]string{"table", "--watch", "-o", "json", role}, clusterFlags(c)...)...)
	var first server.Row
	require.NoError(t, json.Unmarshal([]byte(w.line("db's first row")), &first))
	require.NotNil(t, first.Holder)
	require.False(t, first.Holder.Expired)

	// Three spans past the lease record's own deadline.
	time.Sleep(time.Until(time.UnixMilli(lease.Deadline).Add(3 * hbSpan)))
	require.Equal(t, lease, lastLease(readRole(t, c.Config, role)), "no lease record since: heartbeats alone renewed it")
	minLeft := (hbSpan / 2).Milliseconds()

	_, rows := tableJSON(t, c, role)
	require.Len(t, rows, 1)
	h := rows[0]["holder"].(map[string]any)
	assert.Equal(t, false, h["expired"], "table: live")
	assert.Greater(t, h["left_ms"].(float64), float64(minLeft), "table: most of a span left, from the latest heartbeat")
	assert.Greater(t, h["vouched_at"].(float64), float64(lease.Deadline), "table: renewed by a heartbeat after the lease's deadline")
	assert.Equal(t, float64(lease.GrantedAt), h["granted_at"], "granted_at stays the lease record's")

	r := runOn(t, c, "table", role)
	requireOK(t, r)
	m := regexp.MustCompile(`(?m)^db\s+y1\s+-\s+` + tok.String() + `\s+(\d+\.\d)s\s+y1$`).FindStringSubmatch(r.Stdout)
	require.NotNil(t, m, r.Stdout)
	left, err := strconv.ParseFloat(m[1], 64)
	require.NoError(t, err)
	assert.Greater(t, left, hbSpan.Seconds()/2, "LEFT: most of a span")

	r = runOn(t, c, "records", role, "-o", "json")
	requireOK(t, r)
	var recs []map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.Stdout), &recs))
	var newest map[string]any
	for _, rec := range recs {
		if rec["kind"] == "lease" {
			newest = rec
		}
	}
	require.NotNil(t, newest, r.Stdout)
	assert.Equal(t, true, newest["live"], "records: the newest lease is live")
	assert.Greater(t, newest["vouched_at"].(float64), float64(lease.Deadline))
	assert.Greater(t, newest["renewed_until"].(float64), float64(time.Now().UnixMilli()-liveness.ClockTolerance.Milliseconds()))
	assert.Greater(t, newest["left_ms"].(float64), float64(minLeft))
	assert.Equal(t, float64(lease.Deadline), newest["deadline"], "the record's own deadline, as written")
	r = runOn(t, c, "records", role)
	requireOK(t, r)
	assert.Regexp(t, `(?m)^\d+\s+lease \(live\)\s+y1\s+`+tok.String()+`\s+.*\(in \d+s\) by heartbeat$`, r.Stdout)

	r = runOn(t, c, "describe", role, "-o", "json")
	requireOK(t, r)
	var d struct {
		Lease struct {
			State     string `json:"state"`
			LeftMS    int64  `json:"left_ms"`
			VouchedAt int64  `json:"vouched_at"`
		} `json:"lease"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.Stdout), &d))
	assert.Equal(t, "live", d.Lease.State)
	assert.Greater(t, d.Lease.LeftMS, minLeft)
	assert.Greater(t, d.Lease.VouchedAt, lease.Deadline)

	resp, body := httpGet(t, url+"/v1/roles")
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	var srows []server.Row
	require.NoError(t, json.Unmarshal([]byte(body), &srows))
	require.Len(t, srows, 1)
	require.NotNil(t, srows[0].Holder)
	assert.False(t, srows[0].Holder.Expired, "serve: live")
	assert.Greater(t, srows[0].Holder.LeftMS, minLeft)
	assert.Greater(t, srows[0].Holder.VouchedAt, lease.Deadline)

	resp, body = httpGet(t, url+"/v1/roles/db/history")
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	var hist server.RoleHistory
	require.NoError(t, json.Unmarshal([]byte(body), &hist))
	require.Len(t, hist.Transitions, 1, body)
	tr := hist.Transitions[0]
	require.NotNil(t, tr.Holder)
	assert.Equal(t, codec.MemberID("y1"), tr.Holder.Member)
	assert.Greater(t, tr.VouchedAt, tr.At+hbSpan.Milliseconds(), "history: heartbeats seen since it began count as renewals")
	assert.Greater(t, tr.VouchedAt, lease.Deadline)

	select {
	case l := <-w.lines:
		assert.Failf(t, "table --watch printed a line for a renewal", "%s", l)
	default:
	}
	// Stopped without a release: the watch says so once its renewals end.
	stop()
	var gone server.Row
	require.NoError(t, json.Unmarshal([]byte(w.line("db's lease runs out")), &gone))
	require.NotNil(t, gone.Holder)
	assert.True(t, gone.Holder.Expired)
	assert.GreaterOrEqual(t, time.Now().UnixMilli(), lastBeat(t, c, "y1").Deadline)
	assert.Equal(t, ExitOK, w.stop(), "stderr: %s", w.stderr.String())
}

// TestGoneCandidatesDeadRolesAndPrune: a candidate whose member stopped
// without leaving shows gone (table, JSON, serve), a role whose
// candidates are all gone and which has no live holder shows dead, and
// krole prune lists, then with --yes removes, only the registrations of
// members gone for longer than --older-than: never a live member's, nor
// one whose session was never read.
func TestGoneCandidatesDeadRolesAndPrune(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	const role = "db"
	stopY1, elected := startKeeper(t, c, "y1", role)
	awaitToken(t, elected)
	stopY2, _ := startKeeper(t, c, "y2", role)
	candidates := func() []codec.MemberID {
		var ms []codec.MemberID
		for _, cd := range rolestate.Fold(role, readRole(t, c.Config, role)).Candidates {
			ms = append(ms, cd.Member)
		}
		return ms
	}
	require.Eventually(t, func() bool { return len(candidates()) == 2 }, 30*time.Second, 50*time.Millisecond)
	requireOK(t, runOn(t, c, "register", role, "--member", "z9")) // never runs: no session
	require.Eventually(t, func() bool { return len(sessionBeats(t, c, "y2")) > 0 }, 30*time.Second, 50*time.Millisecond)

	// Nothing is gone yet: prune lists nothing, however short the bound.
	r := runOn(t, c, "prune", role, "--older-than", "1ms", "-o", "json")
	requireOK(t, r)
	assert.JSONEq(t, `[]`, r.Stdout, "live members and one never run are left alone")

	stopY2()
	time.Sleep(time.Until(time.UnixMilli(lastBeat(t, c, "y2").Deadline).Add(liveness.ClockTolerance + 100*time.Millisecond)))

	_, rows := tableJSON(t, c, role)
	require.Len(t, rows, 1)
	gone := map[string]any{}
	for _, cd := range rows[0]["candidates"].([]any) {
		cm := cd.(map[string]any)
		gone[cm["member"].(string)] = cm["gone"]
	}
	assert.Equal(t, map[string]any{"y1": nil, "y2": true, "z9": nil}, gone, "only y2's session is gone")
	assert.NotContains(t, rows[0], "dead")
	r = runOn(t, c, "table", role)
	requireOK(t, r)
	assert.Regexp(t, `(?m)^db\s+y1\s+.*\sy1, y2 \(gone\), z9$`, r.Stdout)
	row := getRole(t, c, role)
	require.Len(t, row.Candidates, 3)
	assert.True(t, row.Candidates[1].Gone, "serve: y2 gone")
	assert.False(t, row.Candidates[0].Gone || row.Candidates[2].Gone)

	r = runOn(t, c, "prune", role, "--older-than", "1h", "-o", "json")
	requireOK(t, r)
	assert.JSONEq(t, `[]`, r.Stdout, "y2 has been gone for less than an hour")
	r = runOn(t, c, "prune", role, "--older-than", "1ms")
	requireOK(t, r)
	assert.Regexp(t, `(?m)^db\s+y2\s+.*would prune`, r.Stdout)
	assert.NotContains(t, r.Stdout, "y1")
	assert.Equal(t, []codec.MemberID{"y1", "y2", "z9"}, candidates(), "a dry run writes nothing")

	r = runOn(t, c, "prune", "--older-than", "1ms", "--yes", "-o", "json")
	requireOK(t, r)
	var out []map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.Stdout), &out))
	require.Len(t, out, 1, r.Stdout)
	assert.Equal(t, "y2", out[0]["member"])
	assert.Equal(t, true, out[0]["pruned"])
	assert.Equal(t, []codec.MemberID{"y1", "z9"}, candidates(), "y2's registration tombstoned")

	// y1 stops too, and z9 resigns: no live holder, every candidate gone.
	requireOK(t, runOn(t, c, "resign", role, "--member", "z9", "--wait", "0"))
	stopY1()
	time.Sleep(time.Until(time.UnixMilli(lastBeat(t, c, "y1").Deadline).Add(liveness.ClockTolerance + 100*time.Millisecond)))
	_, rows = tableJSON(t, c, role)
	require.Len(t, rows, 1)
	assert.Equal(t, true, rows[0]["dead"], fmt.Sprint(rows[0]))
	r = runOn(t, c, "table", role)
	requireOK(t, r)
	assert.Regexp(t, `(?m)^db\s+y1\s+.*\sdead\s+y1 \(gone\)$`, r.Stdout)
}

// sessionBeats returns member's heartbeats on the topic, maybe none.
func sessionBeats(t *testing.T, c *testcluster.Cluster, member codec.MemberID) []codec.Heartbeat {
	t.Helper()
	var out []codec.Heartbeat
	for _, r := range readSession(t, c.Config, member) {
		if r.Record.Heartbeat != nil {
			out = append(out, *r.Record.Heartbeat)
		}
	}
	return out
}
