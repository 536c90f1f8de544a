package fencing

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
)

// Transactions of one token take turns: one waits while another runs, a
// waiter whose ctx ends leaves without its turn, and once none runs or
// waits the token keeps no channel.
func TestTransactTakesTurnsPerToken(t *testing.T) {
	role, tok := codec.Role("r"), codec.Token{ProducerID: 1, Epoch: 0}
	tr := &BrokerTransport{holders: map[codec.Role]*holder{}, retired: map[codec.Role]codec.Token{}}
	h := newHolder(tok)
	tr.holders[role] = h
	users := func() (int32, bool) {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		return h.users, h.sem != nil
	}

	inFirst, endFirst := make(chan struct{}), make(chan struct{})
	firstDone := make(chan error, 1)
	go func() {
		firstDone <- tr.Transact(context.Background(), role, tok, func(*Txn) error {
			close(inFirst)
			<-endFirst
			return nil // nothing sent: no request reaches a broker
		})
	}()
	<-inFirst

	// A waiter whose ctx ends leaves.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := tr.Transact(ctx, role, tok, func(*Txn) error {
		t.Error("ran while the first held the turn")
		return nil
	})
	require.Error(t, err)
	assert.ErrorIs(t, err, context.DeadlineExceeded)

	// A second waits for the first's end, then runs.
	secondRan := make(chan struct{})
	secondDone := make(chan error, 1)
	go func() {
		secondDone <- tr.Transact(context.Background(), role, tok, func(*Txn) error {
			close(secondRan)
			return nil
		})
	}()
	require.Eventually(t, func() bool { n, _ := users(); return n == 2 }, 5*time.Second, time.Millisecond)
	select {
	case <-secondRan:
		t.Fatal("the second ran before the first ended")
	case <-time.After(20 * time.Millisecond):
	}
	close(endFirst)
	require.NoError(t, <-firstDone)
	<-secondRan
	require.NoError(t, <-secondDone)

	n, has := users()
	assert.Zero(t, n)
	assert.False(t, has, "an idle token keeps no channel")

	// And a later one gets a turn at once.
	require.NoError(t, tr.Transact(context.Background(), role, tok, func(*Txn) error { return nil }))
	_, has = users()
	assert.False(t, has)
}
