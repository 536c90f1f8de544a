package fencing_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
)

var kinds = []error{
	fencing.ErrFenced, fencing.ErrNotHeld, fencing.ErrProducer,
	fencing.ErrClient, fencing.ErrAdmin, fencing.ErrRecord,
}

func TestErrorMessages(t *testing.T) {
	cause := errors.New("broker said no")
	for _, tc := range []struct {
		err  *fencing.Error
		want string
	}{
		{fencing.Fenced("controller", nil), "fenced: another member holds role controller"},
		{fencing.Fenced("controller", cause), "fenced: another member holds role controller"},
		{&fencing.Error{Kind: fencing.ErrNotHeld, Role: "controller"}, "not held: this transport holds no such token for role controller"},
		{&fencing.Error{Kind: fencing.ErrNotHeld, Role: "controller", Err: cause}, "not held: role controller: broker said no"},
		{&fencing.Error{Kind: fencing.ErrProducer, Role: "controller", Err: cause}, "producer: role controller: broker said no"},
		{&fencing.Error{Kind: fencing.ErrClient, Role: "controller", Err: cause}, "client: role controller: broker said no"},
		{&fencing.Error{Kind: fencing.ErrAdmin, Role: "controller", Err: cause}, "admin: role controller: broker said no"},
		{&fencing.Error{Kind: fencing.ErrRecord, Role: "controller", Err: cause}, "record: role controller: broker said no"},
		{&fencing.Error{Kind: fencing.ErrRecord, Role: "controller"}, "record: role controller"},
	} {
		assert.Equal(t, tc.want, tc.err.Error())
	}
}

func TestErrorsIsMatchesTheKindThroughWrapping(t *testing.T) {
	cause := errors.New("cause")
	for _, kind := range kinds {
		e := &fencing.Error{Kind: kind, Role: codec.Role("r"), Err: cause}
		wrapped := fmt.Errorf("renewing: %w", fmt.Errorf("attempt 3: %w", e))
		for _, other := range kinds {
			assert.Equal(t, other == kind, errors.Is(wrapped, other), "kind %v, target %v", kind, other)
		}
		assert.ErrorIs(t, wrapped, cause, "the cause is reachable through Unwrap")
		var got *fencing.Error
		require.ErrorAs(t, wrapped, &got)
		assert.Same(t, e, got)
		assert.Equal(t, kind == fencing.ErrFenced, fencing.IsFenced(wrapped))
	}
}

func TestErrorUnwrap(t *testing.T) {
	cause := errors.New("cause")
	assert.Same(t, cause, errors.Unwrap(fencing.Fenced("r", cause)))
	assert.Nil(t, errors.Unwrap(fencing.Fenced("r", nil)))
	e := &fencing.Error{Kind: fencing.ErrClient, Err: cause}
	assert.Same(t, cause, e.Unwrap())
}

func TestIsFenced(t *testing.T) {
	assert.True(t, fencing.IsFenced(fencing.Fenced("r", nil)))
	assert.True(t, fencing.IsFenced(fmt.Errorf("x: %w", fencing.Fenced("r", nil))))
	assert.True(t, fencing.IsFenced(fencing.ErrFenced))
	assert.False(t, fencing.IsFenced(nil))
	assert.False(t, fencing.IsFenced(errors.New("fenced")), "only the sentinel's identity counts, not its text")
	assert.False(t, fencing.IsFenced(&fencing.Error{Kind: fencing.ErrNotHeld, Role: "r"}))
	assert.False(t, fencing.IsFenced(&fencing.Error{Kind: fencing.ErrProducer, Role: "r", Err: fencing.ErrClient}))
}

func TestFencedCarriesRoleAndCause(t *testing.T) {
	cause := errors.New("PRODUCER_FENCED")
	e := fencing.Fenced("billing", cause)
	assert.Equal(t, fencing.ErrFenced, e.Kind)
	assert.Equal(t, codec.Role("billing"), e.Role)
	assert.Same(t, cause, e.Err)
}
