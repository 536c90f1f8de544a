package cli

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/faultnet"
	"github.com/krabka/krole/internal/testcluster"
)

// TestOneShotCommandsGiveUpOnAFrozenCluster: with a cluster that answers
// nothing (faultnet holds every request, as a SIGSTOPped broker would),
// each one-shot command exits within its --timeout, 1 (leader: 3, it
// could not find out), with one line that says no broker answered, not
// that a transaction holds readers back.
func TestOneShotCommandsGiveUpOnAFrozenCluster(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary; skipped with -short")
	}
	bin := buildKrole(t)
	c, fn := testcluster.StartFaulty(t, testcluster.Options{Partitions: 1})
	c.Members(t).Register("r", "a")
	held := fn.Hold(faultnet.Rule{APIKey: faultnet.AnyKey, Node: faultnet.AnyNode})
	t.Cleanup(held.Release)
	want := "krole: no answer from the brokers at " + strings.Join(c.Config.Brokers, ",") + " within --timeout 2s ("
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"leader", "r"}, ExitLeaderUnknown},
		{[]string{"describe", "r"}, ExitFailure},
		{[]string{"records", "r"}, ExitFailure},
		{[]string{"register", "r", "--member", "b"}, ExitFailure},
		{[]string{"resign", "r", "--member", "a"}, ExitFailure},
		{[]string{"init"}, ExitFailure},
		{[]string{"table"}, ExitFailure},
	} {
		t.Run(tc.args[0], func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, append(append(tc.args, "--timeout", "2s"), clusterFlags(c)...)...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			start := time.Now()
			err := cmd.Run()
			took := time.Since(start)
			var ee *exec.ExitError
			require.True(t, errors.As(err, &ee), "%v: %v; stderr: %s", tc.args, err, stderr.String())
			assert.Equal(t, tc.code, ee.ExitCode(), "stderr: %s", stderr.String())
			assert.True(t, strings.HasPrefix(stderr.String(), want), "stderr: %q", stderr.String())
			assert.Equal(t, 1, strings.Count(stderr.String(), "\n"), "one line: %q", stderr.String())
			assert.NotContains(t, stderr.String(), "transaction")
			// The default timeout is 30s: far more than this bound.
			assert.Less(t, took, 15*time.Second, "exited %v after it started", took)
		})
	}
}

// TestViewStuckBehindAnOpenTransaction: brokers that answer while the
// view cannot confirm its catch-up (faultnet holds ListOffsets), with a
// transaction open in the role's partition: leader's error says the
// brokers answer and names the open transaction.
func TestViewStuckBehindAnOpenTransaction(t *testing.T) {
	t.Parallel()
	c, fn := testcluster.StartFaulty(t, testcluster.Options{Partitions: 1})
	c.Members(t).Register("r", "a")
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Config.Brokers...),
		kgo.TransactionalID(c.Config.TransactionalID("open")), kgo.TransactionTimeout(time.Minute),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.MaxVersions(kversion.V3_9_0()))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	require.NoError(t, cl.BeginTransaction())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: c.Config.Topic, Partition: 0,
		Key: []byte(codec.LeaseKey("other").String()), Value: []byte("x")}).FirstErr())
	t.Cleanup(func() { _ = cl.EndTransaction(context.Background(), kgo.TryAbort) })
	held := fn.Hold(faultnet.Rule{APIKey: 2, Node: faultnet.AnyNode}) // ListOffsets
	t.Cleanup(held.Release)

	r := runOn(t, c, "leader", "r", "--timeout", "2s")
	assertOneLineError(t, r, ExitLeaderUnknown)
	assert.Regexp(t, `^krole: the view did not catch up with topic \S+ within --timeout 2s, though the brokers answer \(last at [0-9:.]+\): `+
		`a transaction open in partition 0 since offset 1 \(its high watermark is 2\) holds read_committed readers back`, r.Stderr)
}
