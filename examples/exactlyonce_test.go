package examples

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/testcluster"
	"github.com/krabka/krole/rolestate"
)

// TestExactlyOnce runs examples/exactlyonce as two processes of one role,
// feeds it numbered records, kills the holder with SIGKILL while records
// keep coming, and checks that the output, read with read_committed
// isolation, holds every input record exactly once, uppercased, with the
// records of each key in input order; then that SIGTERM makes the new
// holder resign and exit 0.
func TestExactlyOnce(t *testing.T) {
	e := newEnv(t)
	bin := build(t, "exactlyonce")
	in, out := e.topic("in", 3), e.topic("out", 3)
	role, group := e.c.Name("upper"), e.c.Name("group")
	args := append(e.flags(), "--role", role, "--group", group, "--input", in, "--output", out, "--lease-duration", "2s")
	procs := map[codec.MemberID]*proc{
		"a": start(t, bin, "a", args...),
		"b": start(t, bin, "b", args...),
	}

	const n = 600
	prod := e.producer(in)
	require.NoError(t, prod.send(0, n/3))
	end, err := prod.end()
	require.NoError(t, err)
	e.waitCommitted(group, in, end)

	// Kill the holder while the rest of the input is being produced.
	first := e.holder(role)
	dead, ok := procs[first.Member]
	require.True(t, ok, "the role is held by %s, not by one of the examples", first.Member)
	var survivor *proc
	for m, p := range procs {
		if m != first.Member {
			survivor = p
		}
	}
	mark := survivor.mark()
	sent := make(chan error, 1)
	half := make(chan struct{})
	go func() {
		defer close(sent)
		for from := n / 3; from < n; from += 10 {
			if from == 2*n/3 {
				close(half)
			}
			if err := prod.send(from, from+10); err != nil {
				sent <- err
				return
			}
		}
	}()
	select {
	case <-half:
	case err := <-sent:
		require.NoError(t, err)
	}
	require.NoError(t, dead.signal(syscall.SIGKILL))
	require.NoError(t, <-sent)
	end, err = prod.end()
	require.NoError(t, err)

	// The survivor takes over once the dead holder's lease has run out and
	// resumes from the offsets the dead one committed last.
	survivor.waitLine(t, mark, msg("elected"))
	survivor.waitLine(t, mark, msg("processing"))
	e.waitCommitted(group, in, end)
	second := e.holder(role)
	assert.Equal(t, codec.MemberID(survivor.member), second.Member)
	assert.True(t, second.Token.Newer(first.Token) || second.Token.ProducerID != first.Token.ProducerID,
		"token %s after %s", second.Token, first.Token)

	requireUppercasedOnce(t, e.readCommitted(out), n)

	// SIGTERM: the holder leaves (its member session's end releases the
	// role) and exits 0.
	require.NoError(t, survivor.signal(syscall.SIGTERM))
	assert.Equal(t, 0, survivor.waitExit(t))
	st := e.roleState(role)
	require.NotNil(t, st.Lease)
	assert.True(t, st.Lease.Released() || st.SessionVouch() == rolestate.Dropped, "the last lease is %+v, not released (its session: %+v)", *st.Lease, st.Session)
	assert.Equal(t, second.Token, st.Lease.Token)
	assert.Equal(t, -1, st.Rank(codec.MemberID(survivor.member)), "the survivor is still a candidate")
}

// requireUppercasedOnce checks that outs hold "RECORD-<i>" for every i in
// [0, n) exactly once, each under its input key "key-<i mod 7>", and the
// records of each key in increasing order within one partition.
func requireUppercasedOnce(t *testing.T, outs []*sarama.ConsumerMessage, n int) {
	t.Helper()
	nums := make([]testcluster.Numbered, 0, len(outs))
	for _, m := range outs { // partition by partition, in offset order
		num, ok := strings.CutPrefix(string(m.Value), "RECORD-")
		require.True(t, ok, "output %q is not an uppercased input", m.Value)
		i, err := strconv.Atoi(num)
		require.NoError(t, err, "output %q", m.Value)
		require.Equal(t, fmt.Sprintf("key-%d", i%7), string(m.Key), "output %q", m.Value)
		nums = append(nums, testcluster.Numbered{N: i, Key: string(m.Key), Partition: m.Partition})
	}
	testcluster.RequireExactlyOnce(t, nums, n)
}
