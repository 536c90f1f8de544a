package ctxcall

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestDoReturnsTheResult(t *testing.T) {
	v, err := Do(context.Background(), nil, func() (int, error) { return 7, errors.New("e") })
	assert.Equal(t, 7, v)
	assert.EqualError(t, err, "e")
}

func TestDoReturnsWhenContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	release := make(chan struct{})
	var inflight sync.WaitGroup
	go cancel()
	_, err := Do(ctx, &inflight, func() (int, error) { <-release; return 1, nil })
	assert.ErrorIs(t, err, context.Canceled, "the blocked call is abandoned")
	close(release)
	inflight.Wait() // the abandoned call is still counted until it ends
}

func TestDoDoesNotStartAfterTheContextEnded(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	called := false
	_, err := Do(ctx, nil, func() (int, error) { called = true; return 0, nil })
	assert.ErrorIs(t, err, context.Canceled)
	assert.False(t, called)
}
