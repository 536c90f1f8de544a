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

// TestTLSAndSCRAM runs the CLI against an embedded cluster that speaks only
// TLS and SCRAM-SHA-256, configured by flags and environment variables.
func TestTLSAndSCRAM(t *testing.T) {
	if testcluster.External() {
		t.Skip("needs the embedded cluster with TLS and SASL; KROLE_BROKERS names an outside cluster")
	}
	caFile, serverTLS := testcluster.SelfSignedTLS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fake, err := devcluster.Start(ctx, testcluster.DevOptions(t, devcluster.Options{Extra: []kfake.Opt{
		kfake.TLS(serverTLS),
		kfake.EnableSASL(),
		kfake.Superuser(fencing.SASLScramSHA256, "alice", "s3cret-pw"),
	}}))
	require.NoError(t, err)
	t.Cleanup(fake.Close)
	brokers := strings.Join(fake.ListenAddrs(), ",")
	cfg := fencing.Config{
		Brokers: fake.ListenAddrs(), Topic: "secure.roles",
		TLS:  fencing.TLSConfig{Enable: true, CAFile: caFile},
		SASL: fencing.SASLConfig{Mechanism: fencing.SASLScramSHA256, User: "alice", Password: "s3cret-pw"},
	}
	require.NoError(t, devcluster.CreateTopic(ctx, cfg, 1, 1))

	t.Setenv("KROLE_SASL_PASSWORD", "s3cret-pw")
	t.Setenv("KROLE_TLS_CA", caFile)
	secure := []string{"--brokers", brokers, "--topic", "secure.roles", "--sasl-mechanism", "scram-sha-256", "--sasl-user", "alice"}

	requireOK(t, run(t, append([]string{"register", "controller", "--member", "node-1"}, secure...)...))
	r := run(t, append([]string{"records", "controller", "-o", "json"}, secure...)...)
	requireOK(t, r)
	assert.Contains(t, r.Stdout, `"member":"node-1"`)

	t.Run("wrong password", func(t *testing.T) {
		t.Setenv("KROLE_SASL_PASSWORD", "wrong")
		r := run(t, append([]string{"records", "controller"}, secure...)...)
		assertOneLineError(t, r, ExitFailure)
		// kfake closes the connection on a failed login where Apache Kafka
		// answers SASL_AUTHENTICATION_FAILED; either way the line says what
		// to check.
		assert.Contains(t, r.Stderr, brokers)
		assert.Contains(t, r.Stderr, "check --sasl-mechanism, --sasl-user and the password")
	})
	t.Run("untrusted certificate", func(t *testing.T) {
		t.Setenv("KROLE_TLS_CA", "")
		r := run(t, append([]string{"records", "controller", "--tls"}, secure...)...)
		assertOneLineError(t, r, ExitFailure)
		assert.Contains(t, r.Stderr, "TLS with "+brokers+" failed")
	})
}
