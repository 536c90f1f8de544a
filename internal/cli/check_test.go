package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/check"
	"github.com/krabka/krole/internal/devcluster"
	"github.com/krabka/krole/internal/testcluster"
)

// startKroleDev starts the cluster `krole dev` starts (the embedded cluster with
// the default role topic, compacted, with the settings krole init sets) and
// returns its brokers.
func startKroleDev(t *testing.T) string {
	t.Helper()
	if testcluster.External() {
		t.Skip("starts the embedded cluster as krole dev does")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := devcluster.Start(ctx, testcluster.DevOptions(t, devcluster.Options{Topic: fencing.DefaultTopic,
		TopicConfigs: devcluster.RoleTopicConfigMap(devcluster.DefaultRoleTopicDeleteRetain)})) // as dev.go starts it
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return strings.Join(c.ListenAddrs(), ",")
}

// checkLine is one check's line of krole check's text output, unwrapped.
var checkLine = regexp.MustCompile(`^([a-z.-]+) +(PASS|WARN|FAIL|SKIP)  \S`)

// checkText splits krole check's text output into each check's line,
// with its wrapped continuation lines joined to it, and the summary that
// ends it. Every line printed is at most check.LineWidth characters.
func checkText(t *testing.T, stdout string) (checks []string, summary string) {
	t.Helper()
	var all []string
	for _, l := range strings.Split(strings.TrimRight(stdout, "\n"), "\n") {
		assert.LessOrEqual(t, len(l), check.LineWidth, "line %q", l)
		if strings.HasPrefix(l, " ") && len(all) > 0 {
			all[len(all)-1] += " " + strings.TrimSpace(l)
			continue
		}
		all = append(all, l)
	}
	require.NotEmpty(t, all)
	summary, ok := strings.CutPrefix(all[len(all)-1], "summary: ")
	require.True(t, ok, "the last line is the summary: %q", stdout)
	return all[:len(all)-1], summary
}

// TestCheckOnKroleDev: against the cluster of `krole dev`, krole check
// exits 0, with one line per check, every one PASS; -o json says the
// same.
func TestCheckOnKroleDev(t *testing.T) {
	t.Parallel()
	brokers := startKroleDev(t)
	r := run(t, "check", "--brokers", brokers)
	requireOK(t, r)
	assert.Empty(t, r.Stderr)
	lines, summary := checkText(t, r.Stdout)
	assert.Regexp(t, `^no check failed \(\d+ passed, 0 warned, 0 skipped\)$`, summary)
	var names []string
	for _, l := range lines {
		m := checkLine.FindStringSubmatch(l)
		require.NotNil(t, m, "line %q", l)
		assert.Equal(t, "PASS", m[2], "on krole dev every check passes, without a warning: %q", l)
		names = append(names, m[1])
	}
	assert.Contains(t, names, check.NameTxnFence)
	assert.Equal(t, check.NameCleanup, names[len(names)-1])

	r = run(t, "check", "--brokers", brokers, "-o", "json")
	requireOK(t, r)
	var out struct {
		Checks []struct {
			Name   string  `json:"name"`
			OK     *bool   `json:"ok"`
			Detail string  `json:"detail"`
			Fix    *string `json:"fix"`
		} `json:"checks"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.Stdout), &out), r.Stdout)
	require.Len(t, out.Checks, len(names))
	// The shape: {"checks":[{"name","ok","detail","fix"}]}, plus "warn"
	// and "skipped" when true, and nothing else.
	var raw map[string][]map[string]json.RawMessage
	require.NoError(t, json.Unmarshal([]byte(r.Stdout), &raw), r.Stdout)
	require.Len(t, raw, 1, "one key, checks (and interrupted, when interrupted)")
	for _, c := range raw["checks"] {
		for _, k := range []string{"name", "ok", "detail", "fix"} {
			assert.Contains(t, c, k)
		}
		for k := range c {
			assert.Contains(t, []string{"name", "ok", "detail", "fix", "warn", "skipped"}, k)
		}
	}
	for i, c := range out.Checks {
		assert.Equal(t, names[i], c.Name)
		require.NotNil(t, c.OK, c.Name)
		assert.True(t, *c.OK, c.Name)
		assert.NotEmpty(t, c.Detail, c.Name)
		assert.NotNil(t, c.Fix, "%s: every check has a fix field, empty when there is nothing to do", c.Name)
	}
}

// TestCheckFailsOnADeletingTopic: a failed check exits 1 and its line
// names the setting and the fix.
func TestCheckFailsOnADeletingTopic(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{})
	topic := c.Topic(t, c.Name("deleting"), 1, 10*time.Second)
	r := run(t, "check", "--brokers", strings.Join(c.Config.Brokers, ","), "--topic", topic, "--txn-prefix", c.Config.TxnPrefix)
	assert.Equal(t, ExitFailure, r.Code, "stdout: %s\nstderr: %s", r.Stdout, r.Stderr)
	assert.Empty(t, r.Stderr, "the failures are in the report")
	lines, summary := checkText(t, r.Stdout)
	assert.Regexp(t, `(?m)^role-topic +FAIL  topic \S+ has cleanup.policy=delete: .*; fix: kafka-configs.sh .*cleanup.policy=compact$`,
		strings.Join(lines, "\n"))
	assert.Regexp(t, `^1 of \d+ checks failed; the first, role-topic: topic \S+ has cleanup.policy=delete`, summary)
	// One line per check; each failure with its fix.
	for _, l := range lines {
		m := checkLine.FindStringSubmatch(l)
		require.NotNil(t, m, "line %q", l)
		if m[2] == "FAIL" {
			assert.Regexp(t, `; fix: \S`, l)
		}
	}
}

// TestCheckUnreachable: no broker answers: exit 1, one line.
func TestCheckUnreachable(t *testing.T) {
	t.Parallel()
	r := run(t, "check", "--brokers", "127.0.0.1:1", "--timeout", "5s")
	assert.Equal(t, ExitFailure, r.Code)
	assert.Empty(t, r.Stderr)
	lines, summary := checkText(t, r.Stdout)
	require.Len(t, lines, 1, "stdout: %q", r.Stdout)
	assert.Regexp(t, `^reachability +FAIL  no broker answered at 127\.0\.0\.1:1: .*; fix: check --brokers`, lines[0])
	assert.Regexp(t, `^1 of 1 checks failed; the first, reachability: no broker answered`, summary)

	r = run(t, "check", "--brokers", "127.0.0.1:1", "--timeout", "5s", "-o", "json")
	assert.Equal(t, ExitFailure, r.Code)
	assert.Contains(t, r.Stdout, `{"checks":[{"name":"reachability","ok":false,"detail":"no broker answered at 127.0.0.1:1`)
}

// TestCheckUsage: bad flags are usage errors, exit 2, one line.
func TestCheckUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"check", "--as", "admin"},
		{"check", "--as", "bogus"},
		{"check", "--as"},
		{"check", "-o", "yaml"},
		{"check", "--timeout", "soon"},
		{"check", "extra"},
		{"check", "--timeout", "0s"},
		{"check", "--lease-duration", "-1s"},
	} {
		r := run(t, args...)
		assertOneLineError(t, r, ExitUsage)
	}
	assert.Contains(t, run(t, "check", "--as", "bogus").Stderr, `--as "bogus": must be member, operator or viewer`)
	assert.Contains(t, run(t, "check", "-o", "yaml").Stderr, `--output "yaml": must be table or json`)
}

// TestCheckOverTLSAndSCRAM: the checks run over the configured TLS and
// SASL, and reachability says so.
func TestCheckOverTLSAndSCRAM(t *testing.T) {
	if testcluster.External() {
		t.Skip("needs the embedded cluster with TLS and SASL; KROLE_BROKERS names an outside cluster")
	}
	caFile, serverTLS := testcluster.SelfSignedTLS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fake, err := devcluster.Start(ctx, testcluster.DevOptions(t, devcluster.Options{Extra: []kfake.Opt{
		kfake.TLS(serverTLS), kfake.EnableSASL(), kfake.Superuser(fencing.SASLScramSHA256, "alice", "s3cret-pw"),
	}}))
	require.NoError(t, err)
	t.Cleanup(fake.Close)
	cfg := fencing.Config{Brokers: fake.ListenAddrs(), Topic: "secure.roles",
		TLS:  fencing.TLSConfig{Enable: true, CAFile: caFile},
		SASL: fencing.SASLConfig{Mechanism: fencing.SASLScramSHA256, User: "alice", Password: "s3cret-pw"}}
	require.NoError(t, devcluster.CreateTopic(ctx, cfg, 1, 1))
	t.Setenv("KROLE_SASL_PASSWORD", "s3cret-pw")
	r := run(t, "check", "--brokers", strings.Join(fake.ListenAddrs(), ","), "--topic", "secure.roles",
		"--tls-ca", caFile, "--sasl-mechanism", "SCRAM-SHA-256", "--sasl-user", "alice")
	requireOK(t, r)
	assert.Regexp(t, `(?m)^reachability +PASS  1 broker\(s\) answered at \S+ over TLS with SASL SCRAM-SHA-256`, r.Stdout)
	assert.Regexp(t, `(?m)^transactions.fence +PASS`, r.Stdout)

	// Without TLS, the one check's line says what to fix.
	r = run(t, "check", "--brokers", strings.Join(fake.ListenAddrs(), ","), "--topic", "secure.roles",
		"--sasl-mechanism", "SCRAM-SHA-256", "--sasl-user", "alice", "--timeout", "5s")
	assert.Equal(t, ExitFailure, r.Code)
	lines, _ := checkText(t, r.Stdout)
	require.Len(t, lines, 1, "stdout: %q", r.Stdout)
	assert.Regexp(t, `^reachability +FAIL  no broker answered at .*add --tls`, lines[0])
}

// TestCheckDocs: docs/CHECK.md has a section for every check (the acl.*
// checks in one, each named in its table) and notes for Confluent Cloud,
// Amazon MSK and Redpanda; the README's install and set-up sections send
// the reader to krole check before pointing krole at a cluster.
func TestCheckDocs(t *testing.T) {
	t.Parallel()
	doc := readDoc(t, "docs/CHECK.md")
	for _, n := range []string{check.NameReachability, check.NameVersions, check.NameRoleTopic, check.NameRolePartitions, check.NameDurability,
		check.NameTxnInit, check.NameTimeouts, check.NameDescribe, check.NameClock, check.NameLatency, check.NameCleanup} {
		assert.Contains(t, doc, "\n### "+n+"\n", "docs/CHECK.md has no section for %s", n)
	}
	assert.Contains(t, doc, "\n### transactions.fence and transactions.read-committed\n")
	assert.Contains(t, doc, "\n### acl.*\n")
	for _, n := range []string{check.NameACLTopicRead, check.NameACLTopicWrite, check.NameACLTxnWrite, check.NameACLTxnDescribe, check.NameACLTxnSession,
		check.NameACLTopicDescribeConfigs, check.NameACLTopicCreate, check.NameACLTopicAlter} {
		assert.Contains(t, doc, "| `"+n+"` |", "the acl.* table of docs/CHECK.md does not name %s", n)
	}
	for _, p := range []string{"**Confluent Cloud.**", "**Amazon MSK (provisioned).**", "**Redpanda.**"} {
		assert.Contains(t, doc, p, "docs/CHECK.md has no notes for %s", p)
	}
	// The install and set-up sections: from "## Install" to the tour.
	readme := readDoc(t, "README.md")
	start, end := strings.Index(readme, "\n## Install\n"), strings.Index(readme, "\n## A one-screen tour\n")
	require.True(t, start >= 0 && end > start, "README.md has its Install, Set up and tour sections")
	assert.Regexp(t, "(?i)before pointing krole at your cluster, run `krole check`", readme[start:end])
}

// TestCheckMissingTopic: one cause, a topic that does not exist, fails
// several checks; the summary names it and its fix, and no line is
// longer than check.LineWidth.
func TestCheckMissingTopic(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{})
	r := run(t, "check", "--brokers", strings.Join(c.Config.Brokers, ","), "--topic", "nosuch", "--txn-prefix", c.Config.TxnPrefix)
	assert.Equal(t, ExitFailure, r.Code, "stdout: %s\nstderr: %s", r.Stdout, r.Stderr)
	lines, summary := checkText(t, r.Stdout)
	failed := 0
	for _, l := range lines {
		m := checkLine.FindStringSubmatch(l)
		require.NotNil(t, m, "line %q", l)
		if m[2] == "FAIL" {
			failed++
		}
	}
	require.Greater(t, failed, 1, "one cause fails several checks")
	assert.Equal(t, fmt.Sprintf("%d of %d checks failed; the first, role-topic: topic nosuch does not exist; "+
		"fix that first: create it with 'krole init --topic nosuch' (or check --topic)", failed, len(lines)), summary)
	assert.NotContains(t, r.Stdout, "Request was for a topic or partition", "the cause in krole's words")
}

// TestCheckInterrupted: krole check stopped by SIGTERM says so, not that
// its budget ran out, skips what it had not run, cleans up and exits 1.
func TestCheckInterrupted(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary; skipped with -short")
	}
	bin := buildKrole(t)
	c := testcluster.Start(t, testcluster.Options{})
	cmd := exec.Command(bin, append(clusterFlags(c), "check")...)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	sc := bufio.NewScanner(out)
	var stdout []string
	for sc.Scan() {
		stdout = append(stdout, sc.Text())
		if strings.HasPrefix(sc.Text(), check.NameVersions) {
			require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
			break
		}
	}
	for sc.Scan() {
		stdout = append(stdout, sc.Text())
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "stdout:\n%s", strings.Join(stdout, "\n"))
	assert.Equal(t, ExitFailure, ee.ExitCode())
	text := strings.Join(stdout, "\n")
	assert.NotContains(t, text, "budget")
	lines, summary := checkText(t, text+"\n")
	assert.Regexp(t, `^interrupted by SIGTERM: \d+ of \d+ checks not run or cut short; no verdict$`, summary)
	assert.Regexp(t, `(?m)^latency +SKIP  not run: interrupted by SIGTERM$`, strings.Join(lines, "\n"))
	assert.Regexp(t, `(?m)^cleanup +PASS  `, strings.Join(lines, "\n"), "the clean-up runs all the same")
}
