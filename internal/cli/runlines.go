package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
)

// lineWriter writes whole lines, "krole run: ...", one writer at a time.
type lineWriter struct {
	mu     sync.Mutex
	w      io.Writer
	prefix string // "krole observe"; "" is "krole run"
}

func (l *lineWriter) printf(format string, args ...any) {
	msg := oneLine(fmt.Sprintf(format, args...))
	l.mu.Lock()
	defer l.mu.Unlock()
	prefix := l.prefix
	if prefix == "" {
		prefix = "krole run"
	}
	fmt.Fprintf(l.w, "%s: %s\n", prefix, msg)
}

// lineHandler is the slog.Handler of `krole run`: one line per record,
// "krole run: LEVEL: message key=value ...", through the same lineWriter as
// the transitions.
type lineHandler struct {
	lw     *lineWriter
	level  slog.Level
	attrs  string // preformatted " key=value" pairs
	prefix string // group prefix of the keys, "g."
}

func (h *lineHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }

func (h *lineHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(strings.ToLower(r.Level.String()))
	b.WriteString(": ")
	b.WriteString(r.Message)
	b.WriteString(h.attrs)
	r.Attrs(func(a slog.Attr) bool {
		appendAttr(&b, h.prefix, a)
		return true
	})
	h.lw.printf("%s", b.String())
	return nil
}

func (h *lineHandler) WithAttrs(as []slog.Attr) slog.Handler {
	var b strings.Builder
	b.WriteString(h.attrs)
	for _, a := range as {
		appendAttr(&b, h.prefix, a)
	}
	c := *h
	c.attrs = b.String()
	return &c
}

func (h *lineHandler) WithGroup(name string) slog.Handler {
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
