package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/devcluster"
	"github.com/krabka/krole/internal/testcluster"
)

// The passwords of the tests of this file: the user's, and a wrong one.
const (
	secretRight = "pw-right-7c1e9a"
	secretWrong = "pw-wrong-52b0d4"
)

// startSecretCluster starts an embedded cluster with TLS and SASL
// (SCRAM-SHA-512, user alice with password secretRight) and the role topic
// secret.roles, and returns its brokers and its CA file.
func startSecretCluster(t *testing.T) (brokers, caFile string) {
	t.Helper()
	if testcluster.External() {
		t.Skip("needs the embedded cluster with SASL; KROLE_BROKERS names an outside cluster")
	}
	const right = secretRight
	caFile, serverTLS := testcluster.SelfSignedTLS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fake, err := devcluster.Start(ctx, testcluster.DevOptions(t, devcluster.Options{Extra: []kfake.Opt{
		kfake.TLS(serverTLS),
		kfake.EnableSASL(),
		kfake.Superuser(fencing.SASLScramSHA512, "alice", right),
	}}))
	require.NoError(t, err)
	t.Cleanup(fake.Close)
	require.NoError(t, devcluster.CreateTopic(ctx, fencing.Config{
		Brokers: fake.ListenAddrs(), Topic: "secret.roles",
		TLS:  fencing.TLSConfig{CAFile: caFile},
		SASL: fencing.SASLConfig{Mechanism: fencing.SASLScramSHA512, User: "alice", Password: right},
	}, 1, 1))
	return strings.Join(fake.ListenAddrs(), ","), caFile
}

// noSecret fails t when any of outs holds either password.
func noSecret(t *testing.T, what string, outs ...string) {
	t.Helper()
	for _, out := range outs {
		assert.NotContains(t, out, secretRight, "%s printed the password", what)
		assert.NotContains(t, out, secretWrong, "%s printed the password", what)
	}
}

// TestSecretsNeverPrinted runs commands with the SASL password in
// --sasl-password and in KROLE_SASL_PASSWORD, on paths that succeed and
// paths that fail (a wrong password, no broker, a usage error, the help),
// and checks that neither the right password nor a wrong one shows in any
// output. TestSecretsNeverPrintedByRunVerbose does the same for `krole run
// --verbose` through the binary.
func TestSecretsNeverPrinted(t *testing.T) {
	const (
		right = secretRight
		wrong = secretWrong
	)
	brokers, caFile := startSecretCluster(t)
	t.Setenv("KROLE_SASL_PASSWORD", "")
	t.Setenv("KROLE_MEMBER", "")
	conn := []string{"--brokers", brokers, "--topic", "secret.roles", "--tls-ca", caFile, "--sasl-mechanism", "SCRAM-SHA-512", "--sasl-user", "alice"}
	noLeak := noSecret
	// in runs args in-process with the password in the flag, then in the
	// environment, and returns the two results.
	in := func(t *testing.T, pw string, args ...string) []result {
		t.Helper()
		byFlag := run(t, append(append(args, conn...), "--sasl-password", pw)...)
		t.Setenv("KROLE_SASL_PASSWORD", pw)
		byEnv := run(t, append(args, conn...)...)
		t.Setenv("KROLE_SASL_PASSWORD", "")
		noLeak(t, strings.Join(args, " "), byFlag.Stdout, byFlag.Stderr, byEnv.Stdout, byEnv.Stderr)
		return []result{byFlag, byEnv}
	}

	t.Run("succeeding commands", func(t *testing.T) {
		for _, r := range in(t, right, "register", "ctl", "--member", "node-1") {
			requireOK(t, r)
		}
		for _, args := range [][]string{
			{"records", "ctl"}, {"records", "ctl", "-o", "json"}, {"table"}, {"table", "-o", "json"},
			{"describe", "ctl"}, {"resign", "ctl", "--member", "node-1"},
		} {
			for _, r := range in(t, right, args...) {
				requireOK(t, r)
			}
		}
	})
	t.Run("wrong password", func(t *testing.T) {
		for _, r := range in(t, wrong, "records", "ctl") {
			assertOneLineError(t, r, ExitFailure)
		}
		for _, r := range in(t, wrong, "table") {
			assert.Equal(t, ExitFailure, r.Code)
		}
	})
	t.Run("no broker", func(t *testing.T) {
		byFlag := run(t, "records", "ctl", "--brokers", "127.0.0.1:1", "--sasl-mechanism", "PLAIN", "--sasl-user", "alice", "--sasl-password", right)
		assertOneLineError(t, byFlag, ExitFailure)
		t.Setenv("KROLE_SASL_PASSWORD", right)
		byEnv := run(t, "records", "ctl", "--brokers", "127.0.0.1:1", "--sasl-mechanism", "PLAIN", "--sasl-user", "alice")
		assertOneLineError(t, byEnv, ExitFailure)
		noLeak(t, "records against no broker", byFlag.Stderr, byEnv.Stderr)
	})
	t.Run("usage errors and help", func(t *testing.T) {
		t.Setenv("KROLE_SASL_PASSWORD", right)
		for _, args := range [][]string{
			{"records", "ctl", "--sasl-mechanism", "BOGUS", "--sasl-password", wrong},
			{"records", "ctl", "--sasl-mechanism", "PLAIN", "--sasl-password", wrong}, // no user
			{"records", "--sasl-password", wrong},
			{"--help"}, {"records", "--help", "--sasl-password", wrong}, {"run", "--help"},
			{"run", "ctl", "--sasl-password", wrong}, // no command
		} {
			r := run(t, args...)
			noLeak(t, strings.Join(args, " "), r.Stdout, r.Stderr)
		}
	})
}

// TestSecretsNeverPrintedByRunVerbose: `krole run --verbose`, a process of
// the binary, prints neither password, with the right one in
// KROLE_SASL_PASSWORD or --sasl-password, or a wrong one.
func TestSecretsNeverPrintedByRunVerbose(t *testing.T) {
	t.Parallel()
	bin := processTest(t, "")
	const (
		right = secretRight
		wrong = secretWrong
	)
	brokers, caFile := startSecretCluster(t)
	runArgs := append(append([]string{"run", "ctl", "--member", "node-2", "--verbose"}, testTimingFlags()...), "--", "true")
	env := []string{"KROLE_BROKERS=" + brokers, "KROLE_TOPIC=secret.roles", "KROLE_TLS_CA=" + caFile,
		"KROLE_SASL_MECHANISM=SCRAM-SHA-512", "KROLE_SASL_USER=alice", "KROLE_MEMBER=", "KROLE_SASL_PASSWORD="}
	const limit = 45 * time.Second
	// Succeeding: it takes the role, runs true and resigns.
	r := runProc(t, bin, append(env, "KROLE_SASL_PASSWORD="+right), limit, runArgs...)
	require.Equal(t, ExitOK, r.Code, "stderr:\n%s", r.Stderr)
	assert.Contains(t, r.Stderr, "elected ctl")
	noSecret(t, "krole run --verbose", r.Stdout, r.Stderr)
	r = runProc(t, bin, env, limit, append(runArgs[:1:1], append([]string{"--sasl-password", right}, runArgs[1:]...)...)...)
	require.Equal(t, ExitOK, r.Code, "stderr:\n%s", r.Stderr)
	noSecret(t, "krole run --verbose --sasl-password", r.Stdout, r.Stderr)
	// Failing: a wrong password.
	r = runProc(t, bin, append(env, "KROLE_SASL_PASSWORD="+wrong), limit, runArgs...)
	assert.Equal(t, ExitFailure, r.Code, "stderr:\n%s", r.Stderr)
	noSecret(t, "krole run --verbose with a wrong password", r.Stdout, r.Stderr)
}
