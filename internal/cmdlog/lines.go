// Package cmdlog writes a command's lines on stderr, "krole CMD: ...", one
// writer at a time: the slog handler for the logs of a member and of a
// view, the outage reporter that folds the warnings of an unreachable
// cluster into one line when the outage begins and one when it ends, and
// the handler that stops a command at its first authorization failure.
package cmdlog

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/krabka/krole/internal/explain"
)

// Lines writes whole lines, "krole run: ...", one writer at a time.
type Lines struct {
	mu     sync.Mutex
	w      io.Writer
	prefix string // "krole observe"; "" is "krole run"
}

// NewLines returns the lines of a command on w, each begun with prefix
// ("krole observe"; "" is "krole run").
func NewLines(w io.Writer, prefix string) *Lines { return &Lines{w: w, prefix: prefix} }

// Locked returns w for output that shares the terminal with these lines.
// A file is returned as it is; any other writer (a buffer, when tests run
// the app in-process) takes the lines' lock around each write.
func (l *Lines) Locked(w io.Writer) io.Writer { return Locked(w, &l.mu) }

// Locked returns w as it is when it is a file, else wrapped to take mu
// around each write: os/exec copies a child's output to a writer that is
// not a file from a goroutine of its own.
func Locked(w io.Writer, mu *sync.Mutex) io.Writer {
	if _, ok := w.(*os.File); ok {
		return w
	}
	return &syncWriter{mu: mu, w: w}
}

type syncWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// Printf writes one line, folded to one if the message has several.
func (l *Lines) Printf(format string, args ...any) {
	msg := explain.OneLine(fmt.Sprintf(format, args...))
	l.mu.Lock()
	defer l.mu.Unlock()
	prefix := l.prefix
	if prefix == "" {
		prefix = "krole run"
	}
	fmt.Fprintf(l.w, "%s: %s\n", prefix, msg)
}

// Handler is the slog.Handler of the commands: one line per record,
// "krole run: LEVEL: message key=value ...", through the same Lines as
// the transitions.
type Handler struct {
	lw     *Lines
	level  slog.Level
	attrs  string // preformatted " key=value" pairs
	prefix string // group prefix of the keys, "g."
}

// NewHandler returns a handler that writes the records at level or above
// through lw.
func NewHandler(lw *Lines, level slog.Level) *Handler { return &Handler{lw: lw, level: level} }

func (h *Handler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }

func (h *Handler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(strings.ToLower(r.Level.String()))
	b.WriteString(": ")
	b.WriteString(r.Message)
	b.WriteString(h.attrs)
	r.Attrs(func(a slog.Attr) bool {
		appendAttr(&b, h.prefix, a)
		return true
	})
	h.lw.Printf("%s", b.String())
	return nil
}

func (h *Handler) WithAttrs(as []slog.Attr) slog.Handler {
	var b strings.Builder
	b.WriteString(h.attrs)
	for _, a := range as {
		appendAttr(&b, h.prefix, a)
	}
	c := *h
	c.attrs = b.String()
	return &c
}

func (h *Handler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	c := *h
	c.prefix += name + "."
	return &c
}

func appendAttr(b *strings.Builder, prefix string, a slog.Attr) {
	a.Value = a.Value.Resolve()
	if a.Equal(slog.Attr{}) {
		return
	}
	if a.Value.Kind() == slog.KindGroup {
		for _, g := range a.Value.Group() {
			appendAttr(b, prefix+a.Key+".", g)
		}
		return
	}
	v := a.Value.String()
	if v == "" || strings.ContainsAny(v, " \t\"=") {
		v = strconv.Quote(v)
	}
	b.WriteString(" ")
	b.WriteString(prefix + a.Key)
	b.WriteString("=")
	b.WriteString(v)
}
