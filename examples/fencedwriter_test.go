package examples

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
)

// TestFencedWriter runs examples/fencedwriter as two processes of one
// role and takes the role from its holder twice:
//
//   - it pauses the holder (SIGSTOP) until the other has taken the role,
//     then resumes it: the paused one must find that it lost the role;
//   - an intruder acquires the role's epoch and writes a heartbeat of its
//     own: the holder's next write is refused by the broker, and it must
//     give the role up, to be followed by a holder with a newer token.
//
// Then it reads the heartbeats with read_committed isolation: in log order
// the tokens never go back (nothing written under a token shows after a
// newer token's write, which is what the fence guarantees), and each
// token's heartbeats are numbered 0, 1, 2, ... with no gap or repeat.
// SIGTERM makes both processes exit 0.
func TestFencedWriter(t *testing.T) {
	e := newEnv(t)
	bin := build(t, "fencedwriter")
	role, out := e.c.Name("beat"), e.c.Name("heartbeats")
	args := append(e.flags(), "--role", role, "--output", out, "--create-topics", "--interval", "20ms", "--lease-duration", "1s")

	a := start(t, bin, "a", args...)
	a.waitLine(t, 0, msg("writing heartbeats"))
	b := start(t, bin, "b", args...)
	b.waitLine(t, 0, msg("registered"))

	// Pause the holder: b takes over once a's lease has run out.
	first := e.holder(role)
	require.Equal(t, codec.MemberID("a"), first.Member)
	aMark := a.mark()
	require.NoError(t, a.signal(syscall.SIGSTOP))
	b.waitLine(t, 0, msg("writing heartbeats"))
	second := e.holder(role)
	require.Equal(t, codec.MemberID("b"), second.Member)

	// Resume a: it finds that it lost the role (its local deadline has
	// passed, or a write or renewal is refused) and stops writing.
	require.NoError(t, a.signal(syscall.SIGCONT))
	a.waitLine(t, aMark, msg("revoked"))
	// b has said it writes; wait for its first heartbeat to commit, or
	// the intruder below may fence b before it wrote any.
	require.Eventually(t, func() bool {
		return slices.ContainsFunc(heartbeats(t, e.readCommitted(out)), func(hb heartbeat) bool { return hb.token == second.Token })
	}, waitFor, 20*time.Millisecond, "a heartbeat under b's token %s", second.Token)

	// An intruder takes the epoch of the role and writes under it: the
	// broker refuses b's next heartbeat, and b gives the role up.
	marks := map[*proc]int{a: a.mark(), b: b.mark()}
	icfg := e.c.Config
	icfg.TxnPrefix = fencing.DefaultTxnPrefix // the examples' prefix
	intruder, err := fencing.NewBrokerTransport(icfg)
	require.NoError(t, err)
	defer intruder.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	itok, err := intruder.AcquireEpoch(ctx, codec.Role(role))
	require.NoError(t, err)
	require.NoError(t, intruder.Writer(codec.Role(role), itok).Write(ctx, fencing.Message{
		Topic: out, Partition: fencing.PartitionByKey, Key: []byte(role), Value: fmt.Appendf(nil, "intruder %s 0", itok),
	}))
	b.waitLine(t, marks[b], regexp.MustCompile(`\bmsg=revoked .*reason=(fenced|"work failed")`))
	third := waitAny(t, marks, msg("writing heartbeats"))
	thirdLease := e.holder(role)
	require.Equal(t, codec.MemberID(third.member), thirdLease.Member)
	require.True(t, thirdLease.Token.Newer(itok), "token %s after the intruder's %s", thirdLease.Token, itok)

	// The third holder has said it writes; wait for its first heartbeat
	// to commit before reading them all (read at once, it may not have).
	var beats []heartbeat
	require.Eventually(t, func() bool {
		beats = heartbeats(t, e.readCommitted(out))
		return slices.ContainsFunc(beats, func(hb heartbeat) bool { return hb.token == thirdLease.Token })
	}, waitFor, 20*time.Millisecond, "a heartbeat under the third token %s", thirdLease.Token)
	require.NoError(t, a.signal(syscall.SIGTERM))
	require.NoError(t, b.signal(syscall.SIGTERM))
	assert.Equal(t, 0, a.waitExit(t))
	assert.Equal(t, 0, b.waitExit(t))

	byMember := map[string]int{}
	next := map[codec.Token]int{}
	var last codec.Token
	for i, hb := range beats { // one partition (the key is the role), in offset order
		byMember[hb.member]++
		if i > 0 && hb.token != last {
			require.True(t, hb.token.Newer(last), "heartbeat %d under %s after one under %s", i, hb.token, last)
			require.Zero(t, next[hb.token], "token %s came back", hb.token)
		}
		require.Equal(t, next[hb.token], hb.n, "heartbeat %d of %s under %s", i, hb.member, hb.token)
		next[hb.token]++
		last = hb.token
	}
	assert.Positive(t, byMember["a"], "no heartbeat of a")
	assert.Positive(t, byMember["b"], "no heartbeat of b")
	assert.Positive(t, next[first.Token], "no heartbeat under a's token %s", first.Token)
	assert.Positive(t, next[second.Token], "no heartbeat under b's token %s", second.Token)
	assert.Equal(t, 1, next[itok], "the intruder's heartbeat")
	assert.Positive(t, next[thirdLease.Token], "no heartbeat under the third token %s", thirdLease.Token)
}

type heartbeat struct {
	member string
	token  codec.Token
	n      int
}

// heartbeats parses "<member> <producer id>/<epoch> <n>" records, and
// checks that all of them are in one partition.
func heartbeats(t *testing.T, ms []*sarama.ConsumerMessage) []heartbeat {
	t.Helper()
	var out []heartbeat
	for _, m := range ms {
		require.Equal(t, ms[0].Partition, m.Partition, "heartbeats of one role in two partitions")
		f := strings.Fields(string(m.Value))
		require.Len(t, f, 3, "heartbeat %q", m.Value)
		pid, epoch, ok := strings.Cut(f[1], "/")
		require.True(t, ok, "heartbeat %q", m.Value)
		var hb heartbeat
		var err error
		hb.member = f[0]
		hb.token.ProducerID, err = strconv.ParseInt(pid, 10, 64)
		require.NoError(t, err)
		e, err := strconv.ParseInt(epoch, 10, 16)
		require.NoError(t, err)
		hb.token.Epoch = int16(e)
		hb.n, err = strconv.Atoi(f[2])
		require.NoError(t, err)
		out = append(out, hb)
	}
	return out
}
