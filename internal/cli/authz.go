package cli

import (
	"context"
	"log/slog"
	"sync"

	"github.com/krabka/krole/fencing"
)

// authzStop is the slog.Handler in front of `krole run`'s own: the first
// record that carries an authorization failure ([fencing.ErrNotAuthorized],
// matched with errors.Is on the record's error values) is not printed but
// handed to stop, once. The member retries a failed call with a backoff,
// so it would not spin; but no retry can add a missing ACL, so krole run
// leaves and exits 1 with the one line that names the ACL.
type authzStop struct {
	next slog.Handler
	once *sync.Once
	stop func(error)
}

func newAuthzStop(next slog.Handler, stop func(error)) *authzStop {
	return &authzStop{next: next, once: new(sync.Once), stop: stop}
}

func (h *authzStop) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn || h.next.Enabled(ctx, l)
}

func (h *authzStop) Handle(ctx context.Context, r slog.Record) error {
	var denied error
	r.Attrs(func(a slog.Attr) bool {
		if err, ok := a.Value.Any().(error); ok && fencing.IsNotAuthorized(err) {
			denied = err
			return false
		}
		return true
	})
	if denied != nil {
		h.once.Do(func() { h.stop(denied) })
		return nil
	}
	if !h.next.Enabled(ctx, r.Level) {
		return nil
	}
	return h.next.Handle(ctx, r)
}

func (h *authzStop) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.next = h.next.WithAttrs(as)
	return &c
}

func (h *authzStop) WithGroup(name string) slog.Handler {
	c := *h
	c.next = h.next.WithGroup(name)
	return &c
}
