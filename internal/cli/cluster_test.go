package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/testcluster"
)

// record is one element of `krole records -o json`, decoded loosely so that
// the test sees exactly which fields are present.
type record map[string]any

func records(t *testing.T, c *testcluster.Cluster, role string) []record {
	t.Helper()
	r := runOn(t, c, "records", role, "-o", "json")
	requireOK(t, r)
	var out []record
	require.NoError(t, json.Unmarshal([]byte(r.Stdout), &out), r.Stdout)
	return out
}

func TestRegisterRecordsResign(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{})

	// Two members join in order; register reports each one's offset.
	var offsets []float64
	for _, m := range []string{"node-1", "node-2"} {
		r := runOn(t, c, "register", "controller", "--member", m, "-o", "json")
		requireOK(t, r)
		var res map[string]any
		require.NoError(t, json.Unmarshal([]byte(r.Stdout), &res), r.Stdout)
		assert.Equal(t, "controller", res["role"])
		assert.Equal(t, m, res["member"])
		offsets = append(offsets, res["offset"].(float64))
	}
	require.Less(t, offsets[0], offsets[1])

	// A member of another role shares nothing with this one.
	requireOK(t, runOn(t, c, "register", "scheduler", "--member", "node-9"))

	recs := records(t, c, "controller")
	require.Len(t, recs, 2)
	for i, m := range []string{"node-1", "node-2"} {
		assert.Equal(t, offsets[i], recs[i]["offset"], "records show the join order")
		assert.Equal(t, "registration", recs[i]["kind"])
		assert.Equal(t, m, recs[i]["member"])
		assert.Greater(t, recs[i]["registered_at"], float64(time.Now().Add(-time.Hour).UnixMilli()))
		assert.NotContains(t, recs[i], "tombstone")
		assert.Len(t, recs[i], 4, "offset, kind, member, registered_at: %v", recs[i])
	}

	// Resigning writes a tombstone on node-1's registration.
	r := runOn(t, c, "resign", "controller", "--member", "node-1")
	requireOK(t, r)
	assert.Equal(t, "resigned node-1 from role controller\n", r.Stdout)
	recs = records(t, c, "controller")
	require.Len(t, recs, 3)
	assert.Equal(t, record{"offset": recs[2]["offset"], "kind": "registration", "member": "node-1", "tombstone": true}, recs[2])
	assert.Greater(t, recs[2]["offset"], offsets[1])

	// The table says the same, aligned, for people.
	r = runOn(t, c, "records", "controller")
	requireOK(t, r)
	lines := strings.Split(strings.TrimRight(r.Stdout, "\n"), "\n")
	require.Len(t, lines, 4, r.Stdout)
	assert.Regexp(t, `^OFFSET\s+KIND\s+MEMBER\s+TOKEN\s+TIME\s+DEADLINE$`, lines[0])
	assert.Regexp(t, `^\d+\s+registration\s+node-1\s+-\s+\d{4}-\d\d-\d\dT\S+Z \((now|\d+s ago)\)\s+-$`, lines[1])
	assert.Regexp(t, `^\d+\s+registration tombstone\s+node-1\s+-\s+-\s+-$`, lines[3])
	assert.Equal(t, strings.Index(lines[0], "KIND"), strings.Index(lines[1], "registration"), "columns align")

	// Resigning a member that never registered is harmless, with a note.
	r = runOn(t, c, "resign", "controller", "--member", "node-7")
	requireOK(t, r)
	assert.Contains(t, r.Stderr, "node-7 had no registration for role controller")
}

func TestRecordsOfEmptyRole(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{})
	r := runOn(t, c, "records", "nobody-here", "-o", "json")
	requireOK(t, r)
	assert.Equal(t, "[]\n", r.Stdout)

	r = runOn(t, c, "records", "nobody-here")
	requireOK(t, r)
	assert.Equal(t, "role nobody-here has no records\n", r.Stdout)
}

func TestDescribe(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{})

	r := runOn(t, c, "describe", "controller", "-o", "json")
	requireOK(t, r)
	assert.JSONEq(t, `{"role":"controller","held":false,"token":null,"lease":null}`, r.Stdout)
	assert.Equal(t, `{"role":"controller","held":false,"token":null,"lease":null}`+"\n", r.Stdout, "exact shape and field order")

	// Whoever mints the token, the role is held under it.
	ft, err := fencing.NewBrokerTransport(c.Config)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ft.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tok, err := ft.AcquireEpoch(ctx, codec.Role("controller"))
	require.NoError(t, err)

	r = runOn(t, c, "describe", "controller", "-o", "json")
	requireOK(t, r)
	assert.Equal(t, fmt.Sprintf(`{"role":"controller","held":true,"token":{"producer_id":%d,"epoch":%d},"lease":null}`+"\n", tok.ProducerID, tok.Epoch), r.Stdout)

	r = runOn(t, c, "describe", "controller")
	requireOK(t, r)
	assert.Regexp(t, `^ROLE\s+TOKEN\s+TRANSACTIONAL ID\s+LEASE\n`, r.Stdout)
	assert.Regexp(t, `(?m)^controller\s+`+tok.String()+`\s+`+c.Config.TxnPrefix+`controller\s+none$`, r.Stdout)

	// The lease written under that token shows in records, and so does
	// its release, after the holder's registration (so the lease's
	// offset, the holding's number, is not 0).
	_, err = ft.Register(ctx, "controller", "node-1")
	require.NoError(t, err)
	now := time.Now().UnixMilli()
	lease, err := codec.NewLease("node-1", tok, now, now+30_000)
	require.NoError(t, err)
	fence, err := ft.WriteLease(ctx, "controller", tok, lease)
	require.NoError(t, err)
	r = runOn(t, c, "describe", "controller")
	requireOK(t, r)
	assert.Regexp(t, fmt.Sprintf(`(?m)^controller\s+%s\s+\S+\s+live: node-1 \(token %[1]s, fence %d\), \d+s left$`, tok, fence), r.Stdout)
	release := codec.ReleaseLease("node-1", tok)
	release.Fence = fence // the holding's number, as a member's release carries it
	require.NoError(t, leaseErr(ft.WriteLease(ctx, "controller", tok, release)))

	// Released: the coordinator keeps its token, and LEASE says that
	// nobody holds the role.
	r = runOn(t, c, "describe", "controller")
	requireOK(t, r)
	assert.Regexp(t, fmt.Sprintf(`(?m)^controller\s+%s\s+\S+\s+released by node-1 \(token %[1]s, fence %d\): nobody holds the role$`, tok, fence), r.Stdout)
	assert.NotContains(t, r.Stdout, "yes")
	r = runOn(t, c, "describe", "controller", "-o", "json")
	requireOK(t, r)
	assert.JSONEq(t, fmt.Sprintf(`{"role":"controller","held":true,"token":{"producer_id":%[1]d,"epoch":%[2]d},
		"lease":{"state":"released","member":"node-1","token":{"producer_id":%[1]d,"epoch":%[2]d},"fence":%[3]d,"left_ms":0}}`, tok.ProducerID, tok.Epoch, fence), r.Stdout)
	recs := records(t, c, "controller")
	require.Len(t, recs, 3)
	assert.Equal(t, "registration", recs[0]["kind"])
	recs = recs[1:]
	tokJSON := map[string]any{"producer_id": float64(tok.ProducerID), "epoch": float64(tok.Epoch)}
	assert.Equal(t, record{"offset": float64(fence), "kind": "lease", "member": "node-1", "token": tokJSON, "fence": float64(fence),
		"granted_at": float64(now), "deadline": float64(now + 30_000)}, recs[0])
	assert.Equal(t, float64(fence), recs[1]["fence"], "the release carries the holding's number")
	assert.Greater(t, recs[1]["offset"], recs[0]["offset"])
	assert.Equal(t, float64(0), recs[1]["granted_at"])
	assert.Equal(t, float64(1), recs[1]["deadline"])

	r = runOn(t, c, "records", "controller")
	requireOK(t, r)
	assert.Regexp(t, `(?m)^\d+\s+lease\s+node-1\s+`+tok.String()+`\s+\S+ \((now|\d+s ago)\)\s+\S+ \(in \d+s\)$`, r.Stdout)
	assert.Regexp(t, `(?m)^\d+\s+lease \(released\)\s+node-1\s+`+tok.String()+`\s+-\s+-$`, r.Stdout)
}

// init creates the role topic with the settings the design needs and says
// what it set; run again, it leaves the topic as it is and reports them.
func TestInit(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{})
	topic := c.Config.Topic + ".init"
	args := []string{"init", "--partitions", "2", "--replication-factor", "1", "--brokers", strings.Join(c.Config.Brokers, ","), "--topic", topic, "-o", "json"}
	configs := `{"cleanup.policy":"compact","segment.ms":"3600000","min.compaction.lag.ms":"600000","delete.retention.ms":"604800000"}`
	r := run(t, args...)
	requireOK(t, r)
	assert.Empty(t, r.Stderr, "every setting taken")
	assert.JSONEq(t, fmt.Sprintf(`{"topic":%q,"created":true,"partitions":2,"replication_factor":1,"cleanup_policy":"compact","configs":%s,
		"set":["cleanup.policy=compact","segment.ms=3600000","min.compaction.lag.ms=600000","delete.retention.ms=604800000"]}`, topic, configs), r.Stdout)
	r = run(t, args...) // running it again is fine
	requireOK(t, r)
	assert.JSONEq(t, fmt.Sprintf(`{"topic":%q,"created":false,"partitions":2,"replication_factor":1,"cleanup_policy":"compact","configs":%s,"set":[]}`,
		topic, configs), r.Stdout)

	r = run(t, "init", "--brokers", strings.Join(c.Config.Brokers, ","), "--topic", topic)
	requireOK(t, r)
	assert.Equal(t, fmt.Sprintf("topic %s ready: cleanup.policy=compact, 2 partitions, replication factor 1 (existed; left as it is)\n"+
		"  settings: segment.ms=3600000, min.compaction.lag.ms=600000, delete.retention.ms=604800000\n", topic), r.Stdout)

	// Another partition count on an existing topic: said, not silently ignored.
	r = run(t, "init", "--partitions", "6", "--brokers", strings.Join(c.Config.Brokers, ","), "--topic", topic)
	requireOK(t, r)
	assert.Contains(t, r.Stderr, fmt.Sprintf("krole: warning: topic %s exists with 2 partitions; --partitions 6 is ignored: ", topic))
	assert.Contains(t, r.Stdout, "2 partitions")

	other := c.Config.Topic + ".init2"
	r = run(t, "init", "--brokers", strings.Join(c.Config.Brokers, ","), "--topic", other, "--rf", "1", "--delete-retention", "720h")
	requireOK(t, r)
	assert.Contains(t, r.Stdout, "(created; set cleanup.policy=compact, segment.ms=3600000, min.compaction.lag.ms=600000, delete.retention.ms=2592000000)")
}

func TestMissingTopic(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{})
	// An outside cluster may create topics on a metadata request.
	c.RequireFake(t)
	topic := c.Config.Topic + ".missing"
	brokers := strings.Join(c.Config.Brokers, ",")
	r := run(t, "records", "controller", "--brokers", brokers, "--topic", topic)
	assertOneLineError(t, r, ExitFailure)
	assert.Contains(t, r.Stderr, fmt.Sprintf("krole: topic %s does not exist at %s: create it with 'krole init --topic %s'",
		topic, brokers, topic))
}
