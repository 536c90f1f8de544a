package render

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/server"
	"github.com/krabka/krole/internal/testcluster"
	"github.com/krabka/krole/rolestate"
	"github.com/krabka/krole/view"
)

func TestRelative(t *testing.T) {
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{0, "now"},
		{-3 * time.Second, "3s ago"},
		{12 * time.Second, "in 12s"},
		{-(3*time.Minute + 4*time.Second), "3m04s ago"},
		{2*time.Hour + 5*time.Minute, "in 2h05m"},
		{-72 * time.Hour, "3d ago"},
	} {
		assert.Equal(t, tc.want, Relative(now.Add(tc.d), now), "%v", tc.d)
	}
	assert.Equal(t, "2025-01-02T03:04:05.000Z (now)", HumanTime(now.UnixMilli(), now))
}

func TestTimeLeft(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	// The holder's clock does not matter: the time left runs to Ends.
	h := func(ends int64) *server.Holder {
		return &server.Holder{Member: "m", GrantedAt: 5_000_000, Deadline: 5_100_000, Ends: time.UnixMilli(ends)}
	}
	for _, tc := range []struct {
		h    *server.Holder
		want string
	}{
		{nil, "none"},
		{&server.Holder{Member: "m", GrantedAt: 0, Deadline: 1, Expired: true}, "expired (released)"},
		{h(1_000_000), "expired"},
		{h(999_000), "expired"},
		{&server.Holder{Member: "m", GrantedAt: 900_000, Deadline: 1_005_000, Ends: time.UnixMilli(1_005_000), Expired: true}, "expired"}, // judged so earlier
		{&server.Holder{Member: "m", GrantedAt: 900_000, Deadline: 9_005_000, LeftMS: 4_250}, "4.2s"},                                     // from JSON: no Ends
		{h(1_004_250), "4.2s"},
		{h(1_000_050), "0.0s"},
		{h(1_042_900), "42s"},
		{h(1_000_000 + 65_000), "1m05s"},
		{h(1_000_000 + 2*3600_000 + 3*60_000), "2h03m"},
		{h(1_000_000 + 3*86400_000), "3d"},
	} {
		assert.Equal(t, tc.want, TimeLeft(tc.h, now), "%+v", tc.h)
	}
}

// TestWatchTerminal: on a terminal the table is redrawn in place on each
// change; a role that loses its last record leaves it unless it was named.
func TestWatchTerminal(t *testing.T) {
	ch := make(chan []server.Row)
	st := &server.Stream{C: ch}
	var out testcluster.SyncBuffer
	done := make(chan error, 1)
	now := func() time.Time { return time.UnixMilli(1_000_000) }
	var frames atomic.Int32 // health is asked once per frame
	contact := time.UnixMilli(990_000)
	health := func() view.Health {
		if frames.Add(1) >= 3 { // the third frame: the cluster went away
			return view.Health{Unreachable: true, Reason: "no broker", LastContact: contact, CaughtUpAt: contact.Add(-time.Second)}
		}
		return view.Health{Healthy: true}
	}
	go func() {
		done <- WatchTerminal(&out, st.C, []codec.Role{"named"}, "t.roles", now, health, time.Hour, nil)
	}()

	lease := &server.Holder{Member: "m1", Token: codec.Token{ProducerID: 7, Epoch: 1}, GrantedAt: 990_000, Deadline: 1_030_000, Ends: time.UnixMilli(1_030_000)}
	ch <- []server.Row{
		{Role: "a", Candidates: []rolestate.Candidate{{Member: "c1"}}},
		{Role: "b", Holder: lease, Candidates: []rolestate.Candidate{{Member: "m1"}, {Member: "m2", Rank: 1}}},
		{Role: "named", Candidates: []rolestate.Candidate{}},
	}
	ch <- []server.Row{{Role: "a", Candidates: []rolestate.Candidate{}}}      // a leaves
	ch <- []server.Row{{Role: "0first", Candidates: []rolestate.Candidate{}}} // never shown
	close(ch)
	require.NoError(t, <-done)

	drawn := strings.Split(out.String(), "\x1b[H")
	require.Len(t, drawn, 4, "one frame per batch: %q", out.String())
	clean := func(f string) string { return strings.ReplaceAll(strings.ReplaceAll(f, "\x1b[K", ""), "\x1b[J", "") }
	assert.Equal(t, "", drawn[0])
	assert.True(t, strings.HasSuffix(drawn[1], "\x1b[J"), "each frame erases what is below it")
	first := clean(drawn[1])
	assert.Regexp(t, `^krole table: topic t.roles, \d\d:\d\d:\d\d \(Ctrl-C to stop\)\n\nROLE\s+HOLDER\s+VALUE\s+TOKEN\s+LEFT\s+CANDIDATES\n`, first)
	assert.Regexp(t, `(?m)^a\s+-\s+-\s+-\s+none\s+c1$`, first)
	assert.Regexp(t, `(?m)^b\s+m1\s+-\s+7/1\s+30s\s+m1, m2$`, first)
	assert.Regexp(t, `(?m)^named\s+-\s+-\s+-\s+none\s+-$`, first)
	second := clean(drawn[2])
	assert.NotRegexp(t, `(?m)^a\s`, second)
	assert.Regexp(t, `(?m)^named\s`, second, "named roles stay")
	assert.NotContains(t, second, "unreachable")
	third := clean(drawn[3])
	assert.Contains(t, third, "\ncluster unreachable since "+Clock(contact)+"; data as of "+Clock(contact.Add(-time.Second))+"\n",
		"the health line under the title")
	assert.Equal(t, second[strings.Index(second, "ROLE"):], third[strings.Index(third, "ROLE"):], "the same table as of then")
}

// TestTableWatchSaysWhenTheClusterIsUnreachable: to a pipe, --watch

// NoteHealth says when the view stops being current, once more when it
// then finds the cluster unreachable, and once when it is current again;
// a spell that goes back and forth says nothing twice.
func TestNoteHealthSaysEachStateOnce(t *testing.T) {
	readings := []view.Health{
		{Healthy: true},
		{Reason: "not confirmed caught up"},
		{Unreachable: true},
		{Reason: "not confirmed caught up"},
		{Unreachable: true},
		{Healthy: true},
		{Healthy: true},
		{Unreachable: true},
		{Healthy: true},
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var i atomic.Int32
	health := func() view.Health {
		n := int(i.Add(1)) - 1
		if n >= len(readings)-1 {
			cancel()
			n = len(readings) - 1
		}
		return readings[n]
	}
	var out strings.Builder
	NoteHealth(ctx, &out, health, time.Millisecond)
	assert.Equal(t, []string{
		"krole table: not current: not confirmed caught up; the rows are the table as of then",
		"krole table: cluster unreachable; the rows are the table as of then",
		"krole table: the view is current again",
		"krole table: cluster unreachable; the rows are the table as of then",
		"krole table: the view is current again",
	}, strings.Split(strings.TrimSpace(out.String()), "\n"))
}
