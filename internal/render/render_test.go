package render

import (
	"bytes"
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/group"
	"github.com/krabka/krole/internal/groupsum"
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

func ptr(f float64) *float64 { return &f }

// A member holds the roles whose lease in the rows is live and names it.
func TestGroupsCountLiveLeases(t *testing.T) {
	rows := []server.Row{
		{Role: "a", Holder: &server.Holder{Member: "m1"}},
		{Role: "b", Holder: &server.Holder{Member: "m1"}},
		{Role: "c", Holder: &server.Holder{Member: "m2", Expired: true}},
		{Role: "d", Holder: &server.Holder{Member: "m2"}},
		{Role: "e"},
	}
	assert.Equal(t, map[codec.MemberID]int{"m1": 2, "m2": 1}, server.HeldRoles(rows))
}

// The balance of each group from its members and their holdings: MEAN
// over the members of positive weight, none when every member drains,
// MAX/MEAN none when they hold no role; groups in name order, and a
// draining member's roles still count as the group's.
func TestGroupTablesBalance(t *testing.T) {
	got := groupsum.Build(map[string][]group.Member{
		"web":     {{ID: "w1", Weight: 2}, {ID: "w2", Weight: 1}, {ID: "w3", Weight: 0}},
		"idle":    {{ID: "i1", Weight: 1}},
		"leaving": {{ID: "l1", Weight: 0}},
	}, map[codec.MemberID]int{"w1": 6, "w2": 3, "w3": 1, "l1": 2, "x": 9}, nil, 0)
	for _, g := range got {
		assert.Equal(t, []groupsum.Move{}, g.Moves, "no moves given")
	}
	assert.Equal(t, []groupsum.Group{
		{Group: "idle", Members: []groupsum.Member{{Member: "i1", Weight: 1}}, Mean: ptr(0), Moves: []groupsum.Move{}},
		{Group: "leaving", Members: []groupsum.Member{{Member: "l1", Draining: true, Roles: 2}}, Roles: 2, Max: 2, Moves: []groupsum.Move{}},
		{Group: "web", Members: []groupsum.Member{{Member: "w1", Weight: 2, Roles: 6}, {Member: "w2", Weight: 1, Roles: 3}, {Member: "w3", Draining: true, Roles: 1}},
			Roles: 10, Max: 6, Mean: ptr(5), MaxMean: ptr(1.2), Moves: []groupsum.Move{}},
	}, got)

	var b bytes.Buffer
	require.NoError(t, GroupTables(&b, got, "", time.Now()))
	assert.Equal(t, ""+
		"GROUP    MEMBER  WEIGHT  DRAINING  ROLES\n"+
		"idle     i1      1       no        0\n"+
		"leaving  l1      0       yes       2\n"+
		"web      w1      2       no        6\n"+
		"web      w2      1       no        3\n"+
		"web      w3      0       yes       1\n"+
		"\n"+
		"GROUP    MEMBERS  ROLES  MAX  MEAN  MAX/MEAN\n"+
		"idle     1        0      0    0.00  -\n"+
		"leaving  1        2      2    -     -\n"+
		"web      3        10     6    5.00  1.20\n", b.String())
}

// The moves' table: the last moves of each group, "-" for nobody before
// and for an unheld time not known, times relative to now.
func TestGroupTablesMoves(t *testing.T) {
	now := time.UnixMilli(1_700_000_010_000)
	got := groupsum.Build(map[string][]group.Member{"web": {{ID: "w1", Weight: 1}, {ID: "w2", Weight: 1}}},
		map[codec.MemberID]int{"w1": 1, "w2": 1}, map[string][]group.Move{"web": {
			{Role: "r0", To: "w1", At: 1_700_000_000_000, Cause: group.MoveJoin, Unheld: -1},
			{Role: "r1", To: "w1", At: 1_700_000_001_000, Cause: group.MoveJoin, Unheld: -1},
			{Role: "r1", From: "w1", To: "w2", At: 1_700_000_007_500, Cause: group.MoveDrain, Unheld: 12 * time.Millisecond},
		}}, 2)
	var b bytes.Buffer
	require.NoError(t, GroupTables(&b, got, "", now))
	assert.Equal(t, ""+
		"GROUP  MEMBER  WEIGHT  DRAINING  ROLES\n"+
		"web    w1      1       no        1\n"+
		"web    w2      1       no        1\n"+
		"\n"+
		"GROUP  MEMBERS  ROLES  MAX  MEAN  MAX/MEAN\n"+
		"web    2        2      1    1.00  1.00\n"+
		"\n"+
		"GROUP  ROLE  FROM  TO  CAUSE  AT                                 UNHELD\n"+
		"web    r1    -     w1  join   2023-11-14T22:13:21.000Z (9s ago)  -\n"+
		"web    r1    w1    w2  drain  2023-11-14T22:13:27.500Z (2s ago)  12ms\n", b.String())
}
