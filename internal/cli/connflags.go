package cli

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"

	"github.com/krabka/krole/fencing"
)

// validateConnection refuses, as usage errors, the connection settings that
// fencing.Config.Validate lets through but that cannot work: a broker port
// outside 1-65535, --sasl-user or a SASL password without
// --sasl-mechanism (either would be ignored), and TLS files that cannot be read (said with the flag's name,
// not the package that first opened them).
func validateConnection(cfg fencing.Config) error {
	hint := "see 'krole --help' for the connection flags"
	for _, b := range cfg.Brokers {
		if _, port, err := net.SplitHostPort(b); err == nil {
			if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
				return &UsageError{Err: fmt.Errorf("broker address %q: port %s is not 1-65535", b, port), Hint: hint}
			}
		}
	}
	if cfg.SASL.User != "" && cfg.SASL.Mechanism == "" {
		return &UsageError{Err: fmt.Errorf("--sasl-user %s needs --sasl-mechanism (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512); without it no SASL is used", cfg.SASL.User),
			Hint: hint}
	}
	if cfg.SASL.Password != "" && cfg.SASL.Mechanism == "" {
		// Never the password itself: it may have come from the environment.
		return &UsageError{Err: errors.New("a SASL password (--sasl-password or KROLE_SASL_PASSWORD) needs --sasl-mechanism and --sasl-user; without them no SASL is used"),
			Hint: hint}
	}
	for _, f := range []struct{ flag, path string }{
		{"--tls-ca", cfg.TLS.CAFile}, {"--tls-cert", cfg.TLS.CertFile}, {"--tls-key", cfg.TLS.KeyFile},
	} {
		if f.path == "" {
			continue
		}
		if _, err := os.ReadFile(f.path); err != nil {
			return &UsageError{Err: fmt.Errorf("%s %s: %w", f.flag, f.path, err), Hint: hint}
		}
	}
	return nil
}
