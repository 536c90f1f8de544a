// Package fencingtest holds the testify mock of fencing.Transport, for
// tests of code that drives the seam without a broker.
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
//	m := new(fencingtest.MockTransport)
//	m.On("AcquireEpoch", mock.Anything, role).Return(token, nil)
//	m.On("WriteLease", mock.Anything, role, token, mock.Anything).
//		Return(fencing.Fenced(role, nil))
type MockTransport struct{ mock.Mock }

var _ fencing.Transport = (*MockTransport)(nil)

// NewMockTransport returns a mock that asserts its expectations when t ends.
func NewMockTransport(t interface {
	mock.TestingT
	Cleanup(func())
}) *MockTransport {
	m := new(MockTransport)
	m.Test(t)
	t.Cleanup(func() { m.AssertExpectations(t) })
	return m
}

// AcquireEpoch implements fencing.Transport.
func (m *MockTransport) AcquireEpoch(ctx context.Context, role codec.Role) (codec.Token, error) {
	a := m.Called(ctx, role)
	return a.Get(0).(codec.Token), a.Error(1)
}

// ReadRoleRecords implements fencing.Transport.
func (m *MockTransport) ReadRoleRecords(ctx context.Context, role codec.Role) ([]fencing.RoleRecord, error) {
	a := m.Called(ctx, role)
	recs, _ := a.Get(0).([]fencing.RoleRecord)
	return recs, a.Error(1)
}

// Register implements fencing.Transport.
func (m *MockTransport) Register(ctx context.Context, role codec.Role, member codec.MemberID) (int64, error) {
	a := m.Called(ctx, role, member)
	return a.Get(0).(int64), a.Error(1)
}

// Deregister implements fencing.Transport.
func (m *MockTransport) Deregister(ctx context.Context, role codec.Role, member codec.MemberID) error {
	return m.Called(ctx, role, member).Error(0)
}

// WriteLease implements fencing.Transport.
func (m *MockTransport) WriteLease(ctx context.Context, role codec.Role, token codec.Token, lease codec.Lease) error {
	return m.Called(ctx, role, token, lease).Error(0)
}

// Describe implements fencing.Transport.
func (m *MockTransport) Describe(ctx context.Context, role codec.Role) (codec.Token, bool, error) {
	a := m.Called(ctx, role)
	return a.Get(0).(codec.Token), a.Bool(1), a.Error(2)
}
