package testcluster

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Numbered is an output record of an exactly-once test: the number of the
// input record it was made from, and where it was written.
type Numbered struct {
	N         int
	Key       string
	Partition int32
}

// RequireExactlyOnce fails t unless outs hold every number in [0, n)
// exactly once (no duplicate, no gap, nothing out of range), and the
// numbers of each key appear in increasing order within one partition.
// outs are in the order [Cluster.ReadAll] returns records: partition by
// partition, in offset order.
func RequireExactlyOnce(t testing.TB, outs []Numbered, n int) {
	t.Helper()
	count := make([]int, n)
	for _, o := range outs {
		require.True(t, o.N >= 0 && o.N < n, "output %d out of range", o.N)
		count[o.N]++
	}
	var dups, gaps []int
	for i, c := range count {
		switch {
		case c == 0:
			gaps = append(gaps, i)
		case c > 1:
			dups = append(dups, i)
		}
	}
	require.Empty(t, dups, "numbers written more than once")
	require.Empty(t, gaps, "numbers never written")
	require.Len(t, outs, n)

	last := map[string]Numbered{}
	for _, o := range outs {
		if prev, ok := last[o.Key]; ok {
			require.Equal(t, prev.Partition, o.Partition, "key %s in two partitions", o.Key)
			require.Less(t, prev.N, o.N, "key %s: %d written after %d", o.Key, o.N, prev.N)
		}
		last[o.Key] = o
	}
}
