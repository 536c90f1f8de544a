package cli

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/internal/testcluster"
)

// --metrics-listen serves the member's metrics while it runs: the holder
// gauge says which member holds which role.
func TestRunServesMetrics(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr testcluster.SyncBuffer
	args := append(append(append(clusterFlags(c), "run", "metered"), testTimingFlags()...),
		"--member", "node-1", "--metrics-listen", "127.0.0.1:0", "--", "sh", "-c", "exec sleep 300")
	done := startApp(t, ctx, args, &stdout, &stderr)

	addrRE := regexp.MustCompile(`(?m)^krole run: metrics at (http://\S+/metrics)$`)
	var url string
	require.Eventually(t, func() bool {
		m := addrRE.FindStringSubmatch(stderr.String())
		if m != nil {
			url = m[1]
		}
		return m != nil && regexp.MustCompile(`(?m)^krole run: started CMD`).MatchString(stderr.String())
	}, 20*time.Second, 10*time.Millisecond, "stderr:\n%s", &stderr)

	resp, err := http.Get(url)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Regexp(t, `(?m)^krole_holder\{member="node-1",role="metered"\} 1$`, string(body))
	assert.Regexp(t, `(?m)^krole_transitions_total\{role="metered",transition="elected"\} 1$`, string(body))
	// The member session's heartbeat rounds are timed, with no role label.
	beats := regexp.MustCompile(`(?m)^krole_heartbeat_duration_seconds_count\{result="ok"\} [1-9]`)
	assert.Eventually(t, func() bool { return beats.MatchString(getBody(url)) }, 10*time.Second, 20*time.Millisecond,
		"no heartbeat round observed")
	assert.NotContains(t, string(body), "krole_renew_duration_seconds")

	cancel()
	select {
	case code := <-done:
		assert.Equal(t, 0, code, "stderr:\n%s", &stderr)
	case <-time.After(30 * time.Second):
		t.Fatal("krole run did not return after the interrupt")
	}
	_, err = http.Get(url)
	assert.Error(t, err, "the metrics server stops with krole run")
}

// getBody returns the body url serves, "" when the request fails.
func getBody(url string) string {
	resp, err := http.Get(url)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func TestRunMetricsListenBusy(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{})
	r := run(t, append(append(clusterFlags(c), "run", "metered", "--metrics-listen", "127.0.0.1:notaport"), "--", "true")...)
	assert.Equal(t, 1, r.Code)
	assert.Contains(t, r.Stderr, "--metrics-listen: cannot listen on 127.0.0.1:notaport")
}
