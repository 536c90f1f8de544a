// Package ctxcall makes a blocking call that takes no context (sarama's
// broker and client calls) return as soon as a context ends, and lets the
// caller close the connection such a call was abandoned on ([Conns]), or
// every connection of a client that stops, for good ([Conns.Shut]).
package ctxcall

import (
	"context"
	"sync"
	"time"
)

// Do runs fn on a goroutine of its own and returns its result, or ctx.Err()
// as soon as ctx ends, whichever comes first. An abandoned fn runs on to
// its own end (sarama's calls end within the client's timeouts). When
// inflight is not nil, it counts fn while it runs, so a caller can wait for
// abandoned calls before it acts on what they might still change. When
// ctx has ended before Do is called, fn is not called.
func Do[T any](ctx context.Context, inflight *sync.WaitGroup, fn func() (T, error)) (T, error) {
	return DoOr(ctx, inflight, fn, nil)
}

// DoOr is [Do] that calls abandon, when it is not nil, on the caller's
// goroutine once ctx has ended before fn returned, before DoOr returns
// ctx.Err(). It is where a caller cuts an abandoned call short, for
// example by closing its connection ([Conns.Close]).
func DoOr[T any](ctx context.Context, inflight *sync.WaitGroup, fn func() (T, error), abandon func()) (T, error) {
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
		if abandon != nil {
			abandon()
		}
		return zero, ctx.Err()
	}
}

// Sleep waits d, or until ctx ends (its error).
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
