package fencing_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/testcluster"
)

// FindCoordinator looks the role's transaction coordinator up once, ahead
// of time: the challenge that follows (AcquireEpoch, then the lease write)
// sends no FindCoordinator of its own, so a handover does not wait for one.
func TestFindCoordinatorAheadOfTheChallenge(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{})
	c.RequireFake(t)
	var finds atomic.Int32
	c.Fake.Control(func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.Fake.KeepControl()
		if r, ok := kreq.(*kmsg.FindCoordinatorRequest); ok && r.CoordinatorType == 1 { // transaction
			finds.Add(1)
		}
		return nil, nil, false
	})
	tr := c.Transport(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	role := codec.Role("prefetched")

	require.NoError(t, tr.FindCoordinator(ctx, role))
	require.Equal(t, int32(1), finds.Load(), "one lookup")
	require.NoError(t, tr.FindCoordinator(ctx, role))
	assert.Equal(t, int32(1), finds.Load(), "known already: no second lookup")

	tok, err := tr.AcquireEpoch(ctx, role)
	require.NoError(t, err)
	require.NoError(t, leaseErr(tr.WriteLease(ctx, role, tok, codec.Lease{Member: "m", Token: tok,
		GrantedAt: time.Now().UnixMilli(), Deadline: time.Now().Add(time.Minute).UnixMilli()})))
	assert.Equal(t, int32(1), finds.Load(), "the challenge used the coordinator found before")

	// Without it, the challenge looks the coordinator up itself.
	_, err = tr.AcquireEpoch(ctx, "not-prefetched")
	require.NoError(t, err)
	assert.Equal(t, int32(2), finds.Load())

	err = tr.FindCoordinator(ctx, "bad/role")
	assert.ErrorIs(t, err, codec.ErrInvalid)
	assert.ErrorIs(t, err, fencing.ErrProducer)
}
