package cmdlog

import (
	"context"
	"log/slog"
	"sync"

	"github.com/krabka/krole/internal/explain"
)

// AuthzStop is a slog.Handler in front of a command's own, for the logs
// of a member and of a view: the first record that carries an
// authorization failure (an error value that [fencing.AuthorizationOf]
// finds a refusal in; a bare code comes from the view, whose one need is
// Read on the role topic) is not printed but handed to stop, once, as an
// [*fencing.AuthorizationError]. The member and the view retry a failed
// call with a backoff, so they would not spin; but no retry can add a
// missing ACL, so the command stops and exits 1 with the one line that
// names the ACL.
type AuthzStop struct {
	next  slog.Handler
	topic string // the role topic
	once  *sync.Once
	stop  func(error)
}

func NewAuthzStop(next slog.Handler, topic string, stop func(error)) *AuthzStop {
	return &AuthzStop{next: next, topic: topic, once: new(sync.Once), stop: stop}
}

func (h *AuthzStop) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn || h.next.Enabled(ctx, l)
}

func (h *AuthzStop) Handle(ctx context.Context, r slog.Record) error {
	var denied error
	r.Attrs(func(a slog.Attr) bool {
		if err, ok := a.Value.Any().(error); ok {
			if ae := explain.Refusal(err, h.topic); ae != nil {
				denied = ae
				return false
			}
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

func (h *AuthzStop) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.next = h.next.WithAttrs(as)
	return &c
}

func (h *AuthzStop) WithGroup(name string) slog.Handler {
	c := *h
	c.next = h.next.WithGroup(name)
	return &c
}
