package cmdlog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/IBM/sarama"

	"github.com/krabka/krole/internal/render"
	"github.com/krabka/krole/view"
)

// Outage turns the warnings a command's view and member log while the
// cluster is unreachable (one every retry, for each role: "kafka: client
// has run out of available brokers to talk to", offsets that went
// backwards after a restart) into one line when the outage begins and one
// when it ends, in the command's own style:
//
//	krole run: cluster unreachable since 02:08:10 (dial tcp 127.0.0.1:9092: connect: connection refused); ctl cannot be renewed or taken until it answers; retrying
//	krole run: the cluster answers again, at 02:08:52 after 42s (37 warnings not shown)
//
// An outage begins at the first warning whose error says the cluster
// cannot be reached or lost its data, or when the view's health says so
// ([view.Health]); it ends when the view is healthy again with an answer
// of a broker since the outage began. Warnings in between are counted and
// not shown, unless verbose. Other warnings are printed as one line,
// "krole CMD: warning: message key=value ...".
type Outage struct {
	lw       *Lines // the command's lines: "krole run: ..."
	affected string // what the outage stops, said in the first line
	Verbose  bool   // show the warnings during an outage too
	Quiet    bool   // track, but print no begin and end lines (the command says it)

	mu     sync.Mutex
	health func() view.Health
	since  time.Time // zero: no outage
	hidden int
}

// OutageCheckEvery is how often a command compares its view's health
// with the outage it reported.
const OutageCheckEvery = 500 * time.Millisecond

// NewOutage returns an outage reporter that writes the command's lines
// through lw; affected says what an outage stops.
func NewOutage(lw *Lines, affected string) *Outage {
	return &Outage{lw: lw, affected: affected}
}

func (o *Outage) printfLocked(format string, args ...any) { o.lw.Printf(format, args...) }

// begin starts an outage at now, with cause, unless one is on; it reports
// whether one was on already.
func (o *Outage) begin(now time.Time, cause string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.since.IsZero() {
		return true
	}
	o.since, o.hidden = now, 0
	if o.Quiet {
		return false
	}
	line := "cluster unreachable since " + render.Clock(now)
	if cause != "" {
		line += " (" + cause + ")"
	}
	if o.affected != "" {
		line += "; " + o.affected
	}
	o.printfLocked("%s; retrying", line)
	return false
}

// check compares the view's health with the outage: it begins one when
// the view says it cannot reach the cluster (or rebuilds its table), and
// ends one when the view is healthy again with an answer since it began.
func (o *Outage) check(now time.Time) {
	o.mu.Lock()
	health := o.health
	o.mu.Unlock()
	if health == nil {
		return
	}
	h := health()
	o.mu.Lock()
	on := !o.since.IsZero()
	o.mu.Unlock()
	switch {
	case !on && !h.Healthy && h.Reason != "the view has stopped" && h.Reason != "the view is not running" && (h.Unreachable || strings.Contains(h.Reason, "went backwards")):
		since := now
		if h.Unreachable && !h.LastContact.IsZero() {
			since = h.LastContact
		}
		o.begin(since, strings.TrimSuffix(healthCause(h), "."))
	case on && h.Healthy && h.LastContact.After(o.sinceTime()):
		o.mu.Lock()
		defer o.mu.Unlock()
		if o.since.IsZero() {
			return
		}
		if !o.Quiet {
			line := fmt.Sprintf("the cluster answers again, at %s after %v", render.Clock(now), render.RoundDuration(now.Sub(o.since)))
			switch {
			case o.hidden == 1:
				line += " (1 warning not shown)"
			case o.hidden > 1:
				line += fmt.Sprintf(" (%d warnings not shown)", o.hidden)
			}
			o.printfLocked("%s", line)
		}
		o.since, o.hidden = time.Time{}, 0
	}
}

func (o *Outage) sinceTime() time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.since
}

// healthCause is why an unhealthy view is not current, for the first line.
func healthCause(h view.Health) string {
	if h.Unreachable {
		return "no broker answers"
	}
	return h.Reason
}

// Follow checks the view's health every interval until ctx ends.
func (o *Outage) Follow(ctx context.Context, health func() view.Health, every time.Duration) {
	o.mu.Lock()
	o.health = health
	o.mu.Unlock()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			o.check(now)
		}
	}
}

// Wrap returns next wrapped: warnings that say the cluster is
// unreachable begin an outage, and no warning is passed on during one
// (unless verbose).
func (o *Outage) Wrap(next slog.Handler) slog.Handler {
	return &outageHandler{o: o, next: next}
}

type outageHandler struct {
	o     *Outage
	next  slog.Handler
	attrs []slog.Attr // WithAttrs's, searched for an error too
}

func (h *outageHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.next.Enabled(ctx, l)
}

func (h *outageHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn {
		return h.next.Handle(ctx, r)
	}
	if cause, ok := outageCause(r, h.attrs); ok {
		h.o.begin(time.Now(), cause)
	}
	if !h.o.Verbose {
		h.o.mu.Lock()
		on := !h.o.since.IsZero()
		if on {
			h.o.hidden++
		}
		h.o.mu.Unlock()
		if on {
			return nil
		}
	}
	return h.next.Handle(ctx, r)
}

func (h *outageHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &outageHandler{o: h.o, next: h.next.WithAttrs(as), attrs: append(append([]slog.Attr{}, h.attrs...), as...)}
}

func (h *outageHandler) WithGroup(name string) slog.Handler {
	return &outageHandler{o: h.o, next: h.next.WithGroup(name), attrs: h.attrs}
}

// outageCause reports whether r says that the cluster cannot be reached
// (or lost its data), and the shortest cause worth showing.
func outageCause(r slog.Record, attrs []slog.Attr) (string, bool) {
	if strings.Contains(r.Message, "offsets went backwards") {
		return "the role topic's offsets went backwards: the cluster restarted without its data, or the topic was recreated", true
	}
	var cause string
	found := false
	check := func(a slog.Attr) bool {
		err, ok := a.Value.Resolve().Any().(error)
		if !ok {
			return true
		}
		if c, ok := unreachableCause(err); ok {
			cause, found = c, true
			return false
		}
		return true
	}
	for _, a := range attrs {
		if !check(a) {
			return cause, true
		}
	}
	r.Attrs(check)
	return cause, found
}

// unreachableCause reports whether err says the cluster cannot be reached
// or lost its data, with the part of it worth showing: the dial error
// rather than sarama's sentence around it.
func unreachableCause(err error) (string, bool) {
	var backwards *view.OffsetsWentBackwardsError
	if errors.As(err, &backwards) {
		return "the role topic's offsets went backwards: the cluster restarted without its data, or the topic was recreated", true
	}
	var op *net.OpError
	if errors.As(err, &op) {
		return op.Error(), true
	}
	switch {
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF):
		return "", true
	case errors.Is(err, sarama.ErrOutOfBrokers), errors.Is(err, sarama.ErrNotConnected), errors.Is(err, sarama.ErrClosedClient):
		return "", true
	}
	// Errors flattened to text on their way (fmt.Errorf with %v).
	for _, s := range []string{"client has run out of available brokers", "connection refused", "i/o timeout"} {
		if strings.Contains(err.Error(), s) {
			if k := strings.LastIndex(err.Error(), "dial tcp "); k >= 0 {
				return err.Error()[k:], true
			}
			return "", true
		}
	}
	return "", false
}
