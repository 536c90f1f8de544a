package cli

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/render"
	"github.com/krabka/krole/internal/testcluster"
)

// TestObserveHolderChanges: observe prints the holder at the start, then a
// line per change of holder (a new token, the lease running out), and
// nothing for a renewal or a candidate joining; -o json prints the same
// as JSON lines; table --watch --changes drops the same rows.
func TestObserveHolderChanges(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	m := c.Members(t)
	_, err := m.Transport.RegisterValue(m.Context(), "db", "m1", "10.0.0.1:80")
	require.NoError(t, err)
	m.Register("db", "m2")
	l1 := m.LeaseValue("db", "m1", time.Hour, "10.0.0.1:80")
	f1 := m.LastLease

	text := startBackground(t, append([]string{"observe", "db"}, clusterFlags(c)...)...)
	js := startBackground(t, append([]string{"observe", "db", "-o", "json"}, clusterFlags(c)...)...)
	tbl := startBackground(t, append([]string{"table", "--watch", "--changes", "db"}, clusterFlags(c)...)...)
	assert.Regexp(t, `^\d\d:\d\d:\d\d\.\d{3} db held by m1 \(token `+l1.Token.String()+`, value 10\.0\.0\.1:80\)$`, text.line("the holder"))
	var o render.Observation
	require.NoError(t, json.Unmarshal([]byte(js.line("the holder")), &o))
	assert.Equal(t, &render.ObservedHolder{Member: "m1", Value: "10.0.0.1:80", Token: l1.Token, Fence: f1}, o.Holder)
	assert.Equal(t, "m1", rowOf(t, tbl.line("the row")).Holder.Member.String())

	// A renewal (same token, a later deadline) and a new candidate: no line.
	renewed, err := codec.NewLease("m1", l1.Token, time.Now().UnixMilli(), time.Now().Add(2*time.Hour).UnixMilli())
	require.NoError(t, err)
	require.NoError(t, leaseErr(m.Transport.WriteLease(m.Context(), "db", l1.Token, renewed)))
	m.Register("db", "m3")
	// A new holder, with a short lease: a line, then one when it runs out.
	l2 := m.Lease("db", "m2", 2*time.Second)
	f2 := m.LastLease
	assert.Regexp(t, ` db held by m2 \(token `+l2.Token.String()+`\)$`, text.line("the new holder, not the renewal"))
	o = render.Observation{}
	require.NoError(t, json.Unmarshal([]byte(js.line("the new holder")), &o))
	assert.Equal(t, &render.ObservedHolder{Member: "m2", Token: l2.Token, Fence: f2}, o.Holder)
	r := rowOf(t, tbl.line("the new holder"))
	assert.Equal(t, codec.MemberID("m2"), r.Holder.Member)
	assert.Regexp(t, ` db has no holder$`, text.line("the lease ran out"))
	o = render.Observation{}
	require.NoError(t, json.Unmarshal([]byte(js.line("no holder")), &o))
	assert.Nil(t, o.Holder)
	assert.True(t, rowOf(t, tbl.line("expired")).Holder.Expired)

	for _, b := range []*background{text, js, tbl} {
		assert.Equal(t, ExitOK, b.stop(), "stderr: %s", b.stderr.String())
	}
}

// TestObserveHolderRenewedBySession: a holder that runs (krole run, a 2s
// lease) is renewed by its member session's heartbeats, which the view
// does not publish as changes: observe and table --watch look the role up
// again when its lease seems to end, and for three leases after the
// election say nothing of it running out. Before, both said the role had
// no holder one lease after the election.
func TestObserveHolderRenewedBySession(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	holder := startBackground(t, append(append(append(clusterFlags(c), "run", "db"), testTimingFlags()...), "--member", "m1")...)
	require.Regexp(t, `^\d+/\d+$`, holder.line("the token"))

	text := startBackground(t, append([]string{"observe", "db"}, clusterFlags(c)...)...)
	tbl := startBackground(t, append([]string{"table", "--watch", "db", "-o", "json"}, clusterFlags(c)...)...)
	assert.Regexp(t, ` db held by m1 \(token \d+/\d+\)$`, text.line("the holder"))
	assert.Equal(t, "m1", rowOf(t, tbl.line("the row")).Holder.Member.String())
	deadline := time.Now().Add(3 * testLease)
	for time.Now().Before(deadline) {
		select {
		case l := <-text.lines:
			assert.Fail(t, "observe printed a line while the holder ran", "%s", l)
		case l := <-tbl.lines:
			r := rowOf(t, l)
			require.NotNil(t, r.Holder, "table --watch: a row without a holder: %s", l)
			assert.False(t, r.Holder.Expired, "table --watch: the live holder shown expired: %s", l)
		case <-time.After(time.Until(deadline)):
		}
	}
	for _, b := range []*background{text, tbl, holder} {
		assert.Equal(t, ExitOK, b.stop(), "stderr: %s", b.stderr.String())
	}
}
