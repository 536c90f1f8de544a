package bench

import (
	"strings"
	"sync"
	"time"
)

// tail keeps the last bytes a member process wrote, for the error that
// says why it exited; with stamp (a traced `krole run` member), every
// line too, with when it reached this process.
type tail struct {
	mu      sync.Mutex
	buf     []byte
	stamp   bool
	partial []byte
	lines   []stampedLine
}

// stampedLine is a line a member wrote and when it reached the bench.
type stampedLine struct {
	at   time.Time
	line string
}

func (t *tail) Write(p []byte) (int, error) {
	at := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > 4096 {
		t.buf = t.buf[len(t.buf)-4096:]
	}
	if t.stamp {
		t.partial = append(t.partial, p...)
		for {
			i := strings.IndexByte(string(t.partial), '\n')
			if i < 0 {
				break
			}
			t.lines = append(t.lines, stampedLine{at: at, line: string(t.partial[:i])})
			t.partial = t.partial[i+1:]
		}
	}
	return len(p), nil
}

// lineAfter returns when the first line at or after since that contains
// substr reached the bench; zero when none has.
func (t *tail) lineAfter(since time.Time, substr string) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, l := range t.lines {
		if !l.at.Before(since) && strings.Contains(l.line, substr) {
			return l.at
		}
	}
	return time.Time{}
}

// awaitLineAfter waits up to d for a line at or after since that contains
// substr, and returns when it reached the bench; zero when none came.
func (t *tail) awaitLineAfter(since time.Time, substr string, d time.Duration) time.Time {
	deadline := time.Now().Add(d)
	for {
		if at := t.lineAfter(since, substr); !at.IsZero() || !time.Now().Before(deadline) {
			return at
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// lastLines is the last n lines.
func (t *tail) lastLines(n int) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := strings.Split(strings.TrimSpace(string(t.buf)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// last is the last line.
func (t *tail) last() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := strings.Split(strings.TrimSpace(string(t.buf)), "\n")
	return lines[len(lines)-1]
}
