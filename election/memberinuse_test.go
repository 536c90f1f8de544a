package election

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/testcluster"
	"github.com/krabka/krole/rolestate"
)

// A second Session under the member id of a live one: its
// Campaign returns ErrMemberInUse, a *MemberInUseError naming the first
// session's instance, and it writes nothing that disturbs the first,
// which keeps the role under the same token and renews on.
func TestSecondSessionUnderTheSameMemberIsRefused(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	a, err := New(config(c, "node-3", "db", newRecorder()))
	require.NoError(t, err)
	defer a.Close()
	ea, err := a.Election("db")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	h, err := ea.Campaign(ctx, "10.0.0.3:5432")
	require.NoError(t, err)
	before := readRole(t, c, "db")
	require.Len(t, before.Candidates, 1)

	b, err := New(config(c, "node-3", "db", newRecorder()))
	require.NoError(t, err)
	defer b.Close()
	eb, err := b.Election("db")
	require.NoError(t, err)
	_, err = eb.Campaign(ctx, "10.9.9.9:5432")
	require.ErrorIs(t, err, ErrMemberInUse)
	var mu *MemberInUseError
	require.True(t, errors.As(err, &mu), "%v", err)
	assert.Equal(t, a.Member().Instance(), mu.Other, "the error names the running instance")
	assert.Equal(t, b.Member().Instance(), mu.Instance)
	assert.Equal(t, codec.MemberID("node-3"), mu.Member)
	require.NoError(t, b.Close())

	// The first session was not disturbed: it renews under its token,
	// its registration is its own, and its value is the one it set.
	refusedAt := time.Now()
	require.Eventually(t, func() bool {
		st := readRole(t, c, "db")
		return st.Lease != nil && st.SessionVouch() == rolestate.Vouched && st.Session.Heartbeat.GrantedAt > refusedAt.UnixMilli()
	}, waitFor, 50*time.Millisecond, "a renewal (a heartbeat of the lease's session) after the refusal")
	after := readRole(t, c, "db")
	require.NotNil(t, after.Lease)
	assert.Equal(t, h.Token, after.Lease.Token, "renewed under the same token")
	assert.False(t, released(after))
	assert.Equal(t, before.Candidates, after.Candidates, "node-3's registration is the one the first session wrote")
	l, err := ea.Leader(ctx)
	require.NoError(t, err)
	assert.Equal(t, Holder{Member: "node-3", Token: h.Token, Fence: h.Fence, Value: "10.0.0.3:5432"}, l)
}
