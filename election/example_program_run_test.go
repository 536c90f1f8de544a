package election_test

import (
	"bytes"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/internal/testcluster"
)

// TestExampleProgram runs the package's Example, the whole program of
// go doc, against a cluster of the test's (kfake, or KROLE_BROKERS),
// named through the environment as the program reads it, and checks
// what it printed. The Example itself has no Output line: go test would
// need a cluster at 127.0.0.1:9092 to run it.
func TestExampleProgram(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	t.Setenv("KROLE_BROKERS", strings.Join(c.Config.Brokers, ","))
	t.Setenv("KROLE_TOPIC", c.Config.Topic)
	t.Setenv("KROLE_TXN_PREFIX", c.Config.TxnPrefix)

	r, w, err := os.Pipe()
	require.NoError(t, err)
	stdout := os.Stdout
	os.Stdout = w
	out := make(chan string)
	go func() {
		var b bytes.Buffer
		_, _ = io.Copy(&b, r)
		out <- b.String()
	}()
	func() {
		defer func() { os.Stdout = stdout; _ = w.Close() }()
		Example()
	}()
	assert.Equal(t, "elected: node-1 under token true\nleader: node-1 at 10.0.0.1:5432\nresigned: no leader\n", <-out)
}
