package cli

import (
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/liveness"
	"github.com/krabka/krole/internal/testcluster"
	"github.com/krabka/krole/rolestate"
)

// TestResignStepsDownALiveHolder: `krole resign ROLE --member M` on the
// live holder M, a running `krole run` process, makes M release the role
// at once: the next candidate's lease is granted long before M's lease
// (a minute) would have ended. resign says so truthfully, M says why it
// lost the role, and M joins the candidates again at the back.
func TestResignStepsDownALiveHolder(t *testing.T) {
	t.Parallel()
	const role = "ctl"
	bin, c, a, b, _ := startHolderAndCandidate(t, role)

	said := runBin(t, bin, append(clusterFlags(c), "resign", role, "--member", "node-a", "--wait", "30s")...)
	assert.Regexp(t, `^resigned node-a from role ctl; node-a released the role \(token \d+/\d+\) and node-b holds it now; `+
		`node-a joins the candidates again at the back unless its process stops\n$`, said)
	b.waitLine(t, 0, startedRE, 20*time.Second)
	a.waitLine(t, 0, regexp.MustCompile(`^krole run: revoked ctl \(token \d+/\d+\): this member's registration was removed \(krole resign\); `+
		`releasing the role to the next candidate, then joining again at the back$`), 20*time.Second)

	recs := readRole(t, c.Config, role)
	old := lastLeaseOf(recs, "node-a", false)
	next := firstLeaseAfter(recs, old)
	require.NotNil(t, old)
	require.NotNil(t, next)
	assert.Equal(t, codec.MemberID("node-b"), next.lease.Member)
	assert.Less(t, next.lease.GrantedAt, old.lease.Deadline, "the handover did not wait for the lease")
	require.Eventually(t, func() bool {
		return rolestate.Fold(role, readRole(t, c.Config, role)).Rank("node-a") == 1
	}, 20*time.Second, 20*time.Millisecond, "node-a joins again at the back; stderr:\n%s", a.stderr())

	// No live holder to step down: resign says nothing of a release.
	said = runBin(t, bin, append(clusterFlags(c), "resign", role, "--member", "node-x")...)
	assert.Equal(t, "resigned node-x from role ctl\n", said)
}

// startHolderAndCandidate starts two `krole run ROLE -- CMD` processes on
// a fresh cluster with a one-minute lease (so that only a step-down hands
// the role over): node-a, once it holds the role (its CMD started), then
// node-b, once its registration ranks second. It returns the binary, the
// cluster, both processes and node-b's registration. It skips the test
// with -short and off Linux.
func startHolderAndCandidate(t *testing.T, role codec.Role) (bin string, c *testcluster.Cluster, a, b *kroleProc, bReg rolestate.Candidate) {
	t.Helper()
	return startHolderAndCandidateWith(t, role, "--lease-duration", "60s", "--heartbeat-interval", "1s", "--stagger", "300ms")
}

// startHolderAndCandidateWith is startHolderAndCandidate with the
// members' timing flags.
func startHolderAndCandidateWith(t *testing.T, role codec.Role, flags ...string) (bin string, c *testcluster.Cluster, a, b *kroleProc, bReg rolestate.Candidate) {
	t.Helper()
	bin = processTest(t, "krole run's process tests are Linux's")
	c = testcluster.Start(t, testcluster.Options{})
	out := filepath.Join(t.TempDir(), "cmds")
	a = startKroleWith(t, bin, c, string(role), "node-a", out, flags...)
	a.waitLine(t, 0, startedRE, 20*time.Second)
	b = startKroleWith(t, bin, c, string(role), "node-b", out, flags...)
	bReg = awaitRegistration(t, c, role, "node-b", 1, -1, b)
	return bin, c, a, b, bReg
}

// awaitRegistration waits until member's registration in role ranks at
// rank with an offset above after, reading the role topic, and returns
// it; it fails the test with p's stderr after 20s.
func awaitRegistration(t *testing.T, c *testcluster.Cluster, role codec.Role, member codec.MemberID, rank int, after int64, p *kroleProc) rolestate.Candidate {
	t.Helper()
	var got rolestate.Candidate
	require.Eventually(t, func() bool {
		st := rolestate.Fold(role, readRole(t, c.Config, role))
		if st.Rank(member) != rank {
			return false
		}
		got = st.Candidates[rank]
		return got.Offset > after
	}, 20*time.Second, 20*time.Millisecond, "%s never registered at rank %d after offset %d; stderr:\n%s", member, rank, after, p.stderr())
	return got
}

// TestResignStepsDownAHolderElectedLongAgo: the same on a holder elected
// more than a lease before (a 2s lease: its lease record's own deadline
// has passed, and its member session's heartbeats renew it). resign waits
// for the release and names the next holder; judged by the lease record's
// deadline alone, it took the live holder for dead and reported no
// release.
func TestResignStepsDownAHolderElectedLongAgo(t *testing.T) {
	t.Parallel()
	const role = "ctl"
	bin, c, _, b, _ := startHolderAndCandidateWith(t, role, "--lease-duration", "2s", "--heartbeat-interval", "400ms", "--stagger", "200ms")
	held := lastLeaseOf(readRole(t, c.Config, role), "node-a", false)
	require.NotNil(t, held)
	time.Sleep(time.Until(time.UnixMilli(held.lease.Deadline).Add(liveness.ClockTolerance + 500*time.Millisecond)))

	said := runBin(t, bin, append(clusterFlags(c), "resign", role, "--member", "node-a", "--wait", "30s")...)
	assert.Regexp(t, `^resigned node-a from role ctl; node-a released the role \(token \d+/\d+\) and node-b holds it now; `+
		`node-a joins the candidates again at the back unless its process stops\n$`, said)
	b.waitLine(t, 0, startedRE, 20*time.Second)
}
