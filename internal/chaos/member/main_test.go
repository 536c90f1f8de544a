package main

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/krabka/krole/fencing"
)

// Each error a write can return gets its outcome; only a commit without
// an answer is "may-have-committed" (the text fencing's Txn.end gives it
// is the only thing that tells it from the other unknown outcomes).
func TestOutcome(t *testing.T) {
	commit := &fencing.Error{Kind: fencing.ErrUnknownOutcome, Role: "r", Err: errors.New("EndTxn commit under token 1/0 got no answer, and no success since: the transaction may have committed; the token is retired: EOF")}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, "ok"},
		{commit, "may-have-committed"},
		{fmt.Errorf("write: %w", commit), "may-have-committed"},
		{&fencing.Error{Kind: fencing.ErrUnknownOutcome, Role: "r", Err: errors.New("Produce under token 1/0 got no answer; the token is retired: EOF")}, "unknown-outcome"},
		{fencing.Fenced("r", nil), "fenced"},
		{&fencing.Error{Kind: fencing.ErrNotHeld, Role: "r"}, "not-held"},
		{&fencing.Error{Kind: fencing.ErrProducer, Role: "r"}, "producer"},
		{&fencing.Error{Kind: fencing.ErrClient, Role: "r"}, "client"},
		{&fencing.Error{Kind: fencing.ErrAdmin, Role: "r"}, "admin"},
		{fmt.Errorf("waiting: %w", context.Canceled), "context"},
		{errors.New("something else"), "error"},
	} {
		assert.Equal(t, tc.want, outcome(tc.err), "%v", tc.err)
	}
}
