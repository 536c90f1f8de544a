package fencing_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/testcluster"
)

// kcat (librdkafka) is a Kafka client nobody here wrote. Read with
// read_committed isolation, it sees the writes of each holder that were
// committed, and neither a deposed holder's refused write nor the
// transaction that was open when the next holder took over; and it reads
// the role topic as plain text.
func TestIndependentClientSeesOnlyCommittedFencedWrites(t *testing.T) {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Skip("kcat not installed: apt-get install kcat")
	}
	c := testcluster.Start(t, testcluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	role := codec.Role("kcat-checked")
	topic := c.Topic(t, c.Name("out"), 2, 10*time.Second)
	a, b, d := c.Transport(t), c.Transport(t), c.Transport(t)
	msg := func(v string) fencing.Message {
		return fencing.Message{Topic: topic, Partition: fencing.PartitionByKey, Key: []byte("k-" + v), Value: []byte(v)}
	}

	tokA, err := a.AcquireEpoch(ctx, role)
	require.NoError(t, err)
	require.NoError(t, a.Writer(role, tokA).Write(ctx, msg("a1")))
	tokB, err := b.AcquireEpoch(ctx, role)
	require.NoError(t, err)
	assert.True(t, fencing.IsFenced(a.Writer(role, tokA).Write(ctx, msg("a2-refused"))))
	require.NoError(t, b.Writer(role, tokB).Write(ctx, msg("b1")))
	err = b.Transact(ctx, role, tokB, func(tx *fencing.Txn) error {
		if err := tx.Write(msg("b2-aborted")); err != nil {
			return err
		}
		_, err := d.AcquireEpoch(ctx, role)
		return err
	})
	assert.True(t, fencing.IsFenced(err), "got %v", err)
	_, err = d.Register(ctx, role, "node-d")
	require.NoError(t, err)

	consume := func(topic, format string) []string {
		t.Helper()
		cmd := exec.CommandContext(ctx, kcat, "-C", "-b", strings.Join(c.Config.Brokers, ","), "-t", topic,
			"-o", "beginning", "-e", "-q", "-X", "isolation.level=read_committed", "-f", format)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		require.NoError(t, err, "kcat: %s", stderr.String())
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		sort.Strings(lines)
		return lines
	}
	assert.Equal(t, []string{"a1", "b1"}, consume(topic, "%s\n"))

	roleRecords := consume(c.Config.Topic, "%k\t%s\n")
	require.Len(t, roleRecords, 1)
	k, v, _ := strings.Cut(roleRecords[0], "\t")
	assert.Equal(t, "krole/reg/kcat-checked/node-d", k)
	var reg map[string]any
	require.NoError(t, json.Unmarshal([]byte(v), &reg), "the value is one line of JSON")
	assert.Equal(t, map[string]any{"v": 1.0, "kind": "registration", "member": "node-d", "registered_at": reg["registered_at"]}, reg)
}
