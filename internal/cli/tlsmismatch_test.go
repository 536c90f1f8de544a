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

// TestTLSMismatch connects with TLS to a plaintext listener, and without
// TLS to a TLS listener. Each command fails with one line that says what
// to change, within the dial timeout (plus slack for a busy machine):
// a handshake that cannot succeed is tried once, not resent until the
// request timeouts of the client's retries have passed (20 s before).
func TestTLSMismatch(t *testing.T) {
	if testcluster.External() {
		t.Skip("needs embedded clusters with and without TLS; KROLE_BROKERS names an outside cluster")
	}
	caFile, serverTLS := testcluster.SelfSignedTLS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	plain, err := devcluster.Start(ctx, testcluster.DevOptions(t, devcluster.Options{Topic: "plain.roles"}))
	require.NoError(t, err)
	t.Cleanup(plain.Close)
	secure, err := devcluster.Start(ctx, testcluster.DevOptions(t, devcluster.Options{Extra: []kfake.Opt{kfake.TLS(serverTLS)}}))
	require.NoError(t, err)
	t.Cleanup(secure.Close)
	plainAddrs := strings.Join(plain.ListenAddrs(), ",")
	tlsAddrs := strings.Join(secure.ListenAddrs(), ",")
	// The commands run with the default dial timeout; kfake's plaintext
	// listener never answers a ClientHello, so the handshake takes all of
	// it.
	bound := fencing.DefaultDialTimeout + schedulingSlack
	t.Setenv("KROLE_TLS_CA", "")

	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"records with --tls-ca to a plaintext listener", []string{"records", "ctl", "--tls-ca", caFile, "--brokers", plainAddrs, "--topic", "plain.roles"},
			[]string{"krole: TLS handshake with " + plainAddrs + " failed", "is the listener plaintext? drop --tls"}},
		{"table with --tls to a plaintext listener", []string{"table", "--tls", "--brokers", plainAddrs, "--topic", "plain.roles"},
			[]string{"krole: TLS handshake with " + plainAddrs + " failed", "is the listener plaintext? drop --tls"}},
		{"records without TLS to a TLS listener", []string{"records", "ctl", "--brokers", tlsAddrs},
			[]string{"krole: no broker answered at " + tlsAddrs, "is the listener TLS? add --tls"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // after this test's body, with its environment
			start := time.Now()
			r := run(t, tc.args...)
			took := time.Since(start)
			assertOneLineError(t, r, ExitFailure)
			for _, w := range tc.want {
				assert.Contains(t, r.Stderr, w)
			}
			assert.Less(t, took, bound, "the failure came after the dial timeout %v plus %v of slack: %s", fencing.DefaultDialTimeout, schedulingSlack, r.Stderr)
		})
	}
}
