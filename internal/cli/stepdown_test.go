package cli

import (
	"path/filepath"
	"regexp"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/testcluster"
	"github.com/krabka/krole/rolestate"
)

// TestResignStepsDownALiveHolder: `krole resign ROLE --member M` on the
// live holder M, a running `krole run` process, makes M release the role
// at once: the next candidate's lease is granted long before M's lease
// (a minute) would have ended. resign says so truthfully, M says why it
// lost the role, and M joins the candidates again at the back.
func TestResignStepsDownALiveHolder(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs processes; skipped with -short")
	}
	if runtime.GOOS != "linux" {
		t.Skip("krole run's process tests are Linux's")
	}
	const role = "ctl"
	bin := buildKrole(t)
	c := testcluster.Start(t, testcluster.Options{})
	out := filepath.Join(t.TempDir(), "cmds")
	flags := []string{"--lease-duration", "60s", "--renew-interval", "1s", "--stagger", "300ms"}
	a := startKroleWith(t, bin, c, role, "node-a", out, flags...)
	a.waitLine(t, 0, startedRE, 20*time.Second)
	b := startKroleWith(t, bin, c, role, "node-b", out, flags...)
	require.Eventually(t, func() bool {
		return rolestate.Fold(role, readRole(t, c.Config, role)).Rank("node-b") >= 0
	}, 20*time.Second, 20*time.Millisecond, "node-b never registered; stderr:\n%s", b.stderr())

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
