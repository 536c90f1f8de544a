package cli

import (
	"context"
	"log/slog"
	"sync"

	"github.com/krabka/krole/fencing"
)

// authzStop is a slog.Handler in front of a command's own, for the logs
// of a member and of a view: the first record that carries an
// authorization failure (an error value that [fencing.AuthorizationOf]
// finds a refusal in; a bare code comes from the view, whose one need is
// Read on the role topic) is not printed but handed to stop, once, as an
// [*fencing.AuthorizationError]. The member and the view retry a failed
// call with a backoff, so they would not spin; but no retry can add a
// missing ACL, so the command stops and exits 1 with the one line that
// names the ACL.
type authzStop struct {
	next  slog.Handler
	topic string // the role topic
	once  *sync.Once
	stop  func(error)
}

func newAuthzStop(next slog.Handler, topic string, stop func(error)) *authzStop {
	return &authzStop{next: next, topic: topic, once: new(sync.Once), stop: stop}
}

// refusal returns the authorization failure that err carries, or nil; a
// bare code is taken for the view's (Read on the role topic).
func refusal(err error, topic string) *fencing.AuthorizationError {
	return fencing.AuthorizationOf(err, fencing.AuthorizationError{Operation: "READ", Resource: fencing.ResourceTopic, Name: topic})
}

func (h *authzStop) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn || h.next.Enabled(ctx, l)
}

func (h *authzStop) Handle(ctx context.Context, r slog.Record) error {
	var denied error
	r.Attrs(func(a slog.Attr) bool {
		if err, ok := a.Value.Any().(error); ok {
			if ae := refusal(err, h.topic); ae != nil {
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
