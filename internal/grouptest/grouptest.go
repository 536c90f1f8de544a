// Package grouptest runs members of a group for the tests of what shows
// groups (the CLI's table, the server), and follows who holds what.
package grouptest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/election"
	"github.com/krabka/krole/group"
	"github.com/krabka/krole/internal/testcluster"
	"github.com/krabka/krole/processor"
)

// Holders is who holds which role of a group, by the members' Elected
// and Revoked events.
type Holders struct {
	mu      sync.Mutex
	holders map[codec.Role]map[codec.MemberID]bool
	changed chan struct{} // closed and replaced at every event
}

// NewHolders returns a Holders that has seen no event.
func NewHolders() *Holders {
	return &Holders{holders: map[codec.Role]map[codec.MemberID]bool{}, changed: make(chan struct{})}
}

// Note is a member's OnEvent.
func (g *Holders) Note(e processor.Event) {
	if e.Kind != processor.Elected && e.Kind != processor.Revoked {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.holders[e.Role] == nil {
		g.holders[e.Role] = map[codec.MemberID]bool{}
	}
	if e.Kind == processor.Elected {
		g.holders[e.Role][e.Member] = true
	} else {
		delete(g.holders[e.Role], e.Member)
	}
	close(g.changed)
	g.changed = make(chan struct{})
}

// counts returns how many of roles each member holds, false unless every
// role has one holder, and a channel closed at the next event.
func (g *Holders) counts(roles []codec.Role) (map[codec.MemberID]int, bool, <-chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	out, ok := map[codec.MemberID]int{}, true
	for _, r := range roles {
		if len(g.holders[r]) != 1 {
			ok = false
		}
		for m := range g.holders[r] {
			out[m]++
		}
	}
	return out, ok, g.changed
}

// Await waits, event by event, until every role has one holder and the
// members hold want of them, for a minute at most.
func (g *Holders) Await(t *testing.T, roles []codec.Role, want map[codec.MemberID]int) {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		got, ok, changed := g.counts(roles)
		if ok && fmt.Sprint(got) == fmt.Sprint(want) {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			require.FailNow(t, "the group did not settle", "want %v, hold %v (one holder each: %v)", want, got, ok)
		}
	}
}

// StartMember runs member as a member of group name over roles on c (lease
// 3 s), its events noted in holders; the session is stopped when the test
// ends, and its Run must return no error.
func StartMember(t *testing.T, c *testcluster.Cluster, member codec.MemberID, name string, roles []codec.Role, holders *Holders) *election.Session {
	t.Helper()
	sess, err := election.New(election.Config{
		Cluster: c.Config, Member: member, Roles: roles,
		Settings: processor.Settings{LeaseDuration: 3 * time.Second},
		Group:    &processor.Group{Name: name}, OnEvent: holders.Note,
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sess.Run(ctx, nil) }()
	t.Cleanup(func() {
		cancel()
		assert.NoError(t, <-done, "%s's run", member)
	})
	return sess
}

// Shards is the group the tests of a group's balance run: shards, over
// the roles shard-0 to shard-11, of the members node-a, node-b and
// node-c.
type Shards struct {
	Roles    []codec.Role
	Holders  *Holders
	Sessions map[codec.MemberID]*election.Session // by member
}

// StartShards starts the three members of [Shards] on c (see
// [StartMember]) and waits until each holds 4 roles.
func StartShards(t *testing.T, c *testcluster.Cluster) *Shards {
	t.Helper()
	roles, err := group.Expand("shard-{0..11}")
	require.NoError(t, err)
	s := &Shards{Roles: roles, Holders: NewHolders(), Sessions: map[codec.MemberID]*election.Session{}}
	for _, m := range []codec.MemberID{"node-a", "node-b", "node-c"} {
		s.Sessions[m] = StartMember(t, c, m, "shards", roles, s.Holders)
	}
	s.Await(t, map[codec.MemberID]int{"node-a": 4, "node-b": 4, "node-c": 4})
	return s
}

// Await waits until the members hold the group's roles as want says
// (see [Holders.Await]).
func (s *Shards) Await(t *testing.T, want map[codec.MemberID]int) {
	t.Helper()
	s.Holders.Await(t, s.Roles, want)
}
