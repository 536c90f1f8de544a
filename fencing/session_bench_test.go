package fencing_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/testcluster"
)

// BenchmarkSessionRound measures one round of a member session that holds
// K roles (KROLE_BENCH_ROLES, default 1000) on the embedded cluster: one
// DescribeMany over the K roles' transactional ids and one heartbeat
// transaction. It reports describe_ms and heartbeat_ms per round, and
// txns/round (always 1: the cost in transactions does not grow with K).
//
//	KROLE_BENCH_ROLES=10000 go test -run '^$' -bench BenchmarkSessionRound -benchtime 20x ./fencing/
func BenchmarkSessionRound(b *testing.B) {
	k := 1000
	if v := os.Getenv("KROLE_BENCH_ROLES"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(b, err)
		k = n
	}
	c := testcluster.Start(b, testcluster.Options{Partitions: 12})
	tr := c.Transport(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	roles := make([]codec.Role, k)
	for i := range roles {
		roles[i] = codec.Role(fmt.Sprintf("bench-session-%05d", i))
		_, err := tr.AcquireEpoch(ctx, roles[i])
		require.NoError(b, err)
	}
	s, err := tr.StartSession(ctx, "bench-member", "bench")
	require.NoError(b, err)
	b.ResetTimer()
	var describe, beat time.Duration
	for range b.N {
		t0 := time.Now()
		got, err := tr.DescribeMany(ctx, roles)
		require.NoError(b, err)
		require.Len(b, got, k)
		t1 := time.Now()
		now := t1.UnixMilli()
		require.NoError(b, tr.Heartbeat(ctx, codec.Heartbeat{Member: "bench-member", Session: s, GrantedAt: now, Deadline: now + 15000}))
		describe += t1.Sub(t0)
		beat += time.Since(t1)
	}
	b.ReportMetric(float64(describe.Microseconds())/1000/float64(b.N), "describe_ms")
	b.ReportMetric(float64(beat.Microseconds())/1000/float64(b.N), "heartbeat_ms")
	b.ReportMetric(1, "txns/round")
}
