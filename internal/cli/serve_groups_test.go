package cli

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/internal/grouptest"
	"github.com/krabka/krole/internal/testcluster"
)

// GET /v1/groups of `krole serve` is the document `krole table --members
// -o json` prints, byte for byte, for three members of a group over 12
// roles.
func TestServeGroupsIsTheTableMembersJSON(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{})
	grouptest.StartShards(t, c)
	b, url := startServe(t, c)
	waitHealthy(t, url)

	r := runOn(t, c, "table", "--members", "-o", "json")
	requireOK(t, r)
	require.Contains(t, r.Stdout, `"member":"node-c","weight":1,"draining":false,"roles":4`, "the group as settled")
	// serve's view reads the members' latest records a moment after its
	// catch-up: the answers agree once it has.
	var body string
	deadline := time.Now().Add(time.Minute)
	for {
		var resp *http.Response
		resp, body = httpGet(t, url+"/v1/groups")
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		if body == r.Stdout || !time.Now().Before(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	assert.Equal(t, r.Stdout, body)
	assert.Equal(t, ExitOK, b.stop(), "stderr: %s", b.stderr.String())
}
