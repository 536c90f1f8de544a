package fencing_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/faultnet"
	"github.com/krabka/krole/internal/testcluster"
)

// pipedTransport is a transport of the faulty cluster c under client id
// id, with cfg.Pipeline set to mode.
func pipedTransport(t *testing.T, c *testcluster.Cluster, id, mode string) *fencing.BrokerTransport {
	t.Helper()
	cfg := c.Config
	cfg.ClientID = id
	cfg.Pipeline = mode
	tr, err := fencing.NewBrokerTransport(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, tr.Close()) })
	return tr
}

// Config.Pipeline: "auto" pipelines only where the broker reports
// transaction.partition.verification.enable=true (Apache Kafka 3.6 and
// later); kfake reports no such setting. "on" and "off" override it, and
// anything else is refused, naming the setting.
func TestPipelineSetting(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{})
	c.RequireFake(t)
	for mode, want := range map[string]bool{"": false, "auto": false, "on": true, "off": false} {
		assert.Equal(t, want, pipedTransport(t, c, "p", mode).Pipelining(), "Pipeline %q on kfake", mode)
	}
	cfg := c.Config
	cfg.Pipeline = "yes"
	_, err := fencing.NewBrokerTransport(cfg)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `pipeline "yes" is not one of auto, on, off`)

	// A broker that reports the setting, as Apache Kafka 3.6 does.
	verifying := func(value string) {
		c.Fake.ControlKey(int16(kmsg.DescribeConfigs), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
			req := kreq.(*kmsg.DescribeConfigsRequest)
			resp := req.ResponseKind().(*kmsg.DescribeConfigsResponse)
			for _, r := range req.Resources {
				rr := kmsg.NewDescribeConfigsResponseResource()
				rr.ResourceType, rr.ResourceName = r.ResourceType, r.ResourceName
				cf := kmsg.NewDescribeConfigsResponseResourceConfig()
				cf.Name, cf.Value = fencing.BrokerPartitionVerification, kmsg.StringPtr(value)
				rr.Configs = append(rr.Configs, cf)
				resp.Resources = append(resp.Resources, rr)
			}
			return resp, nil, true
		})
	}
	for _, tc := range []struct {
		value, mode string
		want        bool
	}{{"true", "", true}, {"true", "off", false}, {"false", "", false}, {"false", "on", true}} {
		verifying(tc.value)
		tr := pipedTransport(t, c, "p", tc.mode)
		st, err := tr.StartTxnSettings()
		require.NoError(t, err)
		assert.Equal(t, tc.value == "true", st.PartitionVerification)
		assert.Equal(t, tc.want, tr.Pipelining(), "verification %s, Pipeline %q", tc.value, tc.mode)
	}
}

// pipeEnv is a one-test cluster with faultnet in front of its brokers, a
// recorder of one transport's requests, and a role whose lease l0 is
// written.
type pipeEnv struct {
	c    *testcluster.Cluster
	fn   *faultnet.Net
	tr   *fencing.BrokerTransport
	rec  *faultnet.Recorder
	id   string
	role codec.Role
	tok  codec.Token
	l0   codec.Lease
}

func newPipeEnv(t *testing.T, ctx context.Context, nodes int, mode string) *pipeEnv {
	t.Helper()
	c, fn := testcluster.StartFaulty(t, testcluster.Options{Nodes: nodes, Partitions: partitions})
	e := &pipeEnv{c: c, fn: fn, id: "pipe-" + strconv.Itoa(nodes) + mode, role: "piped"}
	(&env{t: t, c: c, nodes: nodes}).place(e.role)
	e.tr = pipedTransport(t, c, e.id, mode)
	tok, err := e.tr.AcquireEpoch(ctx, e.role)
	require.NoError(t, err)
	e.tok, e.l0 = tok, lease(t, "n0", tok)
	require.NoError(t, leaseErr(e.tr.WriteLease(ctx, e.role, tok, e.l0)))
	e.rec = fn.Record(e.id)
	t.Cleanup(e.rec.Stop)
	return e
}

// written is what a WriteLease returned.
type written struct {
	off int64
	err error
}

// writeLease runs WriteLease in the background; its result comes on the
// channel.
func (e *pipeEnv) writeLease(ctx context.Context, tok codec.Token, l codec.Lease) <-chan written {
	done := make(chan written, 1)
	go func() {
		off, err := e.tr.WriteLease(ctx, e.role, tok, l)
		done <- written{off, err}
	}()
	return done
}

// offsetOf returns the offset of the record of recs that holds lease l,
// -1 when none does.
func offsetOf(recs []fencing.RoleRecord, l codec.Lease) int64 {
	for _, r := range recs {
		if r.Record.Lease != nil && *r.Record.Lease == l {
			return r.Offset
		}
	}
	return -1
}

func (e *pipeEnv) hold(key kmsg.Key) *faultnet.Held {
	return e.fn.Hold(faultnet.Rule{APIKey: int16(key), Node: faultnet.AnyNode, ClientID: e.id, Count: 1})
}

// With pipelining on and the role's coordinator also its partition's
// leader, a lease write's EndTxn commit leaves before the produce is
// answered: the broker reads it while the produce is still held on the
// way. The lease commits, once.
func TestPipelinedCommitGoesBehindTheProduce(t *testing.T) {
	ctx := (&env{t: t}).ctx()
	e := newPipeEnv(t, ctx, 1, fencing.PipelineOn)
	produce, commit := e.hold(kmsg.Produce), e.hold(kmsg.EndTxn)
	l1 := lease(t, "n1", e.tok)
	done := e.writeLease(ctx, e.tok, l1)
	require.NoError(t, produce.Wait(ctx, 1))
	require.NoError(t, commit.Wait(ctx, 1), "the commit is sent while the produce is unanswered")
	produce.Release()
	commit.Release()
	w := <-done
	require.NoError(t, w.err)

	var names []string
	for _, r := range e.rec.Take() {
		names = append(names, r.Name())
	}
	assert.Equal(t, []string{"AddPartitionsToTxn", "Produce", "EndTxn"}, names)
	recs, err := e.tr.ReadRoleRecords(ctx, e.role)
	require.NoError(t, err)
	assert.Equal(t, []codec.Lease{e.l0, l1}, leases(recs))
	assert.Equal(t, offsetOf(recs, l1), w.off, "the offset from the produce's answer, read behind the commit")
}

// Where the commit cannot go behind the produce (pipelining off, or the
// coordinator apart from the leader: two connections, no order between
// them), the EndTxn leaves only after the produce's answer came.
func TestCommitWaitsForTheProduceWhereItCannotBePipelined(t *testing.T) {
	for _, tc := range []struct {
		name  string
		nodes int
		mode  string
	}{{"pipelining off", 1, fencing.PipelineOff}, {"coordinator apart from leader", 3, fencing.PipelineOn}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := (&env{t: t}).ctx()
			e := newPipeEnv(t, ctx, tc.nodes, tc.mode)
			produce := e.hold(kmsg.Produce)
			l1 := lease(t, "n1", e.tok)
			done := e.writeLease(ctx, e.tok, l1)
			require.NoError(t, produce.Wait(ctx, 1))
			released := time.Now()
			produce.Release()
			w := <-done
			require.NoError(t, w.err)
			recs, err := e.tr.ReadRoleRecords(ctx, e.role)
			require.NoError(t, err)
			assert.Equal(t, offsetOf(recs, l1), w.off)
			var ends int
			for _, r := range e.rec.Take() {
				if r.APIKey == int16(kmsg.EndTxn) {
					ends++
					assert.True(t, r.At.After(released), "the EndTxn was sent after the produce's release")
				}
			}
			assert.Equal(t, 1, ends)
		})
	}
}

// One pipelined produce at a time is unanswered per broker: a lease write
// that finds another out (here the gate is taken as that produce would)
// writes its produce the plain way, its EndTxn sent only after the
// produce's answer, and the lease shows once. With the gate free again,
// the next write's commit goes behind its produce. Unbounded, every
// role's produce could be out at once behind a stalled one, and a caller
// giving up (its connection closed) would retire every role's token.
func TestPipelinedProduceOneAtATimePerBroker(t *testing.T) {
	ctx := (&env{t: t}).ctx()
	e := newPipeEnv(t, ctx, 1, fencing.PipelineOn)
	free, err := e.tr.OccupyPipe(string(e.role))
	require.NoError(t, err)
	produce := e.hold(kmsg.Produce)
	l1 := lease(t, "n1", e.tok)
	done := e.writeLease(ctx, e.tok, l1)
	require.NoError(t, produce.Wait(ctx, 1))
	released := time.Now()
	produce.Release()
	w1 := <-done
	require.NoError(t, w1.err)
	for _, r := range e.rec.Take() {
		if r.APIKey == int16(kmsg.EndTxn) {
			assert.True(t, r.At.After(released), "with the gate taken, the EndTxn was sent only after the produce's release")
		}
	}

	free()
	produce, commit := e.hold(kmsg.Produce), e.hold(kmsg.EndTxn)
	l2 := lease(t, "n2", e.tok)
	done = e.writeLease(ctx, e.tok, l2)
	require.NoError(t, produce.Wait(ctx, 1))
	require.NoError(t, commit.Wait(ctx, 1), "the gate free, the commit goes behind the produce")
	produce.Release()
	commit.Release()
	w2 := <-done
	require.NoError(t, w2.err)
	recs, err := e.tr.ReadRoleRecords(ctx, e.role)
	require.NoError(t, err)
	assert.Equal(t, []codec.Lease{e.l0, l1, l2}, leases(recs))
	assert.Equal(t, offsetOf(recs, l1), w1.off)
	assert.Equal(t, offsetOf(recs, l2), w2.off)
}

// A pipelined commit that gets no answer (its connection breaks) may have
// committed: the write returns ErrUnknownOutcome saying so, the token is
// retired, and the commit is not sent again (the produce ahead of it
// could still reach the log after a commit on a new connection). Here the
// broker never read the commit: the next epoch aborts the transaction,
// and the lease never shows.
func TestPipelinedCommitWithoutAnswerRetiresTheToken(t *testing.T) {
	ctx := (&env{t: t}).ctx()
	e := newPipeEnv(t, ctx, 1, fencing.PipelineOn)
	// The produce is held until the commit behind it has been read (so
	// the commit leaves unanswered however slow the client is), then
	// delivered; the commit's drop then closes the connection.
	produce := e.hold(kmsg.Produce)
	drop := e.fn.Drop(faultnet.Rule{APIKey: int16(kmsg.EndTxn), Node: faultnet.AnyNode, ClientID: e.id, Count: 1})
	done := make(chan error, 1)
	go func() { done <- leaseErr(e.tr.WriteLease(ctx, e.role, e.tok, lease(t, "n1", e.tok))) }()
	require.NoError(t, produce.Wait(ctx, 1))
	for drop.Count() == 0 && ctx.Err() == nil {
		time.Sleep(time.Millisecond)
	}
	produce.Release()
	err := <-done
	require.ErrorIs(t, err, fencing.ErrUnknownOutcome)
	assert.Contains(t, err.Error(), "may have committed")
	assert.Equal(t, 1, drop.Count())
	require.ErrorIs(t, e.tr.CheckToken(e.role, e.tok), fencing.ErrNotHeld)

	var ends int
	for _, r := range e.rec.Take() {
		if r.APIKey == int16(kmsg.EndTxn) {
			ends++
		}
	}
	assert.Equal(t, 1, ends, "the commit is not sent again")

	tok2, err := e.tr.AcquireEpoch(ctx, e.role)
	require.NoError(t, err)
	l2 := lease(t, "n2", tok2)
	require.NoError(t, leaseErr(e.tr.WriteLease(ctx, e.role, tok2, l2)))
	recs, err := e.tr.ReadRoleRecords(ctx, e.role)
	require.NoError(t, err)
	assert.Equal(t, []codec.Lease{e.l0, l2}, leases(recs))
}

// A pipelined commit that succeeds behind a produce without a definite
// answer (the leader appended it and answered REQUEST_TIMED_OUT, or
// refused it with NOT_ENOUGH_REPLICAS) committed with the record or
// without it: the transport writes the same batch again, under the same
// sequence number, in a transaction of its own, so the lease shows once
// either way, and the write succeeds.
func TestPipelinedCommitRewritesAnUnsettledProduce(t *testing.T) {
	for _, code := range []*kerr.Error{kerr.RequestTimedOut, kerr.NotEnoughReplicas} {
		t.Run(code.Message, func(t *testing.T) {
			ctx := (&env{t: t}).ctx()
			e := newPipeEnv(t, ctx, 1, fencing.PipelineOn)
			h := e.c.Fake.Fault(kfakeFault(e.c.Config.Topic, code, 1))
			l1, l2 := lease(t, "n1", e.tok), lease(t, "n2", e.tok)
			produce, commit := e.hold(kmsg.Produce), e.hold(kmsg.EndTxn)
			done := e.writeLease(ctx, e.tok, l1)
			require.NoError(t, commit.Wait(ctx, 1), "the commit goes behind the produce")
			produce.Release()
			commit.Release()
			w := <-done
			require.NoError(t, w.err)
			assert.Equal(t, 1, h.Hits())
			var names []string
			for _, r := range e.rec.Take() {
				names = append(names, r.Name())
			}
			assert.Equal(t, []string{"AddPartitionsToTxn", "Produce", "EndTxn", "AddPartitionsToTxn", "Produce", "EndTxn"}, names,
				"the commit behind the unsettled produce, then the rewrite")
			require.NoError(t, leaseErr(e.tr.WriteLease(ctx, e.role, e.tok, l2)), "the sequence goes on")
			recs, err := e.tr.ReadRoleRecords(ctx, e.role)
			require.NoError(t, err)
			assert.Equal(t, []codec.Lease{e.l0, l1, l2}, leases(recs))
			assert.Equal(t, offsetOf(recs, l1), w.off, "the offset of the record that shows, from the rewrite's answer")
		})
	}
}

// A pipelined lease write under a token that a newer AcquireEpoch fenced
// is refused as fenced (the produce and the commit behind it both), and
// shows nothing.
func TestPipelinedCommitUnderAFencedToken(t *testing.T) {
	ctx := (&env{t: t}).ctx()
	e := newPipeEnv(t, ctx, 1, fencing.PipelineOn)
	other := pipedTransport(t, e.c, "other", fencing.PipelineOn)
	tok2, err := other.AcquireEpoch(ctx, e.role)
	require.NoError(t, err)
	err = leaseErr(e.tr.WriteLease(ctx, e.role, e.tok, lease(t, "n1", e.tok)))
	require.Error(t, err)
	assert.True(t, fencing.IsFenced(err), "fenced: %v", err)
	l2 := lease(t, "n2", tok2)
	require.NoError(t, leaseErr(other.WriteLease(ctx, e.role, tok2, l2)))
	recs, err := other.ReadRoleRecords(ctx, e.role)
	require.NoError(t, err)
	assert.Equal(t, []codec.Lease{e.l0, l2}, leases(recs))
}
