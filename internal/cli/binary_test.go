package cli

import (
	"bytes"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBinary builds the krole binary and runs it as a process, to check
// what only a process shows: the exit status and stderr of main.
func TestBinary(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary; skipped with -short")
	}
	bin := buildKrole(t)

	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"records", "controller", "--brokers", "127.0.0.1:1"}, ExitFailure, "krole: no broker answered at 127.0.0.1:1"},
		{[]string{"register", "bad/role", "--member", "node-1"}, ExitUsage, `krole: invalid role "bad/role"`},
	} {
		cmd := exec.Command(bin, tc.args...)
		cmd.Env = append(cmd.Environ(), "KROLE_BROKERS=", "KROLE_OUTPUT=")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		require.True(t, errors.As(err, &ee), "%v: %v", tc.args, err)
		assert.Equal(t, tc.code, ee.ExitCode(), "%v: stderr %s", tc.args, stderr.String())
		assert.Empty(t, stdout.String())
		first, _, _ := strings.Cut(stderr.String(), "\n")
		assert.True(t, strings.HasPrefix(first, tc.want), "%v: stderr %q", tc.args, stderr.String())
		assert.NotContains(t, stderr.String(), "goroutine ")
		if tc.code == ExitFailure {
			assert.Equal(t, 1, strings.Count(stderr.String(), "\n"), "one line: %q", stderr.String())
		}
	}
}
