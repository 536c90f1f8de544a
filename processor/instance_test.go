package processor

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
)

// At its start a member watches another instance's registration of its
// id for a lease, writing nothing; the other registering again within
// that lease refuses it.
func TestInstanceWatchRefusesWhenTheOtherRegistersAgain(t *testing.T) {
	h := newInstanceHarness(t, "a")
	h.see(withInstance(state(role, nil, 0, "b", 1), "a", 5, "old@host/1"))
	a := h.step()
	assert.Equal(t, DoWait, a.Kind, "watching: %s", a.Reason)
	assert.Equal(t, t0.Add(DefaultLeaseDuration), a.Until)
	h.clk.Set(t0.Add(DefaultLeaseDuration / 2))
	h.see(withInstance(state(role, nil, 0, "b", 1), "a", 9, "old@host/1"))
	h.step()
	err := h.refusal()
	require.NotNil(t, err)
	assert.True(t, errors.Is(err, ErrMemberInUse))
	assert.Equal(t, "old@host/1", err.Other)
	assert.Equal(t, h.m.Instance(), err.Instance)
	h.tr.AssertNotCalled(t, "Register", mock.Anything, mock.Anything, mock.Anything)
}

// A lease of the member's id written after its start, under a token it
// did not mint, refuses it: the other instance holds the role.
func TestInstanceLeaseOfTheOtherRefuses(t *testing.T) {
	h := newInstanceHarness(t, "a")
	tok := codec.Token{ProducerID: 7, Epoch: 3}
	h.see(withInstance(state(role, leaseOf("a", tok, t0, DefaultLeaseDuration), 4, "b", 1), "a", 2, "old@host/1"))
	h.r.inst.baseLeaseOff = 4
	assert.Equal(t, DoWait, h.step().Kind)
	assert.Nil(t, h.refusal(), "the lease it found at its start says nothing of life")
	h.clk.Set(t0.Add(time.Second))
	h.see(withInstance(state(role, leaseOf("a", tok, t0.Add(time.Second), DefaultLeaseDuration), 6, "b", 1), "a", 2, "old@host/1"))
	h.step()
	require.NotNil(t, h.refusal(), "a renewal by the other instance")
	assert.Contains(t, h.refusal().Error(), "member id a is in use by instance old@host/1")
}

// No sign of life for a lease: the member takes the id over (registers
// with its instance). Once it has been the id's instance for a lease it
// answers a newcomer's registration by registering again, once; a second
// one within a lease refuses it. A newcomer that sees an answer within
// its first lease is refused.
func TestInstanceTakeoverAnswerAndRefusal(t *testing.T) {
	h := newInstanceHarness(t, "a")
	// The role is vacant; its challenges fail, which is not what this is about.
	h.tr.On("AcquireEpoch", mock.Anything, role).Return(codec.Token{}, errors.New("not now")).Maybe()
	h.see(withInstance(state(role, nil, 0, "b", 1), "a", 5, "old@host/1"))
	require.Equal(t, DoWait, h.step().Kind)
	h.clk.Set(t0.Add(DefaultLeaseDuration))
	h.tr.On("Register", mock.Anything, role, codec.MemberID("a")).Return(int64(10), nil).Once()
	h.settle()
	h.tr.AssertNumberOfCalls(t, "Register", 1)
	assert.Nil(t, h.refusal())
	assert.Equal(t, int64(10), h.r.l.registered)

	// A lease later, established: a newcomer registers; it answers.
	h.clk.Set(t0.Add(2*DefaultLeaseDuration + time.Millisecond))
	h.step()
	h.see(withInstance(h.r.st, "a", 12, "new@host/2"))
	h.tr.On("Register", mock.Anything, role, codec.MemberID("a")).Return(int64(13), nil).Once()
	h.settle()
	h.tr.AssertNumberOfCalls(t, "Register", 2)
	assert.Nil(t, h.refusal())

	// The newcomer registers again within a lease: a standoff; this one leaves.
	h.clk.Set(t0.Add(2*DefaultLeaseDuration + DefaultLeaseDuration/2))
	h.see(withInstance(h.r.st, "a", 14, "new@host/2"))
	h.step()
	require.NotNil(t, h.refusal())
	assert.Equal(t, "new@host/2", h.refusal().Other)

	// A member within its first lease under the id, answered: refused.
	n := newInstanceHarness(t, "a")
	n.tr.On("AcquireEpoch", mock.Anything, role).Return(codec.Token{}, errors.New("not now")).Maybe()
	n.tr.On("Register", mock.Anything, role, codec.MemberID("a")).Return(int64(3), nil).Once()
	n.settle()
	n.clk.Set(t0.Add(DefaultLeaseDuration / 2))
	n.see(withInstance(n.r.st, "a", 4, "old@host/1"))
	n.step()
	require.NotNil(t, n.refusal())
	n.tr.AssertNumberOfCalls(t, "Register", 1)
}

// Leaving, a member deregisters only a registration of its own: not the
// other instance's whose registration is the id's newest.
func TestInstanceLeavingDoesNotDeregisterTheOthers(t *testing.T) {
	h := newInstanceHarness(t, "a")
	h.see(withInstance(state(role, nil, 0, "b", 1), "a", 5, "old@host/1"))
	require.Equal(t, DoWait, h.step().Kind)
	h.r.leave(context.Background())
	h.tr.AssertNotCalled(t, "Deregister", mock.Anything, mock.Anything, mock.Anything)
}

// A registration of the member's own instance that shows while it watches
// another instance's (a register call it gave up on, committed later) is
// no sign of the other's life: the member does not refuse itself (chaos
// seed 1202050001: "member id m3 is in use by instance X ...; this process
// (instance X) left"). The watch goes on for its lease; then the member
// adopts that registration as its own.
func TestInstanceOwnLateRegistrationDuringTheWatch(t *testing.T) {
	h := newInstanceHarness(t, "a")
	h.see(withInstance(state(role, nil, 0, "b", 1), "a", 5, "old@host/1"))
	require.Equal(t, DoWait, h.step().Kind)
	h.clk.Set(t0.Add(DefaultLeaseDuration / 2))
	h.see(withInstance(state(role, nil, 0, "b", 1), "a", 9, h.m.Instance()))
	a := h.step()
	assert.Nil(t, h.refusal(), "refused on its own registration")
	assert.Equal(t, DoWait, a.Kind, "still watching: %s", a.Reason)

	h.clk.Set(t0.Add(DefaultLeaseDuration))
	h.tr.On("AcquireEpoch", mock.Anything, role).Return(codec.Token{}, errors.New("not now")).Maybe()
	h.settle()
	assert.Nil(t, h.refusal())
	assert.Equal(t, int64(9), h.r.l.registered, "its own registration adopted")
	h.tr.AssertNotCalled(t, "Register", mock.Anything, mock.Anything, mock.Anything)
}
