package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
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
)

// The only member of db (value 10.9.9.9:5432, a lease of 3s) stops renewing
// without releasing (KeepOnExit, as a SIGKILLed member would). While it
// renews (its member session's heartbeats, past its lease record's own
// deadline), a fresh leader, table, describe and GET /v1/roles/db of a
// fresh serve name it live; once its last renewal has run out by more than
// liveness.ClockTolerance, each of them, started afresh, says that db has
// no live holder: leader exits 1 with one line. Before, a fresh reader
// counted a whole lease from its read and named the dead holder live.
func TestOneShotAnswersAfterTheHolderDied(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	const role = "db"
	elected := make(chan codec.Token, 1)
	settings := processor.Settings{LeaseDuration: 3 * time.Second, KeepOnExit: true}
	cfg := c.Config
	cfg.TxnTimeout = settings.WithDefaults().TransactionTimeout
	sess, err := election.New(election.Config{
		Cluster: cfg, Member: "y1", Roles: []codec.Role{role}, Value: "10.9.9.9:5432", Settings: settings,
		OnEvent: func(e processor.Event) {
			if e.Kind == processor.Elected {
				elected <- e.Token
			}
		},
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var runErr error
	go func() { defer close(done); runErr = sess.Run(ctx, nil) }()
	t.Cleanup(func() { cancel(); <-done })
	var tok codec.Token
	select {
	case tok = <-elected:
	case <-time.After(30 * time.Second):
		t.Fatal("y1 was not elected")
	}

	// Live, renewing: every fresh answer names y1 (no false negative),
	// also once its lease record itself is old: its member session's
	// heartbeats renew it, and the lease is written again only hourly.
	// (Judged by the lease record's own deadline, a holder elected more
	// than a lease ago was named dead.)
	first := lastLease(readRole(t, c.Config, role))
	require.NotNil(t, first)
	time.Sleep(time.Until(time.UnixMilli(first.Deadline).Add(liveness.ClockTolerance + 100*time.Millisecond)))
	for i := 0; i < 3; i++ {
		r := runOn(t, c, "leader", role)
		requireOK(t, r)
		assert.Equal(t, "10.9.9.9:5432\n", r.Stdout)
		_, rows := tableJSON(t, c, role)
		require.Len(t, rows, 1)
		assert.Equal(t, false, rows[0]["holder"].(map[string]any)["expired"], "table: live")
		r = runOn(t, c, "describe", role)
		requireOK(t, r)
		assert.Regexp(t, `live: y1 \(token `+tok.String()+`, fence \d+\)`, r.Stdout)
		time.Sleep(500 * time.Millisecond)
	}
	assert.False(t, getRole(t, c, role).Holder.Expired, "GET /v1/roles/db of a fresh serve: live")

	// y1 stops without a release, as if killed.
	cancel()
	<-done
	require.NoError(t, runErr)
	last := lastLease(readRole(t, c.Config, role))
	require.NotNil(t, last)
	require.False(t, last.Released(), "KeepOnExit writes no release")
	require.Equal(t, codec.MemberID("y1"), last.Member)
	beats := readSession(t, c.Config, "y1")
	require.NotEmpty(t, beats)
	hb := beats[len(beats)-1].Record.Heartbeat
	require.NotNil(t, hb)
	require.False(t, hb.End, "KeepOnExit writes no session end")
	ranOut := time.UnixMilli(hb.Deadline) // the latest renewal's
	time.Sleep(time.Until(ranOut.Add(liveness.ClockTolerance + 100*time.Millisecond)))

	r := runOn(t, c, "leader", role)
	assertOneLineError(t, r, ExitFailure)
	assert.Regexp(t, regexp.MustCompile(`^krole: role db has no live holder: the lease of y1 \(token `+tok.String()+
		`\) ran out at \d\d:\d\d:\d\d\.\d{3} by its holder's clock, [\d.]+s ago, and no renewal came\n$`), r.Stderr)
	_, rows := tableJSON(t, c, role)
	require.Len(t, rows, 1)
	assert.Equal(t, true, rows[0]["holder"].(map[string]any)["expired"], "table: expired")
	r = runOn(t, c, "table", role)
	requireOK(t, r)
	assert.Regexp(t, `(?m)^db\s+y1\s+10\.9\.9\.9:5432\s+`+tok.String()+`\s+dead\s+y1 \(gone\)$`, r.Stdout)
	r = runOn(t, c, "describe", role)
	requireOK(t, r)
	assert.Regexp(t, `(?m)^db\s+`+tok.String()+`\s+\S+\s+expired: y1 \(token `+tok.String()+`, fence \d+\) stopped renewing$`, r.Stdout)
	assert.True(t, getRole(t, c, role).Holder.Expired, "GET /v1/roles/db of a fresh serve: expired")
}

// getRole starts a fresh `krole serve`, asks it GET /v1/roles/ROLE once,
// and stops it.
func getRole(t *testing.T, c *testcluster.Cluster, role string) server.Row {
	t.Helper()
	b, url := startServe(t, c)
	defer b.stop()
	resp, body := httpGet(t, fmt.Sprintf("%s/v1/roles/%s", url, role))
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	var row server.Row
	require.NoError(t, json.NewDecoder(strings.NewReader(body)).Decode(&row))
	require.NotNil(t, row.Holder, body)
	return row
}
