package testcluster

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
)

// Members writes to c's role topic as members do, through one
// fencing.BrokerTransport: registrations and leases, for tests of what
// reads the role topic. Each write fails the test on an error.
type Members struct {
	t testing.TB
	// Transport is the transport the writes go through, for writes
	// Members has no method for. It is closed when the test ends.
	Transport *fencing.BrokerTransport
	// LastLease is the offset of the last lease a method of Members
	// wrote: the fencing number of that holding, since each writes under
	// a new epoch.
	LastLease int64
}

// Members returns a Members writing to c (see [Cluster.Transport]).
func (c *Cluster) Members(t testing.TB) *Members {
	t.Helper()
	return &Members{t: t, Transport: c.Transport(t)}
}

// Context returns a context for one write: bounded at 30 s, cancelled
// when the test ends.
func (m *Members) Context() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	m.t.Cleanup(cancel)
	return ctx
}

// Register appends member's registration as a candidate for role and
// returns its offset.
func (m *Members) Register(role codec.Role, member codec.MemberID) int64 {
	m.t.Helper()
	off, err := m.Transport.Register(m.Context(), role, member)
	require.NoError(m.t, err)
	return off
}

// Lease makes member the holder of role for d, under a new epoch, and
// returns the lease. The lease is granted once the epoch is acquired, so
// that d is all left of it when it is written.
func (m *Members) Lease(role codec.Role, member codec.MemberID, d time.Duration) codec.Lease {
	m.t.Helper()
	ctx := m.Context()
	tok := m.acquire(ctx, role)
	now := time.Now()
	return m.writeLease(ctx, role, member, tok, now, now.Add(d))
}

// LeaseValue is Lease with the holder's value in the lease, as a
// member's session writes every lease (codec.Lease.Value).
func (m *Members) LeaseValue(role codec.Role, member codec.MemberID, d time.Duration, value string) codec.Lease {
	m.t.Helper()
	ctx := m.Context()
	tok := m.acquire(ctx, role)
	now := time.Now()
	l, err := codec.NewLease(member, tok, now.UnixMilli(), now.Add(d).UnixMilli())
	require.NoError(m.t, err)
	l.Value = value
	m.LastLease, err = m.Transport.WriteLease(ctx, role, tok, l)
	require.NoError(m.t, err)
	return l
}

// LeaseAt writes a lease of member for role from granted to deadline,
// under a new epoch, and returns it.
func (m *Members) LeaseAt(role codec.Role, member codec.MemberID, granted, deadline time.Time) codec.Lease {
	m.t.Helper()
	ctx := m.Context()
	return m.writeLease(ctx, role, member, m.acquire(ctx, role), granted, deadline)
}

func (m *Members) acquire(ctx context.Context, role codec.Role) codec.Token {
	m.t.Helper()
	tok, err := m.Transport.AcquireEpoch(ctx, role)
	require.NoError(m.t, err)
	return tok
}

func (m *Members) writeLease(ctx context.Context, role codec.Role, member codec.MemberID, tok codec.Token, granted, deadline time.Time) codec.Lease {
	m.t.Helper()
	l, err := codec.NewLease(member, tok, granted.UnixMilli(), deadline.UnixMilli())
	require.NoError(m.t, err)
	m.LastLease, err = m.Transport.WriteLease(ctx, role, tok, l)
	require.NoError(m.t, err)
	return l
}
