package election

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/testcluster"
	"github.com/krabka/krole/rolestate"
)

// etcdSession makes a session as an etcd program makes one: New, Close
// when done, the role's Election; nothing run.
func etcdSession(t *testing.T, c *testcluster.Cluster, member codec.MemberID, role codec.Role) (*Session, *Election) {
	t.Helper()
	s, err := New(Config{Cluster: c.Config, Member: member, Roles: []codec.Role{role}, Settings: testSettings})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, s.Close()) })
	return s, mustElection(t, s, role)
}

// roleRecords returns role's records, read through a transport of the
// test's own.
func roleRecords(t *testing.T, c *testcluster.Cluster, role codec.Role) []rolestate.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	recs, err := c.Transport(t).ReadRoleRecords(ctx, role)
	require.NoError(t, err)
	return recs
}

// names reports whether r names member: its registration (or the removal
// of it), or its lease.
func names(r rolestate.Record, member codec.MemberID) bool {
	return r.Key.Member == member || (r.Record.Lease != nil && r.Record.Lease.Member == member)
}

// An etcd program: one session observes the role, two campaign for it.
// The observer only reads: it never holds, never registers and writes
// nothing; when the holder resigns, or its session closes, the role goes
// to the other campaigner, whose Campaign returns.
func TestObserverNeverCampaigns(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	for _, handover := range []string{"resign", "close"} {
		t.Run(handover, func(t *testing.T) {
			role := codec.Role("db-" + handover)
			ctx, cancel := context.WithTimeout(context.Background(), 2*waitFor)
			defer cancel()

			a, ea := etcdSession(t, c, "a", role)
			ha, err := ea.Campaign(ctx, "10.0.0.1:80")
			require.NoError(t, err)

			// The observer is configured as the campaigners are; it only
			// calls Observe and Leader.
			rec := newRecorder()
			obs, err := New(Config{Cluster: c.Config, Member: "obs", Roles: []codec.Role{role}, Settings: testSettings,
				OnEvent: rec.onEvent})
			require.NoError(t, err)
			t.Cleanup(func() { assert.NoError(t, obs.Close()) })
			eo := mustElection(t, obs, role)
			seen := eo.Observe(ctx)
			holderA := Holder{Member: "a", Token: ha.Token, Fence: ha.Fence, Value: "10.0.0.1:80"}
			require.Equal(t, holderA, <-seen)
			l, err := eo.Leader(ctx)
			require.NoError(t, err)
			assert.Equal(t, holderA, l)

			_, eb := etcdSession(t, c, "b", role)
			won := make(chan Holding, 1)
			go func() {
				h, err := eb.Campaign(ctx, "10.0.0.2:80")
				assert.NoError(t, err)
				won <- h
			}()
			require.Eventually(t, func() bool { // b queues behind a
				st, err := obs.View().Role(ctx, role)
				return err == nil && st.Rank("b") >= 0
			}, waitFor, 10*time.Millisecond)

			switch handover {
			case "resign":
				require.NoError(t, ea.Resign(ctx))
			case "close":
				require.NoError(t, a.Close())
			}
			var hb Holding
			select {
			case hb = <-won:
			case <-time.After(waitFor):
				t.Fatal("b's Campaign did not return after a stepped down")
			}
			assert.Equal(t, codec.MemberID("b"), hb.Member)
			assert.True(t, hb.Token.Newer(ha.Token))

			holderB := Holder{Member: "b", Token: hb.Token, Fence: hb.Fence, Value: "10.0.0.2:80"}
			sawB := false
			for h := range seen {
				if h.Member == "b" {
					assert.Equal(t, holderB, h)
					sawB = true
					break
				}
				assert.Equal(t, Holder{}, h, "between a and b: no holder, only")
			}
			assert.True(t, sawB, "the observer saw b take the role")
			l, err = eo.Leader(ctx)
			require.NoError(t, err)
			assert.Equal(t, holderB, l)
			tok, ok, err := c.Transport(t).Describe(ctx, role)
			require.NoError(t, err)
			require.True(t, ok)
			assert.Equal(t, hb.Token, tok, "the broker's token is b's")

			require.NoError(t, obs.Close())
			_, evs := rec.snapshot()
			assert.Empty(t, evs, "the observer's member never ran")
			for _, r := range roleRecords(t, c, role) {
				assert.False(t, names(r, "obs"), "a registration or lease of the observer: %+v", r)
			}
			sess, err := c.Transport(t).ReadSession(ctx, "obs")
			require.NoError(t, err)
			assert.Empty(t, sess, "the observer has no member session")
		})
	}
}

// A session without a member id or roles only reads: its Leader and
// Observe follow another session's holding of any role; Campaign and
// Resign are refused. Config.Roles without a Member, or a Member without
// Roles, is refused by New.
func TestReadOnlySession(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitFor)
	defer cancel()

	ro, err := New(Config{Cluster: c.Config})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, ro.Close()) })
	assert.Nil(t, ro.Member())
	_, err = ro.Election("a/b")
	assert.ErrorIs(t, err, codec.ErrInvalid)
	e := mustElection(t, ro, "db")
	_, err = e.Leader(ctx)
	assert.ErrorIs(t, err, ErrNoLeader)
	seen := e.Observe(ctx)
	assert.Equal(t, Holder{}, <-seen, "no holder yet")
	_, err = e.Campaign(ctx, "10.0.0.9:80")
	assert.ErrorIs(t, err, ErrReadOnly)
	assert.ErrorIs(t, e.Resign(ctx), ErrReadOnly)
	assert.ErrorIs(t, ro.Resign(ctx, "db"), ErrReadOnly)

	_, ea := etcdSession(t, c, "a", "db")
	ha, err := ea.Campaign(ctx, "10.0.0.1:80")
	require.NoError(t, err)
	holderA := Holder{Member: "a", Token: ha.Token, Fence: ha.Fence, Value: "10.0.0.1:80"}
	assert.Equal(t, holderA, <-seen)
	l, err := e.Leader(ctx)
	require.NoError(t, err)
	assert.Equal(t, holderA, l)
	require.NoError(t, ea.Resign(ctx))
	assert.Equal(t, Holder{}, <-seen, "released")

	require.NoError(t, ro.Close())
	_, open := <-seen
	assert.False(t, open, "Observe's channel closes when the session stops")
	recs := roleRecords(t, c, "db")
	require.NotEmpty(t, recs)
	for _, r := range recs {
		assert.True(t, names(r, "a"), "a record not of a's: %+v", r)
	}

	for name, cfg := range map[string]Config{
		"roles without a member": {Cluster: c.Config, Roles: []codec.Role{"db"}},
		"a member without roles": {Cluster: c.Config, Member: "a"},
		"a value without member": {Cluster: c.Config, Value: "10.0.0.1:80"},
	} {
		s, err := New(cfg)
		assert.Error(t, err, name)
		assert.Nil(t, s, name)
	}
}

// A member registers only for the role it campaigns for: a session of
// two roles that campaigns for one, and reads the other, is never a
// candidate of the other, and resigning the other writes nothing.
func TestCampaignRegistersForItsRoleOnly(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitFor)
	defer cancel()
	s, err := New(Config{Cluster: c.Config, Member: "a", Roles: []codec.Role{"r1", "r2"}, Settings: testSettings})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, s.Close()) })
	e1, e2 := mustElection(t, s, "r1"), mustElection(t, s, "r2")

	_, err = e2.Leader(ctx) // starts the session: its view only
	assert.ErrorIs(t, err, ErrNoLeader)
	h, err := e1.Campaign(ctx, "10.0.0.1:80")
	require.NoError(t, err)
	assert.Equal(t, Holder{}, <-e2.Observe(ctx))
	assert.ErrorIs(t, e2.Resign(ctx), ErrNotHolder)
	assert.ErrorIs(t, s.Resign(ctx, "r2"), ErrNotHolder)

	require.NoError(t, s.Close())
	for _, r := range roleRecords(t, c, "r2") {
		assert.False(t, names(r, "a"), "a registration or lease of a in r2: %+v", r)
	}
	st := readRole(t, c, "r1")
	require.NotNil(t, st.Lease)
	assert.Equal(t, h.Token, st.Lease.Token)
	assert.True(t, released(st), "Close resigned r1")
	assert.Empty(t, st.Candidates, "Close deregistered from r1")
}
