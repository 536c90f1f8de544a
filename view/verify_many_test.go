package view

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/testcluster"
	"github.com/krabka/krole/rolestate"
)

// manyAuthors writes, on a cluster of three brokers, a lease for each of
// n roles: the even ones under the role's own transactional id, the odd
// ones under a stranger's. It returns the roles and the leases the own
// ones hold with.
func manyAuthors(t *testing.T, n int) (*testcluster.Cluster, []codec.Role, map[codec.Role]codec.Lease) {
	c := testcluster.Start(t, testcluster.Options{Nodes: 3, Partitions: 3})
	w := newWriter(t, c, 3)
	stranger := w.txnProducer("stranger")
	now := time.Now()
	roles := make([]codec.Role, n)
	own := map[codec.Role]codec.Lease{}
	for i := range roles {
		roles[i] = codec.Role(fmt.Sprintf("many-%02d", i))
		w.register(roles[i], "a")
		tp := stranger
		if i%2 == 0 {
			tp = w.txnProducer(string(roles[i]))
			own[roles[i]] = tp.sign(mkLease("a", 0, now, time.Hour))
		}
		w.lease(tp, roles[i], mkLease("a", 0, now, time.Hour), true)
	}
	return c, roles, own
}

// TestDescribeManyAsksEachBrokerOnce: the view asks about many roles with
// one DescribeTransactions to each broker and no coordinator lookup, and
// keeps only the coordinators' answers: a role's own producer id, or none.
func TestDescribeManyAsksEachBrokerOnce(t *testing.T) {
	c, roles, own := manyAuthors(t, 24)
	var finds, describes atomic.Int64
	if c.Fake != nil {
		c.Fake.ControlKey(int16(kmsg.FindCoordinator), func(kmsg.Request) (kmsg.Response, error, bool) {
			c.Fake.KeepControl()
			finds.Add(1)
			return nil, nil, false
		})
		c.Fake.ControlKey(int16(kmsg.DescribeTransactions), func(kmsg.Request) (kmsg.Response, error, bool) {
			c.Fake.KeepControl()
			describes.Add(1)
			return nil, nil, false
		})
	}
	v, err := New(Options{Config: c.Config})
	require.NoError(t, err)
	t.Cleanup(func() {
		if v.verify.t != nil {
			_ = v.verify.t.Close()
		}
	})
	got := v.verify.describeMany(testCtx(t), roles)
	require.Len(t, got, len(roles))
	for _, r := range roles {
		if l, ok := own[r]; ok {
			assert.True(t, got[r].Held, "%s: its own transactional id holds it", r)
			assert.Equal(t, l.Token.ProducerID, got[r].Token.ProducerID, r)
		} else {
			assert.False(t, got[r].Held, "%s: its transactional id was never used", r)
		}
	}
	if c.Fake != nil {
		assert.Zero(t, finds.Load(), "coordinators looked up")
		assert.Equal(t, int64(3), describes.Load(), "one DescribeTransactions per broker")
	}
}

// TestManyRolesVerifiedTogether: a view that verifies every lease author
// at the coordinators (a fresh Authors), on three brokers, counts the
// leases written under their roles' own transactional ids and skips the
// others as forged.
func TestManyRolesVerifiedTogether(t *testing.T) {
	c, roles, own := manyAuthors(t, 24)
	v, _ := runView(t, c.Config, Options{Authors: rolestate.NewAuthors()})
	caughtUp(t, v)
	ctx := testCtx(t)
	for _, r := range roles {
		got, held, err := v.Holder(ctx, r, time.Time{})
		require.NoError(t, err)
		if l, ok := own[r]; ok {
			assert.True(t, held, r)
			assert.Equal(t, l, got, r)
		} else {
			assert.False(t, held, r)
		}
	}
	assert.Equal(t, int64(len(roles)-len(own)), v.Stats().Skipped[SkipForged])
}

// TestManyRolesDescribeDenied: when the principal may not Describe the
// roles' transactional ids, a view asking about many roles together falls
// back to asking about each alone, and counts every lease by its batch
// alone, as it does for one role.
func TestManyRolesDescribeDenied(t *testing.T) {
	c, roles, _ := manyAuthors(t, 12)
	c.RequireFake(t)
	c.Fake.ControlKey(int16(kmsg.DescribeTransactions), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.Fake.KeepControl()
		dr := req.(*kmsg.DescribeTransactionsRequest)
		resp := dr.ResponseKind().(*kmsg.DescribeTransactionsResponse)
		resp.Version = dr.Version
		for _, id := range dr.TransactionalIDs {
			st := kmsg.NewDescribeTransactionsResponseTransactionState()
			st.TransactionalID = id
			st.ErrorCode = 53 // TRANSACTIONAL_ID_AUTHORIZATION_FAILED
			resp.TransactionStates = append(resp.TransactionStates, st)
		}
		return resp, nil, true
	})
	v, _ := runView(t, c.Config, Options{Authors: rolestate.NewAuthors()})
	caughtUp(t, v)
	ctx := testCtx(t)
	for _, r := range roles {
		_, held, err := v.Holder(ctx, r, time.Time{})
		require.NoError(t, err)
		assert.True(t, held, "%s: counted by its batch alone", r)
	}
	assert.Zero(t, v.Stats().Skipped[SkipForged])
}
