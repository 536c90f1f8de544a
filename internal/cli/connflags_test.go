package cli

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestConnectionFlagsValidated: impossible connection settings are usage
// errors (exit 2) that name the flag, before any connection: a port out
// of range (as a malformed address is), --sasl-user or a password (flag
// or environment, never echoed) without a mechanism, and an unreadable TLS file (without the name of an internal package).
func TestConnectionFlagsValidated(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"table", "-b", "127.0.0.1:99999"}, `krole: broker address "127.0.0.1:99999": port 99999 is not 1-65535`},
		{[]string{"table", "-b", "127.0.0.1:0"}, `port 0 is not 1-65535`},
		{[]string{"records", "r", "-b", "127.0.0.1:1", "--sasl-user", "bob"}, "krole: --sasl-user bob needs --sasl-mechanism"},
		{[]string{"records", "r", "-b", "127.0.0.1:1", "--sasl-password", "s3cret"}, "krole: a SASL password (--sasl-password or KROLE_SASL_PASSWORD) needs --sasl-mechanism and --sasl-user"},
		{[]string{"table", "-b", "127.0.0.1:1", "--tls-ca", "/nonexistent/ca.pem"}, "krole: --tls-ca /nonexistent/ca.pem: open /nonexistent/ca.pem: no such file or directory"},
		{[]string{"records", "r", "-b", "127.0.0.1:1", "--tls-ca", "/nonexistent/ca.pem"}, "krole: --tls-ca /nonexistent/ca.pem: "},
	} {
		r := run(t, tc.args...)
		assertOneLineError(t, r, ExitUsage)
		assert.Contains(t, r.Stderr, tc.want)
		assert.NotContains(t, r.Stderr, "view:")
		assert.NotContains(t, r.Stderr, "fencing config:")
	}
	t.Setenv("KROLE_SASL_PASSWORD", "s3cret")
	r := run(t, "table", "-b", "127.0.0.1:1")
	assertOneLineError(t, r, ExitUsage)
	assert.Contains(t, r.Stderr, "needs --sasl-mechanism and --sasl-user")
	assert.NotContains(t, r.Stderr, "s3cret")
}
