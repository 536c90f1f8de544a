package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/internal/devcluster"
	"github.com/krabka/krole/internal/roletopic"
	"github.com/krabka/krole/internal/testcluster"
)

// `krole run -- true` names no ROLE: "true" follows --, so it is CMD, and
// the command is a usage error, not a campaign for a role called "true".
func TestRunRoleAfterDashIsUsageError(t *testing.T) {
	t.Parallel()
	r := run(t, "run", "--brokers", "127.0.0.1:1", "--", "true")
	assertOneLineError(t, r, ExitUsage)
	assert.Contains(t, r.Stderr, `krole: run needs a ROLE before --`)
	assert.Contains(t, r.Stderr, `"true" follows --`)

	r = run(t, "run", "--brokers", "127.0.0.1:1")
	assertOneLineError(t, r, ExitUsage)
	assert.Contains(t, r.Stderr, "krole: run needs a ROLE")
}

// The arguments before and after "--" reach run as ROLE and CMD wherever
// the flags are; a "--" inside CMD stays CMD's.
func TestNormalizeArgsKeepsRunsDash(t *testing.T) {
	t.Parallel()
	app := newApp(nil, nil)
	for _, tc := range []struct{ in, want string }{
		{"run -- true", "run -- -- true"},
		{"run ctl -- sh -c x", "run -- ctl -- sh -c x"},
		{"run ctl --member m -- sh -- y", "run --member m -- ctl -- sh -- y"},
		{"run ctl sleep 1", "run -- ctl sleep 1"},
		{"run", "run --"},
	} {
		assert.Equal(t, tc.want, strings.Join(normalizeArgs(app, strings.Fields(tc.in)), " "), "normalizeArgs(%q)", tc.in)
	}
	for _, tc := range []struct {
		in            string
		before, after string
		dash          bool
	}{
		{"-- true", "", "true", true},
		{"ctl -- sh -- y", "ctl", "sh -- y", true},
		{"ctl sleep 1", "ctl sleep 1", "", false},
	} {
		b, a, d := splitDash(strings.Fields(strings.TrimPrefix(strings.Join(normalizeArgs(app, strings.Fields("run "+tc.in)), " "), "run -- ")))
		assert.Equal(t, tc.before, strings.Join(b, " "), tc.in)
		assert.Equal(t, tc.after, strings.Join(a, " "), tc.in)
		assert.Equal(t, tc.dash, d, tc.in)
	}
}

// An empty member id is a usage error, not HOSTNAME:PID in disguise; an
// empty KROLE_MEMBER still counts as unset.
func TestRunEmptyMemberIsUsageError(t *testing.T) {
	for _, args := range [][]string{{"--member", ""}, {"--member="}, {"-m", ""}} {
		r := run(t, append([]string{"run", "ctl", "--brokers", "127.0.0.1:1"}, args...)...)
		assertOneLineError(t, r, ExitUsage)
		assert.Contains(t, r.Stderr, "krole: --member is empty", "%q", args)
	}
	t.Setenv("KROLE_MEMBER", "")
	r := run(t, "run", "ctl", "--brokers", "127.0.0.1:1")
	assertOneLineError(t, r, ExitFailure)
	assert.Contains(t, r.Stderr, "no broker answered", "an empty KROLE_MEMBER is unset: the default member campaigns")
}

// -v and --version print the same, as text and as JSON.
func TestShortVersionFlagIsVersion(t *testing.T) {
	t.Parallel()
	for _, o := range [][]string{nil, {"-o", "json"}} {
		long := run(t, append([]string{"--version"}, o...)...)
		requireOK(t, long)
		short := run(t, append([]string{"-v"}, o...)...)
		requireOK(t, short)
		assert.Equal(t, long.Stdout, short.Stdout)
		cmd := run(t, append([]string{"version"}, o...)...)
		assert.Equal(t, cmd.Stdout, short.Stdout)
	}
}

// `krole bench` without a subcommand is a usage error with the usage on
// stderr, as a missing command is; an unknown one names the closest.
func TestBenchWithoutSubcommandIsUsageError(t *testing.T) {
	t.Parallel()
	r := run(t, "bench")
	assert.Equal(t, ExitUsage, r.Code)
	assert.Empty(t, r.Stdout)
	assert.Contains(t, r.Stderr, "usage: krole bench failover|handover|acquire|renew|failover-many|group|steady [flags]")
	assert.Contains(t, r.Stderr, "subcommands: failover, handover, acquire, renew, failover-many, group, compare, steady\n")
	assert.NotContains(t, r.Stderr, "OPTIONS", "a short usage, not the whole help")

	r = run(t, "bench", "failovr")
	assertOneLineError(t, r, ExitUsage)
	assert.Contains(t, r.Stderr, `unknown bench subcommand "failovr"`)
	assert.Contains(t, r.Stderr, "did you mean 'krole bench failover'?")
}

// A duration without its unit says so, from a flag or its variable.
func TestDurationWithoutUnit(t *testing.T) {
	r := run(t, "run", "ctl", "--lease-duration", "3")
	assertOneLineError(t, r, ExitUsage)
	assert.Contains(t, r.Stderr, "krole: invalid value \"3\" for --lease-duration: a duration needs a unit, e.g. 3s\n")

	r = run(t, "table", "--timeout=1.5")
	assertOneLineError(t, r, ExitUsage)
	assert.Contains(t, r.Stderr, "krole: invalid value \"1.5\" for --timeout: a duration needs a unit, e.g. 1.5s\n")

	r = run(t, "run", "ctl", "--lease-duration", "3x")
	assertOneLineError(t, r, ExitUsage)
	assert.Contains(t, r.Stderr, "for --lease-duration: not a duration")

	t.Setenv("KROLE_LEASE_DURATION", "4")
	r = run(t, "run", "ctl")
	assertOneLineError(t, r, ExitUsage)
	assert.Contains(t, r.Stderr, "krole: invalid value \"4\" in KROLE_LEASE_DURATION (for --lease-duration): a duration needs a unit, e.g. 4s\n")
}

// A command's flag before the command's name says where it belongs.
func TestCommandFlagBeforeCommand(t *testing.T) {
	t.Parallel()
	r := run(t, "--member", "x", "register", "controller")
	assertOneLineError(t, r, ExitUsage)
	require.Contains(t, r.Stderr, "krole: --member is a flag of `krole register`: krole register --member x controller\n")

	r = run(t, "-b", "127.0.0.1:1", "--member=x", "register", "controller", "-o", "json")
	assertOneLineError(t, r, ExitUsage)
	assert.Contains(t, r.Stderr, ": krole -b 127.0.0.1:1 register --member=x controller -o json\n")

	r = run(t, "--bogus", "register", "controller")
	assertOneLineError(t, r, ExitUsage)
	assert.Contains(t, r.Stderr, "krole: unknown flag --bogus\n", "a flag of no command stays unknown")
}

// `krole dev` creates its role topic with the settings `krole init` sets
// (segment.ms and the rest), so init finds nothing to warn about; and it
// says on its start line that without --data-dir tokens go back after a
// restart.
func TestDevTopicAgreesWithInit(t *testing.T) {
	t.Parallel()
	addrs, errOut, stop := startDevStderr(t, "--listen", "127.0.0.1:0")
	r := run(t, "init", "--brokers", addrs, "-o", "json")
	requireOK(t, r)
	assert.Empty(t, r.Stderr, "init warns about nothing on dev's topic")
	var res roletopic.Result
	require.NoError(t, json.Unmarshal([]byte(r.Stdout), &res))
	assert.False(t, res.Created)
	for name, want := range devcluster.RoleTopicConfigMap(devcluster.DefaultRoleTopicDeleteRetain) {
		assert.Equal(t, want, res.Configs[name], "dev's topic has init's %s", name)
	}
	assert.Equal(t, "3600000", res.Configs["segment.ms"])
	stop()
	assert.Contains(t, errOut.String(), "krole dev: state in memory: a restart forgets every role, and tokens start again at epoch 0")
}

// With --data-dir dev keeps its tokens across restarts, and does not say
// they go back.
func TestDevDataDirSaysNothingOfTokensGoingBack(t *testing.T) {
	t.Parallel()
	_, errOut, stop := startDevStderr(t, "--listen", "127.0.0.1:0", "--data-dir", t.TempDir())
	stop()
	assert.NotContains(t, errOut.String(), "epoch 0")
	assert.Contains(t, errOut.String(), "state kept in ")
}

// dev's usage line names every flag it has.
func TestDevUsageNamesPartitions(t *testing.T) {
	t.Parallel()
	r := run(t, "dev", "--help")
	requireOK(t, r)
	_, usage, ok := strings.Cut(r.Stdout, "USAGE:\n")
	require.True(t, ok)
	usage, _, _ = strings.Cut(usage, "\n")
	for _, f := range []string{"--listen", "--nodes", "--data-dir", "--partitions"} {
		assert.Contains(t, usage, f)
	}
}

// init warns, one line per setting and with the command that changes it,
// about an existing role topic whose settings differ from those it sets.
func TestInitWarnsAboutTopicSettings(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	cfg := c.Config
	cfg.Topic = strings.TrimSuffix(cfg.Topic, ".roles") + ".weekly"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, devcluster.CreateNewTopic(ctx, cfg, devcluster.TopicSpec{Name: cfg.Topic, Partitions: 1, Replication: 1,
		CleanupPolicy: "compact", Configs: map[string]string{"segment.ms": "604800000", "delete.retention.ms": "86400000"}}))

	r := run(t, "init", "--brokers", strings.Join(cfg.Brokers, ","), "--topic", cfg.Topic)
	requireOK(t, r)
	assert.Contains(t, r.Stderr, "krole: warning: topic "+cfg.Topic+" has segment.ms=604800000, not 3600000 (")
	assert.Contains(t, r.Stderr, "--entity-name "+cfg.Topic+" --add-config segment.ms=3600000\n")
	assert.NotContains(t, r.Stderr, "delete.retention.ms", "a choice, checked only when --delete-retention is given")

	r = run(t, "init", "--brokers", strings.Join(cfg.Brokers, ","), "--topic", cfg.Topic, "--delete-retention", "168h")
	requireOK(t, r)
	assert.Contains(t, r.Stderr, "has delete.retention.ms=86400000, not 604800000 (")
}
