package fencing_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/ctxcall"
	"github.com/krabka/krole/internal/faultnet"
	"github.com/krabka/krole/internal/testcluster"
)

const initProducerIDKey = 22 // kmsg.InitProducerID

// An AcquireEpoch whose ctx ends while its InitProducerId is held: the
// transport closes the connection the request went out on at once, not
// when its read timeout (30 s here) would. A request that the close
// overtakes (faultnet's DropOnClose) never reaches the coordinator: the
// epoch does not move and the holder keeps writing.
//
// A close cannot recall bytes that already left the client: a network
// that delivers them anyway (DeliverOnClose) still bumps the epoch once.
// That bump is harmless to safety: the answer goes nowhere, so no member
// holds the new epoch; the holder it fenced learns of it at its next
// write, as of any challenge, and the role goes to the next acquirer.
func TestAbandonedAcquireEpoch(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy faultnet.ClosePolicy
		moves  bool
	}{
		{"the close overtakes the request", faultnet.DropOnClose, false},
		{"the network delivers it anyway", faultnet.DeliverOnClose, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, fn := testcluster.StartFaulty(t, testcluster.Options{Nodes: 1, Partitions: partitions})
			fn.SetOnClientClose(tc.policy)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			role := codec.Role("abandoned")
			holder := c.Transport(t)
			tok, err := holder.AcquireEpoch(ctx, role)
			require.NoError(t, err)
			require.NoError(t, leaseErr(holder.WriteLease(ctx, role, tok, lease(t, "holder", tok))))

			cfg := c.Config
			cfg.ClientID = "challenger"
			cfg.RequestTimeout = 30 * time.Second
			challenger, err := fencing.NewBrokerTransport(cfg)
			require.NoError(t, err)
			t.Cleanup(func() { assert.NoError(t, challenger.Close()) })
			held := fn.Hold(faultnet.Rule{APIKey: initProducerIDKey, Node: faultnet.AnyNode, ClientID: "challenger", Count: 1})

			actx, acancel := context.WithCancel(ctx)
			go func() {
				_ = held.Wait(ctx, 1)
				acancel() // the challenger gives up once its request is out
			}()
			_, err = challenger.AcquireEpoch(actx, role)
			require.ErrorIs(t, err, context.Canceled)
			require.Equal(t, 1, held.Count())

			// The connection closes with the abandon, long before the
			// request's read timeout.
			wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
			defer wcancel()
			require.NoError(t, held.WaitOrphaned(wctx, 1), "the abandoned request's connection is closed")
			held.Release()
			if tc.policy == faultnet.DeliverOnClose {
				require.NoError(t, held.WaitDelivered(ctx, 1))
			}

			now, ok, err := holder.Describe(ctx, role)
			require.NoError(t, err)
			require.True(t, ok)
			if tc.moves {
				// Delivered means the broker has read the request, not
				// that it has handled it: wait for its effect.
				require.Eventually(t, func() bool {
					now, _, err = holder.Describe(ctx, role)
					return err == nil && now != tok
				}, 10*time.Second, 10*time.Millisecond, "the late request takes effect")
			}
			werr := leaseErr(holder.WriteLease(ctx, role, tok, lease(t, "holder", tok)))
			if !tc.moves {
				assert.Equal(t, tok, now, "the epoch does not move")
				assert.NoError(t, werr, "the holder keeps writing")
				return
			}
			assert.Equal(t, tok.Epoch+1, now.Epoch, "the late request bumped the epoch once")
			assert.True(t, fencing.IsFenced(werr), "the fenced holder learns at its next write: %v", werr)
			assert.ErrorIs(t, leaseErr(challenger.WriteLease(ctx, role, now, lease(t, "challenger", now))), fencing.ErrNotHeld,
				"no member holds the epoch of the abandoned request")
		})
	}
}

// A request queued behind an abandoned one on the same connection was
// never sent: sarama holds the connection for the abandoned one's round
// trip, and the close that cuts that one short (ctxcall.Conns.Close) comes
// before it is written. Between the abandoned call's return and the
// transport's close of the sarama broker, a queued request finds the
// connection reset under sarama: sarama sets its write deadline before
// writing, and that fails. It must read as not sent, not as a request
// without an answer: that would retire the queued transaction's token,
// which had sent nothing (a member session's heartbeat queued so behind a
// leaving runner's call could not write the session end).
// The test opens that window for good: it resets the connections of the
// role's coordinator and sends on the sarama broker still holding one.
func TestRequestOnAnAbandonedConnectionIsNotSent(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Nodes: 1, Partitions: partitions})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tr := c.Transport(t)
	role := codec.Role("queued")
	tok, err := tr.AcquireEpoch(ctx, role)
	require.NoError(t, err)

	err = tr.SendOnAbandonedConnection(string(role), tok)
	require.Error(t, err)
	assert.True(t, fencing.NotSent(err), "nothing was written, so nothing was sent: %v", err)
	assert.ErrorIs(t, err, ctxcall.ErrAbandoned)
	// The transport's own path reads it so too: the token still writes.
	assert.NoError(t, leaseErr(tr.WriteLease(ctx, role, tok, lease(t, "m", tok))))
}
