package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/runner"
	"github.com/krabka/krole/internal/testcluster"
	"github.com/krabka/krole/processor"
	"github.com/krabka/krole/rolestate"
	"github.com/krabka/krole/view"
)

// Short timings for the tests of `krole run`: a lease of 2s, renewed every
// 400ms, a stagger of 300ms. processor.Settings.Validate accepts them (the
// transaction timeout is 1s, below lease - heartbeat interval).
const (
	testLease   = 2 * time.Second
	testRenew   = 400 * time.Millisecond
	testStagger = 300 * time.Millisecond
)

func testTimingFlags() []string {
	return []string{"--lease-duration", testLease.String(), "--heartbeat-interval", testRenew.String(), "--stagger", testStagger.String()}
}

func TestRunUsageErrors(t *testing.T) {
	t.Setenv("KROLE_MEMBER", "")
	notExec := filepath.Join(t.TempDir(), "not-executable")
	require.NoError(t, os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644))
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no role", []string{"run"}, ExitUsage, "run needs a ROLE: krole run ROLE [-- CMD [ARGS...]]"},
		{"negative timeout", []string{"run", "controller", "--timeout", "-1s"}, ExitUsage, "--timeout -1s: must not be negative"},
		{"invalid role", []string{"run", "bad/role", "--", "true"}, ExitUsage, `invalid role "bad/role"`},
		{"invalid member", []string{"run", "controller", "--member", "node 1", "--", "true"}, ExitUsage, `invalid member id "node 1"`},
		{"lease not positive", []string{"run", "controller", "--lease-duration", "0s", "--", "true"}, ExitUsage, "--lease-duration 0s: must be positive"},
		{"stagger not positive", []string{"run", "controller", "--stagger", "-1s", "--", "true"}, ExitUsage, "--stagger -1s: must be positive"},
		{"negative kill timeout", []string{"run", "controller", "--kill-timeout", "-1s", "--", "true"}, ExitUsage, "--kill-timeout -1s: must not be negative"},
		{"renew not shorter than lease", []string{"run", "controller", "--lease-duration", "2s", "--heartbeat-interval", "2s", "--", "true"}, ExitUsage,
			"heartbeat interval 2s must be shorter than lease duration 2s"},
		{"command not found", []string{"run", "controller", "--", "krole-no-such-command"}, runner.ExitNotFound, `command "krole-no-such-command" not found`},
		{"command not executable", []string{"run", "controller", "--", notExec}, runner.ExitCannotExecute, "cannot be executed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// 127.0.0.1:1 refuses connections: none of these may get as
			// far as the cluster.
			r := run(t, append([]string{"--brokers", "127.0.0.1:1"}, tc.args...)...)
			assertOneLineError(t, r, tc.code)
			assert.Contains(t, r.Stderr, tc.want)
			if tc.code == runner.ExitNotFound || tc.code == runner.ExitCannotExecute {
				assert.Equal(t, 1, strings.Count(r.Stderr, "\n"), "one line: %q", r.Stderr)
			}
		})
	}
}

func TestRunHelp(t *testing.T) {
	t.Parallel()
	r := run(t, "run", "--help")
	requireOK(t, r)
	for _, s := range []string{"krole run ROLE", "-- CMD [ARGS...]", "KROLE_PRODUCER_ID", "--kill-timeout", "(default: HOSTNAME:PID)", "(default: lease duration / 5)"} {
		assert.Contains(t, r.Stdout, s)
	}
	assert.Contains(t, r.Stdout, "\nEXAMPLES:\n   # ")
	assert.Contains(t, r.Stdout, "\n   krole run nightly --try -- ./job.sh\n")
	assert.LessOrEqual(t, strings.Count(r.Stdout, "\n"), 60, "a screen, not a manual")
	root := run(t, "--help").Stdout
	assert.Contains(t, root, "\n   run ")
	assert.Contains(t, root, "Start a local cluster with `krole dev`, then in each member's terminal\n   `krole run ROLE", "the next step")
	assert.NotContains(t, root, "then `krole register")
}

func TestDefaultMember(t *testing.T) {
	t.Parallel()
	m := defaultMember()
	require.NoError(t, m.Validate())
	assert.True(t, strings.HasSuffix(string(m), ":"+strconv.Itoa(os.Getpid())), m)
}

// The flags may come in any order around ROLE, and everything after --
// belongs to CMD, flags that krole also has included.
func TestRunArgumentOrder(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{})
	out := filepath.Join(t.TempDir(), "args")
	args := append([]string{"run", "controller", "-m", "node-1", "--", "sh", "-c", `printf '%s\n' "$@" > "$0"`, out, "--member", "x", "-o", "json", "--"},
		testTimingFlags()...)
	// The timing flags after CMD are CMD's: krole runs with its defaults.
	r := run(t, append(clusterFlags(c), args...)...)
	requireOK(t, r)
	got, err := os.ReadFile(out)
	require.NoError(t, err)
	assert.Equal(t, "--member\nx\n-o\njson\n--\n"+strings.Join(testTimingFlags(), "\n")+"\n", string(got))
	assert.Contains(t, r.Stderr, "krole run: campaigning for controller as node-1 (lease 10s, heartbeat every 2s, stagger 1s)\n")
}

var electedLine = regexp.MustCompile(`(?m)^krole run: elected (\S+) as (\S+) \(token (\d+)/(\d+)\)$`)

// CMD exiting by itself ends krole with CMD's exit code, after it resigned
// the role: the release is written and the registration removed.
func TestRunCommandExitCode(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{})
	for _, code := range []int{3, 0} {
		t.Run(fmt.Sprint("exit ", code), func(t *testing.T) {
			role := fmt.Sprintf("exit-%d", code)
			script := fmt.Sprintf(`echo "$KROLE_ROLE $KROLE_MEMBER $KROLE_PRODUCER_ID $KROLE_EPOCH $KROLE_FENCE"; exit %d`, code)
			args := append(append(append(clusterFlags(c), "run", role), testTimingFlags()...), "--member", "node-1", "--", "sh", "-c", script)
			r := run(t, args...)
			require.Equal(t, code, r.Code, "stderr:\n%s", r.Stderr)

			m := electedLine.FindStringSubmatch(r.Stderr)
			require.NotNil(t, m, "stderr:\n%s", r.Stderr)
			assert.Equal(t, []string{role, "node-1"}, m[1:3])
			token := m[3] + "/" + m[4]
			fence := int64(-1) // the offset of the holding's first lease record
			for _, rec := range readRole(t, c.Config, codec.Role(role)) {
				if l := rec.Record.Lease; l != nil && l.Token.String() == token {
					fence = rec.Offset
					break
				}
			}
			assert.Greater(t, fence, int64(0))
			assert.Equal(t, fmt.Sprintf("%s node-1 %s %s %d\n", role, m[3], m[4], fence), r.Stdout,
				"CMD's environment names the role, member, token and the holding's fencing number")
			assert.Regexp(t, fmt.Sprintf(`(?m)^krole run: started CMD \(pid \d+\) with token %s$`, token), r.Stderr)
			assert.Regexp(t, fmt.Sprintf(`(?m)^krole run: CMD \(pid \d+\) exited by itself with code %d; resigning %s$`, code, role), r.Stderr)
			assert.True(t, strings.HasSuffix(r.Stderr, fmt.Sprintf("krole run: resigned %s (token %s)\n", role, token)), "stderr:\n%s", r.Stderr)
			for _, l := range strings.Split(strings.TrimSpace(r.Stderr), "\n") {
				assert.True(t, strings.HasPrefix(l, "krole run: "), "every line is krole run's: %q", l)
			}

			// The last lease, under the same token, is released (by the
			// member session's end), and the registration is gone.
			recs := readRole(t, c.Config, codec.Role(role))
			last := lastLease(recs)
			require.NotNil(t, last)
			assert.True(t, leaseReleased(t, c.Config, codec.Role(role)), "%+v", last)
			assert.Equal(t, token, last.Token.String())
			assert.Empty(t, rolestate.Fold(codec.Role(role), recs).Candidates)
		})
	}
}

// SIGINT or SIGTERM (here: the end of Run's context, which main cancels on
// either) stops CMD, with SIGKILL after --kill-timeout when it ignores
// SIGTERM, resigns and exits 0. A CMD that stops on SIGTERM has 5s to be
// seen gone, plenty on a busy machine; one that ignores it is killed after
// 300ms.
func TestRunInterrupted(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{})
	for _, tc := range []struct {
		name   string
		kill   string // --kill-timeout
		script string
		want   string
	}{
		{"stops on SIGTERM", "5s", `echo $$ > "$0"; exec sleep 300`, `CMD \(pid \d+\) stopped with code 143`},
		{"killed after the kill timeout", "300ms", `trap "" TERM; echo $$ > "$0"; while :; do sleep 0.05; done`, `CMD \(pid \d+\) killed after --kill-timeout 300ms`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pidFile := filepath.Join(t.TempDir(), "pid")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var stdout, stderr testcluster.SyncBuffer
			args := append(append(append(clusterFlags(c), "run", "svc"), testTimingFlags()...),
				"--member", "node-1", "--kill-timeout", tc.kill, "--", "sh", "-c", tc.script, pidFile)
			done := startApp(t, ctx, args, &stdout, &stderr)

			pid := waitPidFile(t, pidFile, done)
			require.True(t, processAlive(pid))
			// CMD may run before krole run says that it started it.
			require.Eventually(t, func() bool {
				return strings.Contains(stderr.String(), fmt.Sprintf("krole run: started CMD (pid %d)", pid))
			}, 10*time.Second, 5*time.Millisecond)
			stopped := time.Now()
			cancel()
			select {
			case code := <-done:
				assert.Equal(t, ExitOK, code, "stderr:\n%s", stderr.String())
			case <-time.After(30 * time.Second):
				t.Fatalf("krole run did not return; stderr:\n%s", stderr.String())
			}
			assert.False(t, processAlive(pid), "CMD is gone when krole run returns")
			out := stderr.String()
			assert.Contains(t, out, fmt.Sprintf("krole run: interrupted; leaving svc\nkrole run: stopping CMD (pid %d): SIGTERM, then SIGKILL after %s\n", pid, tc.kill))
			assert.Regexp(t, `(?m)^krole run: `+tc.want+`$`, out)
			assert.Regexp(t, `krole run: resigned svc \(token \d+/\d+\)\n$`, out)

			// The role was released, not left to expire.
			last := lastLease(readRole(t, c.Config, "svc"))
			require.NotNil(t, last)
			assert.True(t, leaseReleased(t, c.Config, "svc"))
			assert.Less(t, time.Since(stopped), testLease, "krole run returned before the lease would have run out")
		})
	}
}

// Several processor Members with one view, in one process, whose work
// writes through the fenced writer while it holds the role. The roles pass
// on by resignation (Member.Resign, and the end of a Member's context).
// What is guaranteed, and checked through the broker (see check), is the
// fence: two members may believe for a moment that they hold the role
// (package processor says so), but only the newest token's writes commit.
//
// The members join one after the other: each is a candidate in the view
// before the next starts. Members that start at the same moment may each
// take the role in turn (see TestRunMembersStartTogether).
func TestRunMembersInProcess(t *testing.T) {
	t.Parallel()
	h := newMembersHarness(t)
	for _, id := range []codec.MemberID{"node-1", "node-2", "node-3"} {
		h.start(id)
		require.Eventually(t, func() bool {
			cs, err := h.v.Candidates(context.Background(), h.role)
			return err == nil && slices.ContainsFunc(cs, func(c rolestate.Candidate) bool { return c.Member == id })
		}, 10*time.Second, 10*time.Millisecond, "%s never showed as a candidate", id)
	}

	first := h.next("")
	assert.Equal(t, codec.MemberID("node-1"), first, "the first to join takes the role")
	// The holder resigns through Member.Resign: the next candidate takes
	// the role without waiting for the lease; the first queues again.
	require.NoError(t, h.members[first].m.Resign(context.Background(), h.role))
	second := h.next(first)
	h.handedOverByRelease(first, second)
	h.check()

	// The second leaves (its context ends): it resigns on the way out.
	h.stop(second)
	third := h.next(second)
	h.handedOverByRelease(second, third)
	h.check()

	// The third leaves; the first, queued again, takes the role back.
	h.stop(third)
	assert.Equal(t, first, h.next(third))
	h.handedOverByRelease(third, first)
	h.check()
}

// handedOverByRelease asserts, through the role's records, that to took
// the role after from's release (a release lease, or the end of the
// member session from's last lease names): the role passed on by
// resignation, not by the expiry of from's lease.
func (h *membersHarness) handedOverByRelease(from, to codec.MemberID) {
	h.t.Helper()
	recs := readRole(h.t, h.c.Config, h.role)
	rel := lastLeaseOf(recs, from, true)
	if rel == nil {
		// A member that leaves releases its roles with its member
		// session's end: one record after its last lease.
		rel = lastLeaseOf(recs, from, false)
		require.NotNil(h.t, rel, "%s wrote no lease", from)
		sess := readSession(h.t, h.c.Config, from)
		require.NotEmpty(h.t, sess, "%s has no member session", from)
		end := sess[len(sess)-1].Record.Heartbeat
		require.True(h.t, end.End, "%s wrote no release and did not end its session", from)
		require.NotNil(h.t, rel.lease.Session)
		assert.Equal(h.t, rel.lease.Session.Nonce, end.Session.Nonce, "%s's session end is of the session its lease names", from)
	}
	next := firstLeaseAfter(recs, rel)
	require.NotNil(h.t, next, "no lease after %s's release", from)
	assert.Equal(h.t, to, next.lease.Member, "the lease after %s's release", from)
}

// Members that start together, before they see each other's
// registrations, may each believe for a moment that they hold the role,
// but the broker lets only the newest token write.
//
// A member ranks itself only once its view shows its own registration:
// every registration written before it (a lower offset in the same
// partition) is visible by then.
func TestRunMembersStartTogether(t *testing.T) {
	t.Parallel()
	h := newMembersHarness(t)
	for _, id := range []codec.MemberID{"node-1", "node-2", "node-3"} {
		h.start(id)
	}
	h.next("")
	// Long enough for every member to have challenged, if it does.
	time.Sleep(testLease)
	h.check()
}

// membersHarness runs processor Members of one role with one view; their
// work writes through the fenced writer to a topic of its own, out, one
// record per 20ms, each naming the token it was written under.
type membersHarness struct {
	t       *testing.T
	c       *testcluster.Cluster
	role    codec.Role
	out     string
	v       *view.View
	probe   *fencing.BrokerTransport // an outsider's: Describe
	members map[codec.MemberID]*member
	elected chan codec.MemberID

	mu       sync.Mutex
	holdings []holding // every holding whose work started, in order
}

type member struct {
	m      *processor.Member
	cancel context.CancelFunc
	done   chan struct{}
}

// holding is one member's holding of the role, with the fenced writer of
// its token on the member's own transport.
type holding struct {
	member codec.MemberID
	token  codec.Token
	w      *fencing.Writer
}

func newMembersHarness(t *testing.T) *membersHarness {
	t.Helper()
	c := testcluster.Start(t, testcluster.Options{})
	h := &membersHarness{t: t, c: c, role: "controller", out: c.Topic(t, c.Name("out"), 1, 30*time.Second),
		probe: c.Transport(t), members: map[codec.MemberID]*member{}, elected: make(chan codec.MemberID, 64)}
	v, err := view.New(view.Options{Config: h.c.Config})
	require.NoError(t, err)
	h.v = v
	vctx, stopView := context.WithCancel(context.Background())
	viewDone := make(chan error, 1)
	go func() { viewDone <- v.Run(vctx) }()
	t.Cleanup(func() {
		stopView()
		assert.NoError(t, <-viewDone)
	})
	return h
}

func (h *membersHarness) onEvent(e processor.Event) {
	h.t.Logf("%s: %s", e.Member, e)
	if e.Kind == processor.Elected {
		h.elected <- e.Member
	}
}

// work writes under held's token until ctx ends or a write fails (the
// role passed on).
func (h *membersHarness) work(tr *fencing.BrokerTransport) processor.Work {
	return func(ctx context.Context, held processor.Held) error {
		w := tr.Writer(held.Role, held.Token)
		h.mu.Lock()
		h.holdings = append(h.holdings, holding{member: held.Member, token: held.Token, w: w})
		h.mu.Unlock()
		for n := 0; ; n++ {
			err := w.Write(ctx, fencing.Message{Topic: h.out, Partition: 0, Key: []byte(held.Member),
				Value: fmt.Appendf(nil, "%s %d", held.Token, n)})
			if ctx.Err() != nil || err != nil {
				return nil
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
}

// start runs member id until the test ends or stop.
func (h *membersHarness) start(id codec.MemberID) {
	t := h.t
	t.Helper()
	settings := processor.Settings{LeaseDuration: testLease, HeartbeatInterval: testRenew, Stagger: testStagger}
	cfg := h.c.Config
	cfg.TxnTimeout = settings.WithDefaults().TransactionTimeout
	tr, err := fencing.NewBrokerTransport(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { tr.Close() })
	m, err := processor.New(tr, h.v, id, []codec.Role{h.role}, processor.Options{Settings: settings, OnEvent: h.onEvent})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	r := &member{m: m, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		assert.NoError(t, m.Run(ctx, h.work(tr)))
	}()
	t.Cleanup(func() { cancel(); <-r.done })
	h.members[id] = r
}

// stop ends member id's context and waits for its Run to return.
func (h *membersHarness) stop(id codec.MemberID) {
	h.members[id].cancel()
	<-h.members[id].done
}

// next returns the next member elected, which must not be not.
func (h *membersHarness) next(not codec.MemberID) codec.MemberID {
	h.t.Helper()
	select {
	case id := <-h.elected:
		require.NotEqual(h.t, not, id, "the role passed to another member")
		return id
	case <-time.After(10 * time.Second):
		h.t.Fatal("nobody was elected")
	}
	return ""
}

// zombieValue marks the writes that check makes under deposed tokens.
const zombieValue = "zombie"

// check asserts the fence, through the broker:
//
//   - the token the transaction coordinator holds for the role (Describe)
//     is the newest of every holding the members' events reported;
//   - every older holding's writer, on its member's own transport, is
//     refused when it writes now (ErrFenced from the broker, or ErrNotHeld
//     when the transport already learned of the fence and forgot the
//     token);
//   - an independent read_committed reader of out sees the tokens of the
//     holdings only, never going backwards in offset order (a write under
//     a token commits only before every write of a newer token), and none
//     of the refused writes.
func (h *membersHarness) check() {
	t := h.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h.mu.Lock()
	holdings := slices.Clone(h.holdings)
	h.mu.Unlock()
	require.NotEmpty(t, holdings)

	cur, ok, err := h.probe.Describe(ctx, h.role)
	require.NoError(t, err)
	require.True(t, ok, "the coordinator knows the role's transactional id")
	for _, hd := range holdings {
		assert.False(t, hd.token.Newer(cur), "%s held %s, newer than the coordinator's %s", hd.member, hd.token, cur)
		if hd.token == cur {
			continue
		}
		err := hd.w.Write(ctx, fencing.Message{Topic: h.out, Partition: 0, Key: []byte(hd.member), Value: []byte(zombieValue)})
		assert.True(t, errors.Is(err, fencing.ErrFenced) || errors.Is(err, fencing.ErrNotHeld),
			"%s's write under its deposed token %s (the coordinator holds %s): %v", hd.member, hd.token, cur, err)
	}

	msgs := h.c.ReadAll(t, h.out, sarama.ReadCommitted, 30*time.Second)
	require.NotEmpty(t, msgs, "the holders wrote")
	// A work registers its holding before it writes: every token in msgs
	// is among the holdings by now (a holding may have begun since the
	// Describe above).
	h.mu.Lock()
	holdings = slices.Clone(h.holdings)
	h.mu.Unlock()
	known := map[string]bool{}
	for _, hd := range holdings {
		known[hd.token.String()] = true
	}
	var last codec.Token
	for i, m := range msgs {
		require.NotEqual(t, zombieValue, string(m.Value), "a write under a deposed token was committed (%s, offset %d)", m.Key, m.Offset)
		tokStr, _, _ := strings.Cut(string(m.Value), " ")
		require.True(t, known[tokStr], "record %d under %s, which no holding had", i, tokStr)
		var tok codec.Token
		for _, hd := range holdings {
			if hd.token.String() == tokStr {
				tok = hd.token
			}
		}
		if i > 0 {
			require.False(t, last.Newer(tok), "offset %d: %s's write under %s committed after one under newer %s", m.Offset, m.Key, tok, last)
		}
		last = tok
	}
}

// readRole reads role's records through a transport of its own.
func readRole(t *testing.T, cfg fencing.Config, role codec.Role) []fencing.RoleRecord {
	t.Helper()
	return readWith(t, cfg, func(ctx context.Context, tr *fencing.BrokerTransport) ([]fencing.RoleRecord, error) {
		return tr.ReadRoleRecords(ctx, role)
	})
}

// readSession returns member's member-session records (heartbeats,
// session ends), as a member's transport reads them.
func readSession(t *testing.T, cfg fencing.Config, member codec.MemberID) []fencing.RoleRecord {
	t.Helper()
	return readWith(t, cfg, func(ctx context.Context, tr *fencing.BrokerTransport) ([]fencing.RoleRecord, error) {
		return tr.ReadSession(ctx, member)
	})
}

// readWith reads records with read through a transport of its own,
// bounded by 10s.
func readWith(t *testing.T, cfg fencing.Config, read func(context.Context, *fencing.BrokerTransport) ([]fencing.RoleRecord, error)) []fencing.RoleRecord {
	t.Helper()
	tr, err := fencing.NewBrokerTransport(cfg)
	require.NoError(t, err)
	defer tr.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	recs, err := read(ctx, tr)
	require.NoError(t, err)
	return recs
}

// leaseReleased reports whether role's latest lease no longer holds it, as
// a member judges it: a release, or the end of the member session it
// names (or a heartbeat of that session excluding the role).
func leaseReleased(t *testing.T, cfg fencing.Config, role codec.Role) bool {
	t.Helper()
	tr, err := fencing.NewBrokerTransport(cfg)
	require.NoError(t, err)
	defer tr.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := testcluster.ReadRole(ctx, tr, role)
	require.NoError(t, err)
	return st.Lease != nil && (st.Lease.Released() || st.SessionVouch() == rolestate.Dropped)
}

func lastLease(recs []fencing.RoleRecord) *codec.Lease {
	for i := len(recs) - 1; i >= 0; i-- {
		if recs[i].Key.Kind == codec.KindLease {
			return recs[i].Record.Lease
		}
	}
	return nil
}

// waitPidFile waits for CMD to write its pid to path, failing when krole
// run returns first (its exit code comes on done).
func waitPidFile(t *testing.T, path string, done <-chan int) int {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case code := <-done:
			t.Fatalf("krole run returned %d before CMD wrote its pid", code)
		default:
		}
		if b, err := os.ReadFile(path); err == nil && bytes.HasSuffix(b, []byte("\n")) {
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			require.NoError(t, err)
			return pid
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("CMD never wrote %s", path)
	return 0
}

// processAlive reports whether pid is a live process (a zombie is dead).
func processAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) S ...: the state follows the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z' && s[i+2] != 'X'
}

// TestRunNonHolderRegistrationRemoved: `krole resign ROLE --member M` on a
// running `krole run` member M that does not hold the role removes M's
// registration; M registers again at the back (a registration at a later
// offset), the holder keeps the role under the same token, and resign
// says only what it did. Then SIGINT to the holder: its process exits 0
// after its "resigned" line, with its member session's end (which
// releases the role) and its deregistration on record, and M takes the
// role.
func TestRunNonHolderRegistrationRemoved(t *testing.T) {
	t.Parallel()
	const role = "nonholder"
	bin, c, a, b, before := startHolderAndCandidate(t, role)
	held := lastLeaseOf(readRole(t, c.Config, role), "node-a", false)
	require.NotNil(t, held)

	said := runBin(t, bin, append(clusterFlags(c), "resign", role, "--member", "node-b")...)
	assert.Equal(t, "resigned node-b from role nonholder\n", said, "a non-holder has no release to report")
	awaitRegistration(t, c, role, "node-b", 1, before.Offset, b) // registered again, still second
	recs := readRole(t, c.Config, role)
	st := rolestate.Fold(role, recs)
	assert.Equal(t, 0, st.Rank("node-a"), "the holder keeps its place")
	require.NotNil(t, st.Lease)
	assert.Equal(t, codec.MemberID("node-a"), st.Lease.Member, "the holder keeps the role")
	assert.Equal(t, held.lease.Token, st.Lease.Token, "the holder keeps its token")
	assert.False(t, st.Lease.Released())
	_, _, revoked := a.find(0, regexp.MustCompile(`revoked`))
	assert.False(t, revoked, "the holder lost the role; stderr:\n%s", a.stderr())

	// SIGINT to the holder: it exits 0 once released and deregistered.
	require.NoError(t, a.cmd.Process.Signal(syscall.SIGINT))
	select {
	case <-a.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("node-a did not exit after SIGINT; stderr:\n%s", a.stderr())
	}
	assert.Equal(t, 0, a.state.ExitCode())
	i, _ := a.waitLine(t, 0, regexp.MustCompile(`^krole run: resigned nonholder \(token \d+/\d+\)$`), time.Second)
	assert.Equal(t, a.count()-1, i, "the last line is the resignation; stderr:\n%s", a.stderr())
	// A leaving member releases its roles with one record, its member
	// session's end, after its last lease; its registration is removed.
	recs = readRole(t, c.Config, role)
	last := lastLeaseOf(recs, "node-a", false)
	require.NotNil(t, last)
	assert.Equal(t, held.lease.Token, last.lease.Token, "node-a's last lease is under the token it held")
	assert.Nil(t, lastLeaseOf(recs, "node-a", true), "no release of its own: the session end releases it")
	sess := readSession(t, c.Config, "node-a")
	require.NotEmpty(t, sess)
	end := sess[len(sess)-1].Record.Heartbeat
	require.NotNil(t, end)
	assert.True(t, end.End, "node-a's last session record is its session end")
	require.NotNil(t, last.lease.Session)
	assert.Equal(t, last.lease.Session.Nonce, end.Session.Nonce, "the session end is of the session node-a's lease names")
	var dereg int64 = -1
	for _, r := range recs {
		if r.Key.Kind == codec.KindRegistration && r.Key.Member == "node-a" && r.Record.Tombstone() {
			dereg = r.Offset
		}
	}
	assert.Greater(t, dereg, last.offset, "node-a's deregistration follows its last lease in the records")
	b.waitLine(t, 0, startedRE, 20*time.Second)
}
