package cli

import (
	"encoding/json"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/krabka/krole/internal/runner"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Usage errors exit 2 before any connection is tried, so these tests need
// no cluster: the brokers flag points nowhere on purpose.
func TestUsageErrors(t *testing.T) {
	t.Parallel()
	nowhere := []string{"--brokers", "127.0.0.1:1"}
	cases := []struct {
		name string
		args []string
		want []string // substrings of stderr
	}{
		{"invalid role names the rule", []string{"records", "a/b"}, []string{`invalid role "a/b"`, "[A-Za-z0-9._-]", `'/' at byte 1`}},
		{"empty role", []string{"describe", ""}, []string{"invalid role", "it is empty"}},
		{"invalid member names the rule", []string{"register", "controller", "--member", "node 1"}, []string{`invalid member id "node 1"`, "[A-Za-z0-9._:@-]"}},
		{"missing member", []string{"register", "controller"}, []string{"--member", "krole register --help"}},
		{"missing role", []string{"records"}, []string{"needs a ROLE argument", "krole records --help"}},
		{"extra argument", []string{"describe", "a", "b"}, []string{`unexpected "b"`}},
		{"unknown flag after the role", []string{"records", "controller", "--bogus"}, []string{"unknown flag --bogus", "krole records --help"}},
		{"unknown global flag", []string{"--bogus", "records", "controller"}, []string{"unknown flag --bogus"}},
		{"misspelt flag gets a suggestion", []string{"register", "controller", "--membr", "x"}, []string{"unknown flag --membr", "did you mean --member?"}},
		{"flag without its value", []string{"register", "controller", "--member"}, []string{"--member needs a value"}},
		{"bad output format", []string{"records", "controller", "-o", "xml"}, []string{`--output "xml"`, "table or json"}},
		{"unknown command", []string{"recrods", "controller"}, []string{`unknown command "recrods"`, "did you mean 'krole records'"}},
		{"help for an unknown command", []string{"help", "nosuch"}, []string{"unknown command 'nosuch'"}},
		{"bad broker address", []string{"records", "controller", "--brokers", "nohost"}, []string{`"nohost" is not host:port`}},
		{"bad SASL mechanism", []string{"records", "controller", "--sasl-mechanism", "MD5", "--sasl-user", "u"}, []string{"MD5", "SCRAM-SHA-512"}},
		{"dev takes no argument", []string{"dev", "extra"}, []string{"dev takes no arguments"}},
		{"dev with a bad listen address", []string{"dev", "--listen", "9092"}, []string{`--listen "9092"`}},
		{"bad bool flag value", []string{"records", "controller", "--tls=maybe"}, []string{"--tls", "maybe"}},
		{"too many partitions", []string{"init", "--partitions", "200000"}, []string{"--partitions 200000: must be 1 to 100000"}},
		{"replication factor out of range", []string{"init", "--replication-factor", "40000"}, []string{"--replication-factor 40000: must be 1 to 32767"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, append(nowhere, tc.args...)...)
			assertOneLineError(t, r, ExitUsage)
			for _, w := range tc.want {
				assert.Contains(t, r.Stderr, w)
			}
		})
	}
}

func TestNoCommandShowsHelpOnStderr(t *testing.T) {
	t.Parallel()
	r := run(t)
	assert.Equal(t, ExitUsage, r.Code)
	assert.Empty(t, r.Stdout)
	assert.Contains(t, r.Stderr, "usage: krole [global flags] COMMAND [flags] [ROLE]\n")
	assert.Contains(t, r.Stderr, "commands: dev, demo, init, register,")
	assert.NotContains(t, r.Stderr, "GLOBAL OPTIONS", "a short usage, not the whole help")
	assert.LessOrEqual(t, strings.Count(r.Stderr, "\n"), 6)
}

func TestVersionJSON(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--version", "-o", "json"}, {"-o", "json", "--version"}, {"--output=json", "--version"}} {
		r := run(t, args...)
		requireOK(t, r)
		var v map[string]string
		require.NoError(t, json.Unmarshal([]byte(r.Stdout), &v), "%v: %q", args, r.Stdout)
		assert.NotEmpty(t, v["version"])
	}
}

func TestHelpAndVersion(t *testing.T) {
	t.Parallel()
	r := run(t, "--help")
	requireOK(t, r)
	for _, cmd := range []string{"dev", "init", "register", "resign", "describe", "records"} {
		assert.Contains(t, r.Stdout, "\n   "+cmd+" ")
	}
	assert.Contains(t, r.Stdout, "$KROLE_SASL_PASSWORD")

	r = run(t, "register", "--help")
	requireOK(t, r)
	assert.Contains(t, r.Stdout, "krole register ROLE --member M")

	r = run(t, "--version")
	requireOK(t, r)
	assert.True(t, strings.HasPrefix(r.Stdout, "krole version "), r.Stdout)

	r = run(t, "version", "-o", "json")
	requireOK(t, r)
	assert.Contains(t, r.Stdout, `"version":`)
}

// TestHelpListsExitCodes: the root help names every exit code krole uses.
func TestHelpListsExitCodes(t *testing.T) {
	t.Parallel()
	r := run(t, "--help")
	requireOK(t, r)
	_, desc, ok := strings.Cut(r.Stdout, "Exit codes:")
	require.True(t, ok, "the help has an exit-code paragraph")
	desc, _, _ = strings.Cut(desc, "COMMANDS:")
	desc = strings.Join(strings.Fields(desc), " ")
	for _, code := range []int{ExitOK, ExitFailure, ExitUsage, ExitRunTimeout, ExitRunBusy, ExitRunMemberInUse, runner.ExitCannotExecute, runner.ExitNotFound,
		128 + int(syscall.SIGINT), 128 + int(syscall.SIGTERM), ExitLeaderUnknown} {
		assert.Regexp(t, `\b`+strconv.Itoa(code)+`\b`, desc, "exit code %d", code)
	}
	assert.Contains(t, desc, "1 when the role has no live holder")
}

// The password from the environment must never be echoed by the help.
func TestHelpHidesPasswordFromEnvironment(t *testing.T) {
	t.Setenv("KROLE_SASL_PASSWORD", "hunter2-secret")
	r := run(t, "--help")
	requireOK(t, r)
	assert.NotContains(t, r.Stdout, "hunter2-secret")
}

func TestUnreachableBroker(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"records", "controller"},
		{"describe", "controller", "-o", "json"},
		{"register", "controller", "--member", "node-1"},
		{"init"},
	} {
		t.Run(args[0], func(t *testing.T) {
			r := run(t, append(args, "--brokers", "127.0.0.1:1")...)
			assertOneLineError(t, r, ExitFailure)
			assert.Contains(t, r.Stderr, "krole: no broker answered at 127.0.0.1:1")
		})
	}
}

// KROLE_BROKERS names the cluster when --brokers is not given.
func TestBrokersFromEnvironment(t *testing.T) {
	t.Setenv("KROLE_BROKERS", "127.0.0.1:1")
	r := run(t, "records", "controller")
	assertOneLineError(t, r, ExitFailure)
	assert.Contains(t, r.Stderr, "no broker answered at 127.0.0.1:1")
}

func TestNormalizeArgs(t *testing.T) {
	t.Parallel()
	app := newApp(nil, nil)
	cases := []struct{ in, want string }{
		{"records controller -o json", "-o json records controller"},
		{"register controller --member node-1 -o json", "-o json register --member node-1 controller"},
		{"register controller --member=node-1 --brokers=a:1", "--brokers=a:1 register --member=node-1 controller"},
		{"-o json describe controller", "-o json describe controller"},
		{"register -m n1 controller --tls", "--tls register -m n1 controller"},
		{"records -- -weird", "records -- -weird"},
		{"records controller --bogus", "records --bogus controller"},
		{"dev --listen 127.0.0.1:0 --topic t", "--topic t dev --listen 127.0.0.1:0"},
		{"register controller --help", "register --help controller"},
		{"nosuch -o json", "nosuch -o json"},
		{"--bogus records x", "--bogus records x"},
		{"register controller --member", "register --member"},
		{"records controller -o", "-o"},
		{"", ""},
	}
	for _, tc := range cases {
		got := strings.Join(normalizeArgs(app, strings.Fields(tc.in)), " ")
		assert.Equal(t, tc.want, got, "normalizeArgs(%q)", tc.in)
	}
}
