package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/election"
	"github.com/krabka/krole/internal/grouptest"
	"github.com/krabka/krole/internal/testcluster"
	"github.com/krabka/krole/processor"
)

// watchedBuffer is a buffer whose writers wake those waiting for its
// text (await).
type watchedBuffer struct {
	mu      sync.Mutex
	b       bytes.Buffer
	changed chan struct{} // closed and replaced at every write
}

func newWatchedBuffer() *watchedBuffer { return &watchedBuffer{changed: make(chan struct{})} }

func (w *watchedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	close(w.changed)
	w.changed = make(chan struct{})
	return w.b.Write(p)
}

func (w *watchedBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// await waits, write by write, until ok holds for the text written, for
// at most a minute.
func (w *watchedBuffer) await(t *testing.T, what string, ok func(string) bool) {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		w.mu.Lock()
		text, changed := w.b.String(), w.changed
		w.mu.Unlock()
		if ok(text) {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			require.FailNow(t, "waited a minute for "+what, "written: %q", text)
		}
	}
}

// Bad input is a usage error: one line (and a hint), exit 2, before
// anything connects.
func TestDrainUsageErrors(t *testing.T) {
	t.Setenv("KROLE_MEMBER", "")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no member", []string{"drain"}, "drain needs --member M (or KROLE_MEMBER): the member id"},
		{"bad member", []string{"drain", "--member", "a/b"}, `invalid member id "a/b"`},
		{"an argument", []string{"drain", "shards", "--member", "node-1"}, `drain takes no arguments, got "shards"`},
		{"negative timeout", []string{"drain", "--member", "node-1", "--timeout", "-1s"}, "--timeout -1s: must not be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, tc.args...)
			assertOneLineError(t, r, ExitUsage)
			assert.Contains(t, r.Stderr, "krole: "+tc.want)
		})
	}
}

// krole drain --member M drains M, a member of a group running in
// another process (here, a session of its own): M hands every role over,
// and drain prints one line once M's heartbeat says it drains and no live
// lease names it. With --no-wait it returns once the request is written.
// A member with nobody to hand its roles to makes it give up at
// --timeout, exit 1. A member that is not running, and one in no group,
// are refused, exit 1, with nothing written.
func TestDrainMemberOfAGroup(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{})
	shards := grouptest.StartShards(t, c)

	r := runOn(t, c, "drain", "--member", "node-b")
	requireOK(t, r)
	assert.Equal(t, "member node-b drained: 0 roles held\n", r.Stdout)
	assert.Empty(t, r.Stderr)
	shards.Await(t, map[codec.MemberID]int{"node-a": 6, "node-c": 6})

	r = runOn(t, c, "drain", "--member", "node-c", "--no-wait", "-o", "json")
	requireOK(t, r)
	var res map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.Stdout), &res), r.Stdout)
	assert.ElementsMatch(t, []string{"member", "group", "nonce", "requested_at", "drained", "roles"}, keys(res))
	assert.Equal(t, "node-c", res["member"])
	assert.Equal(t, "shards", res["group"])
	assert.Equal(t, false, res["drained"])
	assert.NotEmpty(t, res["nonce"])
	shards.Await(t, map[codec.MemberID]int{"node-a": 12})

	// The last member of a group has nobody to hand its roles to: drain
	// gives up at --timeout, saying how far it got.
	lone := []codec.Role{"lone-0", "lone-1"}
	loneHolders := grouptest.NewHolders()
	grouptest.StartMember(t, c, "loner", "lonely", lone, loneHolders)
	loneHolders.Await(t, lone, map[codec.MemberID]int{"loner": 2})
	r = runOn(t, c, "drain", "--member", "loner", "--timeout", "3s")
	assertOneLineError(t, r, ExitFailure)
	assert.Contains(t, r.Stderr, "krole: member loner did not drain within --timeout 3s: it drains, and still holds 2 roles; the request stays")

	r = runOn(t, c, "drain", "--member", "node-z")
	assertOneLineError(t, r, ExitFailure)
	assert.Contains(t, r.Stderr, "krole: member node-z has no live session")

	// A member in no group: its heartbeats name none.
	elected := make(chan struct{})
	var once sync.Once
	solo, err := election.New(election.Config{Cluster: c.Config, Member: "solo", Roles: []codec.Role{"cron"},
		Settings: processor.Settings{LeaseDuration: 3 * time.Second},
		OnEvent: func(e processor.Event) {
			if e.Kind == processor.Elected {
				once.Do(func() { close(elected) })
			}
		}})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- solo.Run(ctx, nil) }()
	t.Cleanup(func() {
		cancel()
		assert.NoError(t, <-done, "solo's run")
	})
	select {
	case <-elected:
	case <-time.After(time.Minute):
		t.Fatal("solo did not take cron")
	}
	r = runOn(t, c, "drain", "--member", "solo")
	assertOneLineError(t, r, ExitFailure)
	assert.Contains(t, r.Stderr, "krole: member solo is in no group")
	ok, err := solo.View().DrainRequested(context.Background(), "solo", "")
	require.NoError(t, err)
	assert.False(t, ok)
	_, written, err := solo.View().DrainRequest(context.Background(), "solo")
	require.NoError(t, err)
	assert.False(t, written, "nothing is written for a member in no group")
}

// krole run --slots exits 0 once a drain request has made it hand its
// slot over: its slot passes to the member that waited for it.
func TestRunSlotsLeavesWhenDrained(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stdout, stderr := newWatchedBuffer(), newWatchedBuffer()
	args := append(append(append(clusterFlags(c), "run", "jobs", "--slots", "1"), testTimingFlags()...), "--member", "w1")
	done := startApp(t, ctx, args, stdout, stderr)
	stdout.await(t, "w1's token (it holds the slot)", func(s string) bool { return strings.Contains(s, "/") })

	holders := grouptest.NewHolders()
	slots := []codec.Role{"jobs-slot-0"}
	grouptest.StartMember(t, c, "w2", "jobs", slots, holders)
	r := runOn(t, c, "drain", "--member", "w1")
	requireOK(t, r)
	assert.Equal(t, "member w1 drained: 0 roles held\n", r.Stdout)
	holders.Await(t, slots, map[codec.MemberID]int{"w2": 1})
	select {
	case code := <-done:
		assert.Equal(t, ExitOK, code, "stderr:\n%s", stderr.String())
	case <-time.After(time.Minute):
		t.Fatalf("krole run did not exit after its drain; stderr:\n%s", stderr.String())
	}
	assert.Contains(t, stderr.String(), "krole run: drained on request (krole drain): holding no slot of jobs; leaving\n")
}
