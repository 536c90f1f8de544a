package processor_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/processor"
	"github.com/krabka/krole/rolestate"
)

// registration returns member's candidacy of role in the observer's view.
func (e *env) registration(role codec.Role, member codec.MemberID) (rolestate.Candidate, bool) {
	st := e.state(role)
	if i := st.Rank(member); i >= 0 {
		return st.Candidates[i], true
	}
	return rolestate.Candidate{}, false
}

// awaitRefused waits for a member's Run to return ErrMemberInUse naming
// other, and returns the error.
func awaitRefused(t *testing.T, errc <-chan error, other string) *processor.MemberInUseError {
	t.Helper()
	select {
	case err := <-errc:
		require.ErrorIs(t, err, processor.ErrMemberInUse)
		var mu *processor.MemberInUseError
		require.True(t, errors.As(err, &mu))
		assert.Equal(t, other, mu.Other, "the error names the other instance")
		assert.Contains(t, err.Error(), other)
		return mu
	case <-time.After(20 * time.Second):
		t.Fatal("the second instance was not refused")
	}
	return nil
}

// A second process under the member id of the live holder is refused:
// its Run returns ErrMemberInUse naming the holder's instance, and it
// writes nothing: the holder keeps the role under the same token, its
// registration stays where it was, and it renews on.
func TestIntegrationSecondInstanceOfTheHolderIsRefused(t *testing.T) {
	e := newEnv(t, itTxnTimeout)
	role := codec.Role("dup-holder")
	s := itSettings()
	a := e.start("node-3", []codec.Role{role}, s, nil)
	holder, tok := e.settled(role, 10*time.Second)
	require.Equal(t, a.id, holder)
	before, ok := e.registration(role, a.id)
	require.True(t, ok)
	require.Equal(t, a.m.Instance(), before.Instance, "the registration names the instance that wrote it")

	b, errc := e.startErr("node-3", []codec.Role{role}, s)
	require.NotEqual(t, a.m.Instance(), b.m.Instance())
	mu := awaitRefused(t, errc, a.m.Instance())
	assert.Equal(t, b.m.Instance(), mu.Instance)

	// The holder was not disturbed: it renews under the same token (a
	// lease written after the refusal), Describe names it, and its
	// registration is the one it wrote.
	refusedAt := time.Now()
	await(t, 10*time.Second, "a renewal after the refusal", func() bool {
		w, ok := e.rec.lastWrite(role, a.id)
		return ok && w.Start.After(refusedAt)
	})
	e.agree(role, a.id, tok)
	after, ok := e.registration(role, a.id)
	require.True(t, ok, "the holder's registration is still there")
	assert.Equal(t, before, after, "nobody registered or deregistered node-3")
	assert.Len(t, e.rec.find(processor.Revoked, role, func(stamped) bool { return true }), 0, "the holder was never revoked")
	e.rec.checkFence(t)
}

// A second process under the id of a live candidate that does not hold
// the role (so writes nothing that shows it live) watches the
// registration for a lease, takes the id over, and the candidate answers
// by registering again: the newcomer is refused, and the candidate stays
// a candidate, registered by its own instance. The holder is untouched.
func TestIntegrationSecondInstanceOfACandidateIsRefused(t *testing.T) {
	e := newEnv(t, itTxnTimeout)
	role := codec.Role("dup-candidate")
	s := itSettings()
	h := e.start("node-1", []codec.Role{role}, s, nil)
	_, tok := e.settled(role, 10*time.Second)
	c := e.start("node-3", []codec.Role{role}, s, nil)
	e.awaitCandidate(role, c.id)
	time.Sleep(s.LeaseDuration) // on purpose: c has been the id's instance for a lease

	_, errc := e.startErr("node-3", []codec.Role{role}, s)
	awaitRefused(t, errc, c.m.Instance())
	await(t, 10*time.Second, "node-3 registered by its first instance", func() bool {
		reg, ok := e.registration(role, c.id)
		return ok && reg.Instance == c.m.Instance()
	})
	e.agree(role, h.id, tok)
	e.rec.checkFence(t)
}

// A member whose process died without leaving (here: stopped with
// KeepOnExit, which neither releases nor deregisters, as a SIGKILL)
// rejoins under the same id without manual steps: the new process
// watches the old registration for a lease, sees no sign of life, takes
// the id over and, alone, takes the role.
func TestIntegrationRestartedMemberRejoinsAfterItsOldInstanceDied(t *testing.T) {
	e := newEnv(t, itTxnTimeout)
	role := codec.Role("dup-restart")
	s := itSettings()
	a, tok := e.diedHolding("node-3", role, s)
	old, ok := e.registration(role, a.id)
	require.True(t, ok, "KeepOnExit left the registration")
	require.Equal(t, a.m.Instance(), old.Instance)

	b, errc := e.startErr("node-3", []codec.Role{role}, s)
	held := e.awaitNewerToken(role, tok, "the restarted node-3 holds the role")
	await(t, 10*time.Second, "node-3 registered by its new instance", func() bool {
		reg, ok := e.registration(role, b.id)
		return ok && reg.Instance == b.m.Instance()
	})
	e.agree(role, b.id, held)
	requireRunning(t, errc)
}
