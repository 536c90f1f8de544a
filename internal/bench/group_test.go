package bench

import (
	"bytes"
	"context"
	"io"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/processor"
)

// TestGroupSmall runs `krole bench group` small on the embedded cluster:
// 3 members, 30 roles, a 1s lease. Its figures must be ones that can be
// true (never how fast anything was): every phase balanced, the join moved
// at most the roles there are, the kill moved none of the survivors' roles
// and won none twice, and no gap is negative.
func TestGroupSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("runs an embedded cluster and 4 members; skipped with -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var log io.Writer = io.Discard
	if os.Getenv("KROLE_TEST_LOG") != "" {
		log = os.Stderr
	}
	e, err := StartEnv(ctx, EnvOptions{Config: fencing.Config{Topic: "krole-bench-group"}, Log: log})
	require.NoError(t, err)
	defer e.Close()
	s := processor.Settings{LeaseDuration: time.Second}.WithDefaults()
	require.NoError(t, s.Validate())
	const m, k = 3, 30
	res, err := RunGroup(ctx, e, GroupOptions{Members: m, Roles: k, Settings: s})
	require.NoError(t, err)

	assert.Equal(t, "group", res.Kind)
	for name, ratio := range map[string]float64{"start": res.Start.MaxOverMean, "join": res.Join.MaxOverMean, "kill": res.Kill.MaxOverMean} {
		assert.GreaterOrEqual(t, ratio, 1.0, "%s: the most held is at least the mean", name)
		assert.LessOrEqual(t, ratio, 1.1, "%s: balanced (30 roles: 10 each of 3, at most 8 of 4)", name)
	}
	assert.GreaterOrEqual(t, res.Start.BalancedS, 0.0)
	assert.GreaterOrEqual(t, res.Start.Elections, k, "every role was won")

	assert.Equal(t, 8, res.Join.Expected, "ceil(30/4)")
	assert.Positive(t, res.Join.Moved, "the joiner took roles")
	assert.LessOrEqual(t, res.Join.Moved, k)
	require.NotNil(t, res.Join.Gaps)
	assert.Len(t, res.Join.Gaps.SamplesMS, res.Join.Moved, "a gap per handover")

	assert.Positive(t, res.Kill.KilledRoles, "the joiner held roles")
	assert.Equal(t, res.Kill.KilledRoles, res.Kill.HeldAgain, "all its roles held again")
	assert.Zero(t, res.Kill.OthersMoved, "no survivor's role moved")
	assert.Zero(t, res.Kill.DoubleWins, "no role won twice in one vacancy")
	assert.GreaterOrEqual(t, res.Kill.HeldAgainS, res.Kill.FirstS)
	assert.GreaterOrEqual(t, res.Kill.FirstS, 0.0)

	assert.Equal(t, m, res.Rolling.Restarts)
	assert.Len(t, res.Steps, m)
	assert.Zero(t, res.Rolling.Unfilled, "every role unheld in the restarts was held again")
	assert.Positive(t, res.Rolling.Handovers)
	assert.LessOrEqual(t, res.Rolling.LeaseWaits, len(res.SamplesMS))
	for _, d := range [][]float64{res.SamplesMS, res.Join.Gaps.SamplesMS, res.Rolling.Gaps.SamplesMS} {
		for _, g := range d {
			assert.GreaterOrEqual(t, g, 0.0, "a gap is never negative")
		}
	}

	assert.Positive(t, res.Memory.HeapPerRole)
	assert.Positive(t, res.Memory.GoroutinesPerRole)
	assert.Positive(t, res.Memory.GoroutineGrowth, "each member runs goroutines for its roles")

	var text bytes.Buffer
	res.WriteDetails(&text)
	t.Log("\n" + text.String())
	for _, want := range []string{"start", "join", "kill", "rolling restart", "memory"} {
		assert.Contains(t, text.String(), want)
	}
}
