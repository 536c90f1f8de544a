// Package fencingtest holds the testify mock of fencing.Transport, for
// tests of code that drives the seam without a broker (the succession
// rules of package processor, with a fake clock). Tests that need the
// behaviour of a real cluster (fencing, read_committed, transaction
// timeouts) run against internal/testcluster instead.
package fencingtest

import (
	"context"

	"github.com/stretchr/testify/mock"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
)

// MockTransport is a testify mock of [fencing.Transport], for tests of code that
// drives a fencing.Transport (the succession rules) without a broker. Script it
// with On:
//
//	m := fencingtest.NewMockTransport(t)
//	m.On("AcquireEpoch", mock.Anything, role).Return(token, nil)
//	m.On("WriteLease", mock.Anything, role, token, mock.Anything).
//		Return(int64(-1), fencing.Fenced(role, nil))
//
// Each method documents the values its Return takes; they must have
// exactly those types (an untyped 5 is an int, not the int64 Register
// needs), or the call panics. The methods never block and ignore ctx,
// unless the test makes them (with WaitUntil, After or Run). A
// MockTransport is safe for concurrent use, as testify mocks are.
type MockTransport struct{ mock.Mock }

var _ fencing.Transport = (*MockTransport)(nil)

// NewMockTransport returns a mock bound to t: an unexpected call fails t,
// and the expectations set with On are asserted when t ends (t.Cleanup).
func NewMockTransport(t interface {
	mock.TestingT
	Cleanup(func())
}) *MockTransport {
	m := new(MockTransport)
	m.Test(t)
	t.Cleanup(func() { m.AssertExpectations(t) })
	return m
}

// AcquireEpoch implements fencing.Transport. Return(token codec.Token,
// err error); the token must be a codec.Token even when err is set.
func (m *MockTransport) AcquireEpoch(ctx context.Context, role codec.Role) (codec.Token, error) {
	a := m.Called(ctx, role)
	return a.Get(0).(codec.Token), a.Error(1)
}

// ReadRoleRecords implements fencing.Transport. Return(recs
// []fencing.RoleRecord, err error); recs may be nil.
func (m *MockTransport) ReadRoleRecords(ctx context.Context, role codec.Role) ([]fencing.RoleRecord, error) {
	a := m.Called(ctx, role)
	recs, _ := a.Get(0).([]fencing.RoleRecord)
	return recs, a.Error(1)
}

// Register implements fencing.Transport. Return(offset int64, err error):
// the offset of the registration, which ranks the member.
func (m *MockTransport) Register(ctx context.Context, role codec.Role, member codec.MemberID) (int64, error) {
	a := m.Called(ctx, role, member)
	return a.Get(0).(int64), a.Error(1)
}

// Deregister implements fencing.Transport. Return(err error).
func (m *MockTransport) Deregister(ctx context.Context, role codec.Role, member codec.MemberID) error {
	return m.Called(ctx, role, member).Error(0)
}

// WriteLease implements fencing.Transport. Return(offset int64, err
// error): the lease record's offset (the holding's fencing number for a
// challenge's lease), -1 with an error; return fencing.Fenced(role,
// cause) to play a later member that has taken the role.
func (m *MockTransport) WriteLease(ctx context.Context, role codec.Role, token codec.Token, lease codec.Lease) (int64, error) {
	a := m.Called(ctx, role, token, lease)
	return a.Get(0).(int64), a.Error(1)
}

// Describe implements fencing.Transport. Return(token codec.Token, ok
// bool, err error): the token that holds role now, and ok=false when no
// member has ever held it.
func (m *MockTransport) Describe(ctx context.Context, role codec.Role) (codec.Token, bool, error) {
	a := m.Called(ctx, role)
	return a.Get(0).(codec.Token), a.Bool(1), a.Error(2)
}

// StartSession implements fencing.Transport. Return(session
// codec.Session, err error).
func (m *MockTransport) StartSession(ctx context.Context, member codec.MemberID, nonce string) (codec.Session, error) {
	a := m.Called(ctx, member, nonce)
	return a.Get(0).(codec.Session), a.Error(1)
}

// Heartbeat implements fencing.Transport. Return(err error).
func (m *MockTransport) Heartbeat(ctx context.Context, hb codec.Heartbeat) error {
	return m.Called(ctx, hb).Error(0)
}

// ReadSession implements fencing.Transport. Return(recs
// []fencing.RoleRecord, err error); recs may be nil.
func (m *MockTransport) ReadSession(ctx context.Context, member codec.MemberID) ([]fencing.RoleRecord, error) {
	a := m.Called(ctx, member)
	recs, _ := a.Get(0).([]fencing.RoleRecord)
	return recs, a.Error(1)
}

// DescribeMany implements fencing.Transport. Return(got
// map[codec.Role]fencing.Described, err error); got may be nil.
func (m *MockTransport) DescribeMany(ctx context.Context, roles []codec.Role) (map[codec.Role]fencing.Described, error) {
	a := m.Called(ctx, roles)
	got, _ := a.Get(0).(map[codec.Role]fencing.Described)
	return got, a.Error(1)
}
