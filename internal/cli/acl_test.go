package cli

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/devcluster"
	"github.com/krabka/krole/internal/testcluster"
)

// aclCluster is an embedded cluster with SASL/SCRAM and ACLs on, and the
// role topic created by its superuser.
type aclCluster struct {
	brokers string
	topic   string
	prefix  string
}

// allow returns ALLOW ACLs of ops on one resource.
func allow(res kmsg.ACLResourceType, name string, pattern kmsg.ACLResourcePatternType, ops ...kmsg.ACLOperation) []kfake.ACL {
	var acls []kfake.ACL
	for _, op := range ops {
		acls = append(acls, kfake.ACL{Resource: res, Name: name, Pattern: pattern, Operation: op, Allow: true})
	}
	return acls
}

func concat(lists ...[]kfake.ACL) []kfake.ACL {
	var out []kfake.ACL
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

// startACLCluster starts the cluster with users that each hold one row
// of the table of ACLs in docs/OPERATING.md, or one ACL less than it.
func startACLCluster(t *testing.T) aclCluster {
	t.Helper()
	if testcluster.External() {
		t.Skip("needs the embedded cluster with ACLs; KROLE_BROKERS names an outside cluster")
	}
	const (
		topic  = "acl.roles"
		prefix = "acl."
		scram  = fencing.SASLScramSHA256
	)
	lit, pre := kmsg.ACLResourcePatternTypeLiteral, kmsg.ACLResourcePatternTypePrefixed
	topicRes, txnRes := kmsg.ACLResourceTypeTopic, kmsg.ACLResourceTypeTransactionalId
	read, write, describe := kmsg.ACLOperationRead, kmsg.ACLOperationWrite, kmsg.ACLOperationDescribe
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fake, err := devcluster.Start(ctx, testcluster.DevOptions(t, devcluster.Options{Extra: []kfake.Opt{
		kfake.EnableSASL(),
		kfake.EnableACLs(),
		kfake.Superuser(scram, "admin", "admin-pw"),
		// A member, as the first row of docs/OPERATING.md's ACL table says: Read, Write, Describe
		// on the topic; Write, Describe on the prefix of the
		// transactional ids.
		kfake.User(scram, "member", "member-pw", concat(
			allow(topicRes, topic, lit, read, write, describe),
			allow(txnRes, prefix, pre, write, describe))...),
		// A member without Write on the transactional id.
		kfake.User(scram, "nowrite", "nowrite-pw", concat(
			allow(topicRes, topic, lit, read, write, describe),
			allow(txnRes, prefix, pre, describe))...),
		// table and serve: Read, Describe on the topic only. Read alone
		// implies Describe, so Read is all this user has.
		kfake.User(scram, "reader", "reader-pw", allow(topicRes, topic, lit, read)...),
		// register and resign: Write on the topic (Describe implied).
		kfake.User(scram, "writer", "writer-pw", allow(topicRes, topic, lit, write)...),
		// describe: Describe on one transactional id, nothing else.
		kfake.User(scram, "describer", "describer-pw", allow(txnRes, prefix+"ctl", lit, describe)...),
	}}))
	require.NoError(t, err)
	t.Cleanup(fake.Close)
	admin := fencing.Config{Brokers: fake.ListenAddrs(), Topic: topic,
		SASL: fencing.SASLConfig{Mechanism: scram, User: "admin", Password: "admin-pw"}}
	require.NoError(t, devcluster.CreateTopic(ctx, admin, 1, 1))
	return aclCluster{brokers: strings.Join(fake.ListenAddrs(), ","), topic: topic, prefix: prefix}
}

// as returns the environment of a krole process that connects as user.
func (c aclCluster) as(user string) []string {
	return []string{
		"KROLE_BROKERS=" + c.brokers, "KROLE_TOPIC=" + c.topic, "KROLE_TXN_PREFIX=" + c.prefix,
		"KROLE_SASL_MECHANISM=SCRAM-SHA-256", "KROLE_SASL_USER=" + user, "KROLE_SASL_PASSWORD=" + user + "-pw",
		"KROLE_OUTPUT=", "KROLE_MEMBER=", "KROLE_VERBOSE=",
	}
}

// procResult is what a finished krole process produced.
type procResult struct {
	Code           int
	Stdout, Stderr string
}

// runProc runs bin with args and env (on top of the test's environment)
// to completion, bounded by limit: a process still running then is killed
// and fails the test.
func runProc(t *testing.T, bin string, env []string, limit time.Duration, args ...string) procResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(cmd.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	require.NoError(t, ctx.Err(), "krole %v did not exit within %v; stderr:\n%s", args, limit, stderr.String())
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return procResult{Code: code, Stdout: stdout.String(), Stderr: stderr.String()}
}

// lastLine is the last line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}

// TestACLs checks the table of ACLs in docs/OPERATING.md against a cluster that
// enforces them, through the krole binary: each principal that holds the
// ACLs of a row can run its commands, and one that lacks an ACL gets one
// line naming it and exit 1.
func TestACLs(t *testing.T) {
	t.Parallel()
	bin := processTest(t, "")
	c := startACLCluster(t)
	// The longest a command may take here: a member takes a vacant role
	// within a few renew intervals. A member that retried a refused call
	// forever would run into it.
	const limit = 45 * time.Second
	runArgs := func(member string) []string {
		return append(append([]string{"run", "ctl", "--member", member}, testTimingFlags()...), "--", "true")
	}

	t.Run("member without Read on the topic", func(t *testing.T) {
		// The topic is empty, so the view would catch up without a
		// fetch and be refused only once the member's registration is
		// there to read: the member checks Read before it registers.
		r := runProc(t, bin, c.as("writer"), limit, runArgs("w-0")...)
		assert.Equal(t, ExitFailure, r.Code, "stderr:\n%s", r.Stderr)
		assert.Equal(t, "krole: not authorized: READ on Topic acl.roles (TOPIC_AUTHORIZATION_FAILED)", lastLine(r.Stderr))
		assert.Equal(t, 1, strings.Count(r.Stderr, "not authorized"), "one line names the ACL; stderr:\n%s", r.Stderr)
		r = runProc(t, bin, c.as("reader"), limit, "records", "ctl")
		require.Equal(t, ExitOK, r.Code, "stderr:\n%s", r.Stderr)
		assert.NotContains(t, r.Stdout, "w-0", "it did not register")
	})

	t.Run("member without Write on the transactional id", func(t *testing.T) {
		r := runProc(t, bin, c.as("nowrite"), limit, runArgs("nw-1")...)
		assert.Equal(t, ExitFailure, r.Code, "stderr:\n%s", r.Stderr)
		// The first transactional id it uses is its member session's, at
		// its start.
		assert.Equal(t, "krole: not authorized: WRITE on TransactionalId acl.session/nw-1 (TRANSACTIONAL_ID_AUTHORIZATION_FAILED)", lastLine(r.Stderr))
		assert.Equal(t, 1, strings.Count(r.Stderr, "not authorized"), "one line names the ACL; stderr:\n%s", r.Stderr)
		assert.NotContains(t, r.Stderr, "elected")
		// It left the candidates as it went.
		r = runProc(t, bin, c.as("reader"), limit, "records", "ctl", "-o", "json")
		require.Equal(t, ExitOK, r.Code, "stderr:\n%s", r.Stderr)
		require.Contains(t, r.Stdout, `"member":"nw-1"`, "it registered")
		r = runProc(t, bin, c.as("reader"), limit, "table", "ctl", "-o", "json")
		require.Equal(t, ExitOK, r.Code, "stderr:\n%s", r.Stderr)
		assert.NotContains(t, r.Stdout, "nw-1", "it is no longer a candidate")
	})

	t.Run("member with the documented ACLs", func(t *testing.T) {
		// CMD (true) exits 0 at once: krole run takes the role, runs it,
		// resigns and exits 0.
		r := runProc(t, bin, c.as("member"), limit, runArgs("m-1")...)
		require.Equal(t, ExitOK, r.Code, "stderr:\n%s", r.Stderr)
		assert.Contains(t, r.Stderr, "krole run: elected ctl as m-1")
		assert.Contains(t, r.Stderr, "krole run: resigned ctl")
	})

	t.Run("register and resign need Write on the topic", func(t *testing.T) {
		r := runProc(t, bin, c.as("writer"), limit, "register", "ctl", "--member", "w-1")
		require.Equal(t, ExitOK, r.Code, "stderr:\n%s", r.Stderr)
		r = runProc(t, bin, c.as("writer"), limit, "resign", "ctl", "--member", "w-1")
		require.Equal(t, ExitOK, r.Code, "stderr:\n%s", r.Stderr)
		// It cannot read the topic, so it says nothing about the
		// registration it could not check.
		assert.Empty(t, r.Stderr)

		r = runProc(t, bin, c.as("reader"), limit, "register", "ctl", "--member", "r-1")
		assert.Equal(t, ExitFailure, r.Code)
		assert.Equal(t, "krole: not authorized: WRITE on Topic acl.roles (TOPIC_AUTHORIZATION_FAILED)\n", r.Stderr)
	})

	t.Run("table and records need Read on the topic", func(t *testing.T) {
		r := runProc(t, bin, c.as("reader"), limit, "table", "-o", "json")
		require.Equal(t, ExitOK, r.Code, "stderr:\n%s", r.Stderr)
		assert.Contains(t, r.Stdout, `"role":"ctl"`)
		r = runProc(t, bin, c.as("reader"), limit, "records", "ctl")
		require.Equal(t, ExitOK, r.Code, "stderr:\n%s", r.Stderr)
		// The reader may not Describe the role's transactional id: the
		// leases count by their record batch alone, and it says so.
		assert.Contains(t, r.Stderr, "not authorized to Describe transactional id acl.ctl; they count by their record batch alone", "stdout:\n%s", r.Stdout)

		// Without Read, each says so at the first refusal, rather than
		// retrying until its timeout.
		for _, args := range [][]string{{"records", "ctl"}, {"table"}, {"table", "ctl", "-o", "json"}} {
			r = runProc(t, bin, c.as("writer"), limit, args...)
			assert.Equal(t, ExitFailure, r.Code, "%v", args)
			assert.Equal(t, "krole: not authorized: READ on Topic acl.roles (TOPIC_AUTHORIZATION_FAILED)\n", r.Stderr, "%v", args)
		}
		r = runProc(t, bin, c.as("writer"), limit, "serve", "--listen", "127.0.0.1:0")
		assert.Equal(t, ExitFailure, r.Code)
		assert.Equal(t, "krole: not authorized: READ on Topic acl.roles (TOPIC_AUTHORIZATION_FAILED)", lastLine(r.Stderr))
		assert.Equal(t, 1, strings.Count(r.Stderr, "not authorized"), "stderr:\n%s", r.Stderr)
	})

	t.Run("serve needs Read on the topic", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), limit)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, "serve", "--listen", "127.0.0.1:0")
		cmd.Env = append(cmd.Environ(), c.as("reader")...)
		var stderr testcluster.SyncBuffer // read while serve runs
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
		line, err := bufio.NewReader(out).ReadString('\n')
		require.NoError(t, err, "stderr: %s", stderr.String())
		url, ok := strings.CutPrefix(strings.TrimSpace(line), "listening: ")
		require.True(t, ok, "%q", line)
		require.Eventually(t, func() bool {
			res, err := http.Get(url + "/healthz")
			if err != nil {
				return false
			}
			_, _ = io.Copy(io.Discard, res.Body)
			_ = res.Body.Close()
			return res.StatusCode == http.StatusOK
		}, limit/2, 50*time.Millisecond, "serve as a reader never became healthy; stderr:\n%s", stderr.String())
		res, err := http.Get(url + "/v1/roles/ctl")
		require.NoError(t, err)
		body, _ := io.ReadAll(res.Body)
		_ = res.Body.Close()
		assert.Equal(t, http.StatusOK, res.StatusCode, "%s", body)
		require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
		assert.NoError(t, cmd.Wait(), "stderr: %s", stderr.String())
	})

	t.Run("describe needs Describe on the transactional id", func(t *testing.T) {
		r := runProc(t, bin, c.as("describer"), limit, "describe", "ctl", "-o", "json")
		require.Equal(t, ExitOK, r.Code, "stderr:\n%s", r.Stderr)
		assert.Contains(t, r.Stdout, `"role":"ctl"`)
		// Without Read on the topic the token is still the answer; the
		// lease is unknown, and said to be.
		assert.Contains(t, r.Stdout, `"lease_unknown":"not authorized to read topic`)
		assert.Contains(t, r.Stderr, "the lease is unknown")

		// A refusal is final: describe does not resend until its request
		// budget (the request timeout) runs out.
		r = runProc(t, bin, c.as("reader"), fencing.DefaultRequestTimeout, "describe", "ctl")
		assert.Equal(t, ExitFailure, r.Code)
		assert.Equal(t, "krole: not authorized: DESCRIBE on TransactionalId acl.ctl (TRANSACTIONAL_ID_AUTHORIZATION_FAILED)\n", r.Stderr)
	})
}
