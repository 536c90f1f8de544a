package cli

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/internal/testcluster"
)

// TestRunWithoutCommandHoldsTheRole: `krole run ROLE` without CMD prints
// the token once elected and holds the role until interrupted, then
// resigns (the role is released, not left to run out); meanwhile --try
// gives up with exit 75 and --timeout with exit 124, each saying why.
func TestRunWithoutCommandHoldsTheRole(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	args := append(append(append(clusterFlags(c), "run", "lock"), testTimingFlags()...), "--member", "a", "--value", "host-a:1")
	a := startBackground(t, args...)
	tok := a.line("the token")
	require.Regexp(t, `^\d+/\d+$`, tok)

	r := runOn(t, c, "leader", "lock")
	requireOK(t, r)
	assert.Equal(t, "host-a:1\n", r.Stdout, "the holder's value, carried by krole run --value")

	r = run(t, append(append(append(clusterFlags(c), "run", "lock"), testTimingFlags()...), "--member", "b", "--try")...)
	assert.Equal(t, ExitRunBusy, r.Code, "stderr: %s", r.Stderr)
	assert.Contains(t, r.Stderr, "krole run: lock is held by a; giving up (--try)\n")
	assert.Empty(t, r.Stdout)

	r = run(t, append(append(append(clusterFlags(c), "run", "lock"), testTimingFlags()...), "--member", "b", "--timeout", "500ms")...)
	assert.Equal(t, ExitRunTimeout, r.Code, "stderr: %s", r.Stderr)
	assert.Contains(t, r.Stderr, "krole run: not holding lock within --timeout 500ms; giving up\n")
	assert.Empty(t, r.Stdout)

	assert.Equal(t, ExitOK, a.stop(), "stderr: %s", a.stderr.String())
	if strings.Contains(a.stderr.String(), "so the token is retired") {
		// The interrupt cut a renewal short: its outcome is unknown, so the
		// member cannot release under that token (package processor; not
		// the lock mode's doing). The rest needs the release.
		t.Skipf("the interrupt cut a renewal short; no release to check:\n%s", a.stderr.String())
	}
	assert.Regexp(t, `krole run: resigned lock \(token `+regexp.QuoteMeta(tok)+`\)\n$`, a.stderr.String())
	last := lastLease(readRole(t, c.Config, "lock"))
	require.NotNil(t, last)
	assert.True(t, leaseReleased(t, c.Config, "lock"))
	assert.False(t, strings.Contains(a.stderr.String(), "started CMD"))

	// The role vacant: --try campaigns and takes it.
	b := startBackground(t, append(append(append(clusterFlags(c), "run", "lock"), testTimingFlags()...), "--member", "b", "--try", "--timeout", "1m")...)
	assert.Regexp(t, `^\d+/\d+$`, b.line("b's token"))
	assert.Equal(t, ExitOK, b.stop(), "stderr: %s", b.stderr.String())
}
