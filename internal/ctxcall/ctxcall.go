// Package ctxcall makes a blocking call that takes no context (sarama's
// broker and client calls) return as soon as a context ends.
package ctxcall

import (
	"context"
	"sync"
)

// Do runs fn on a goroutine of its own and returns its result, or ctx.Err()
// as soon as ctx ends, whichever comes first. An abandoned fn runs on to
// its own end (sarama's calls end within the client's timeouts). When
// inflight is not nil, it counts fn while it runs, so a caller can wait for
// abandoned calls before it acts on what they might still change.
func Do[T any](ctx context.Context, inflight *sync.WaitGroup, fn func() (T, error)) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	if inflight != nil {
		inflight.Add(1)
	}
	go func() {
		if inflight != nil {
			defer inflight.Done()
		}
		v, err := fn()
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}
