package cli

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/internal/testcluster"
)

// TestLeaderPrintsHolderValue: `krole register --value` carries the value,
// `krole leader` prints the live holder's value, its member id when it has
// none, and exits 1 with one line when the role has no live holder.
func TestLeaderPrintsHolderValue(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	m := c.Members(t)
	r := runOn(t, c, "register", "db", "--member", "m1", "--value", "10.0.0.1:5432", "-o", "json")
	requireOK(t, r)
	var reg registerResult
	require.NoError(t, json.Unmarshal([]byte(r.Stdout), &reg))
	assert.Equal(t, "10.0.0.1:5432", reg.Value)
	requireOK(t, runOn(t, c, "register", "db", "--member", "m2"))

	assertOneLineError(t, runOn(t, c, "leader", "db"), ExitFailure)
	assert.Contains(t, runOn(t, c, "leader", "db").Stderr, "role db has no live holder")

	l := m.Lease("db", "m1", time.Hour)
	r = runOn(t, c, "leader", "db")
	requireOK(t, r)
	assert.Equal(t, "10.0.0.1:5432\n", r.Stdout)
	r = runOn(t, c, "leader", "db", "-o", "json")
	requireOK(t, r)
	var got leaderResult
	require.NoError(t, json.Unmarshal([]byte(r.Stdout), &got))
	assert.Equal(t, "10.0.0.1:5432", got.Value)
	assert.Equal(t, l.Token, got.Token)

	r = runOn(t, c, "table", "db")
	requireOK(t, r)
	assert.Regexp(t, `\ndb\s+m1\s+10\.0\.0\.1:5432\s+`+l.Token.String(), r.Stdout)

	m.Lease("db", "m2", time.Hour)
	r = runOn(t, c, "leader", "db")
	requireOK(t, r)
	assert.Equal(t, "m2\n", r.Stdout, "a holder without a value: its member id")

	now := time.Now()
	m.LeaseAt("db", "m2", now, now.Add(time.Millisecond)) // a release: the role is vacant
	assertOneLineError(t, runOn(t, c, "leader", "db"), ExitFailure)

	// Could not find out: exit 3, not the 1 of a vacant role.
	r = run(t, "leader", "db", "--brokers", strings.Join(c.Config.Brokers, ","), "--topic", "no.such.topic")
	assertOneLineError(t, r, ExitLeaderUnknown)
	assert.Contains(t, r.Stderr, "topic no.such.topic does not exist")
}

// TestLeaderUnreachable: `krole leader` against a cluster it cannot reach
// exits 3 (it could not find out), with one line saying why; a usage error
// stays 2.
func TestLeaderUnreachable(t *testing.T) {
	r := run(t, "leader", "db", "--brokers", "127.0.0.1:1")
	assertOneLineError(t, r, ExitLeaderUnknown)
	assert.Contains(t, r.Stderr, "krole: no broker answered at 127.0.0.1:1")
	assertOneLineError(t, run(t, "leader", "--brokers", "127.0.0.1:1"), ExitUsage)
	assertOneLineError(t, run(t, "leader", "db", "--brokers", "127.0.0.1:99999"), ExitUsage)
}

// TestValueTooLong: a value over the limit is a usage error naming it,
// before anything is written.
func TestValueTooLong(t *testing.T) {
	long := strings.Repeat("x", 257)
	for _, args := range [][]string{
		{"register", "db", "--member", "m1", "--value", long},
		{"run", "db", "--member", "m1", "--value", long, "--", "true"},
	} {
		r := run(t, append(args, "-b", "127.0.0.1:1")...)
		assertOneLineError(t, r, ExitUsage)
		assert.Contains(t, r.Stderr, "--value: invalid value")
		assert.Contains(t, r.Stderr, "257 bytes, more than the 256")
	}
}
