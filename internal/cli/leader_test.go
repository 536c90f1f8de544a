package cli

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/IBM/sarama"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/testcluster"
)

// TestLeaderPrintsHolderValue: `krole register --value` carries a
// candidate's value; `krole leader` prints the live holder's value (the
// one its lease carries), its member id when it has none, and exits 1
// with one line when the role has no live holder.
func TestLeaderPrintsHolderValue(t *testing.T) {
	t.Parallel()
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

	// The holder's value is the one its lease carries, written under its
	// token (as `krole run --value` writes it), not its registration's.
	l := leaseWithValue(t, m, "db", "m1", "10.0.0.1:5432")
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
	t.Parallel()
	r := run(t, "leader", "db", "--brokers", "127.0.0.1:1")
	assertOneLineError(t, r, ExitLeaderUnknown)
	assert.Contains(t, r.Stderr, "krole: no broker answered at 127.0.0.1:1")
	assertOneLineError(t, run(t, "leader", "--brokers", "127.0.0.1:1"), ExitUsage)
	assertOneLineError(t, run(t, "leader", "db", "--brokers", "127.0.0.1:99999"), ExitUsage)
}

// TestValueTooLong: a value over the limit is a usage error naming it,
// before anything is written.
func TestValueTooLong(t *testing.T) {
	t.Parallel()
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

// leaseWithValue writes a lease of member for role, an hour long, under a
// new epoch, carrying value, as a holder's session writes it.
func leaseWithValue(t *testing.T, m *testcluster.Members, role codec.Role, member codec.MemberID, value string) codec.Lease {
	t.Helper()
	ctx := m.Context()
	tok, err := m.Transport.AcquireEpoch(ctx, role)
	require.NoError(t, err)
	now := time.Now()
	l, err := codec.NewLease(member, tok, now.UnixMilli(), now.Add(time.Hour).UnixMilli())
	require.NoError(t, err)
	l.Value = value
	require.NoError(t, leaseErr(m.Transport.WriteLease(ctx, role, tok, l)))
	return l
}

// TestLeaderValueOnlyItsHolderSets: a plain append (kcat) re-registering
// the holder with another value does not change what `krole leader` and
// `krole table` report for the holder; values with control characters
// read from the topic (a stranger's registration, a member's lease) are
// printed escaped and quoted, with no raw control byte.
func TestLeaderValueOnlyItsHolderSets(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	m := c.Members(t)
	requireOK(t, runOn(t, c, "register", "svc", "--member", "node-1", "--value", "10.0.0.7:8080"))
	leaseWithValue(t, m, "svc", "node-1", "10.0.0.7:8080")

	// kcat -P: a plain append of node-1's registration with the
	// stranger's value, and one of another member with control bytes.
	sc, err := c.Config.Sarama()
	require.NoError(t, err)
	prod, err := sarama.NewSyncProducer(c.Config.Brokers, sc)
	require.NoError(t, err)
	defer prod.Close()
	for member, value := range map[codec.MemberID]string{"node-1": "evil.example:6666", "node-2": "x\x1b]0;pwned\a\r\nEVIL"} {
		b, err := codec.EncodeRecord(codec.Record{Registration: &codec.Registration{Member: member, RegisteredAt: 1, Value: value}})
		require.NoError(t, err)
		_, _, err = prod.SendMessage(&sarama.ProducerMessage{Topic: c.Config.Topic, Partition: 0,
			Key: sarama.ByteEncoder(codec.RegistrationKey("svc", member).Encode()), Value: sarama.ByteEncoder(b)})
		require.NoError(t, err)
	}
	r := runOn(t, c, "leader", "svc")
	requireOK(t, r)
	assert.Equal(t, "10.0.0.7:8080\n", r.Stdout, "a plain append cannot change the holder's value")
	r = runOn(t, c, "table", "svc")
	requireOK(t, r)
	assert.Contains(t, r.Stdout, "10.0.0.7:8080")
	assert.NotContains(t, r.Stdout, "evil.example")
	noControlBytes(t, r.Stdout)

	// A lease whose value has control characters (written under the
	// role's transactional id, by a member that skipped the check).
	leaseWithValue(t, m, "svc", "node-2", "x\x1b]0;pwned\a\r\nEVIL")
	r = runOn(t, c, "leader", "svc")
	requireOK(t, r)
	assert.Equal(t, `"x\x1b]0;pwned\a\r\nEVIL"`+"\n", r.Stdout)
	noControlBytes(t, r.Stdout)
	r = runOn(t, c, "table", "svc")
	requireOK(t, r)
	noControlBytes(t, r.Stdout)
	r = runOn(t, c, "leader", "svc", "-o", "json")
	requireOK(t, r)
	noControlBytes(t, r.Stdout)
	var got leaderResult
	require.NoError(t, json.Unmarshal([]byte(r.Stdout), &got))
	assert.Equal(t, "x\x1b]0;pwned\a\r\nEVIL", got.Value, "JSON escapes, and keeps the value as written")
}

// noControlBytes asserts that out holds no control byte but newlines (and
// tabs of tables).
func noControlBytes(t *testing.T, out string) {
	t.Helper()
	for i, r := range out {
		if r != '\n' && r != '\t' && unicode.IsControl(r) {
			t.Errorf("control character %U at byte %d of %q", r, i, out)
		}
	}
}

// TestValueWithControlCharactersIsRefused: `krole run --value` and
// `krole register --value` refuse a value with a control character, with
// one line naming it, before anything is written.
func TestValueWithControlCharactersIsRefused(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"register", "db", "--member", "m1", "--value", "a\x1b[2Jb"},
		{"run", "db", "--member", "m1", "--value", "a\r\nb", "--", "true"},
	} {
		r := run(t, append(args, "-b", "127.0.0.1:1")...)
		assertOneLineError(t, r, ExitUsage)
		assert.Contains(t, r.Stderr, "--value: invalid value")
		assert.Contains(t, r.Stderr, "control character")
		noControlBytes(t, r.Stderr)
	}
}
