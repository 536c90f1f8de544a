package cli

import (
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/internal/bench"
	"github.com/krabka/krole/internal/runner"
)

// TestBenchSteadyAndLock runs `krole bench steady` for 3 s and `krole bench
// handover --lock --trace` for one round, and checks their output's shape (not
// how fast anything was: a needless change on a loaded machine is a
// result, exit 1, not a failure of the command).
func TestBenchSteadyAndLock(t *testing.T) {
	t.Parallel()
	bin := processTest(t, "")

	t.Run("steady", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, "bench", "steady", "--members", "2", "--lease-duration", "2s",
			"--duration", "3s", "-o", "json")
		cmd.Env = append(cmd.Environ(), runner.ClearedEnv()...)
		out, err := cmd.Output()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else {
			require.NoError(t, err)
		}
		var r bench.SteadyResult
		require.NoError(t, json.Unmarshal(out, &r), "stdout: %s", out)
		assert.Equal(t, "steady", r.Kind)
		assert.Equal(t, "krole", r.System)
		assert.Equal(t, "3s", r.Settings["duration"])
		assert.Equal(t, "2s", r.Settings["lease_duration"])
		assert.Equal(t, "400ms", r.Settings["heartbeat_interval"], "the default, lease / 5")
		// Renewals every 400ms for 3s: the gaps between lease writes are
		// the samples, one per renewal or election.
		assert.NotEmpty(t, r.SamplesMS)
		assert.Equal(t, len(r.SamplesMS), r.Renewals+r.Elections)
		assert.Len(t, r.Rounds, r.Elections)
		assert.Equal(t, r.MaxMS, r.MaxRenewGapMS)
		assert.Equal(t, r.Elections+r.Releases+r.EpochsWithoutLease, r.Needless)
		assert.LessOrEqual(t, r.Handovers, r.Elections)
		assert.Len(t, r.LoadAvg, 2, "the load average at the start and at the end")
		assert.Equal(t, map[bool]int{true: 1, false: 0}[r.Needless > 0], code, "exit 1 exactly when a change was needless")
		var raw map[string]any
		require.NoError(t, json.Unmarshal(out, &raw))
		for _, k := range []string{"kind", "samples_ms", "median_ms", "p99_ms", "max_ms", "settings",
			"renewals", "elections", "handovers", "releases", "epochs_without_lease", "needless", "max_renew_gap_ms"} {
			assert.Contains(t, raw, k)
		}
	})

	t.Run("handover --lock --trace", func(t *testing.T) {
		out, _ := benchBin(t, bin, "bench", "handover", "--lock", "--trace", "--members", "2", "--rounds", "1", "--lease-duration", "2s", "-o", "json")
		r := checkBenchResult(t, out, "handover", 1)
		assert.Equal(t, "no command (krole run ROLE)", r.Settings["members_run"])
		// The holder says it was interrupted, the successor that it was
		// elected: both steps are timed, from the signal.
		require.Len(t, r.Rounds, 1)
		assert.Contains(t, r.Rounds[0], "h_interrupted_ms")
		assert.Contains(t, r.Rounds[0], "s_elected_ms")
		// And each step between: the release's start, the successor's
		// confirmation and its epoch.
		for _, k := range []string{"h_revoked_ms", "h_released_ms", "s_saw_vacancy_ms", "s_confirmed_ms", "s_epoch_ms"} {
			assert.Contains(t, r.Rounds[0], k)
		}
		assert.Contains(t, r.Phases, "trace signal -> h_interrupted")
		assert.NotContains(t, r.Rounds[0], "h_cmd_stopped_ms", "no command to stop")
	})

	t.Run("handover --trace, members run a command", func(t *testing.T) {
		out, _ := benchBin(t, bin, "bench", "handover", "--trace", "--members", "2", "--rounds", "1", "--lease-duration", "2s", "-o", "json")
		r := checkBenchResult(t, out, "handover", 1)
		require.Len(t, r.Rounds, 1)
		// The holder's CMD exits before its release; the successor's
		// starts after its lease shows.
		for _, k := range []string{"h_interrupted_ms", "h_cmd_stopped_ms", "h_released_ms", "s_elected_ms", "s_cmd_started_ms"} {
			assert.Contains(t, r.Rounds[0], k)
		}
		assert.Less(t, r.Rounds[0]["h_cmd_stopped_ms"], r.Rounds[0]["h_released_ms"], "the CMD exits before the release")
		assert.Contains(t, r.Phases, "trace new_lease_shows -> s_cmd_started")
	})
}

// TestBenchSteadyUsageErrors: bad flags exit 2 before any cluster starts.
func TestBenchSteadyUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "steady", "--duration", "0s"}, "--duration 0s"},
		{[]string{"bench", "steady", "--members", "0"}, "--members 0"},
		{[]string{"bench", "steady", "--lease-duration", "1s", "--heartbeat-interval", "2s"}, "heartbeat interval"},
		{[]string{"bench", "steady", "extra"}, "takes no arguments"},
	} {
		r := run(t, tc.args...)
		assertOneLineError(t, r, ExitUsage)
		assert.Contains(t, r.Stderr, tc.want, "%v", tc.args)
	}
}
