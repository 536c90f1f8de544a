package cli

import (
	"bufio"
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/internal/testcluster"
)

// TestDev runs `krole dev` in-process on a free port, uses the cluster it
// announces, and stops it by cancelling its context, as SIGINT does.
func TestDev(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	outR, outW := io.Pipe()
	var errOut testcluster.SyncBuffer
	done := make(chan int, 1)
	go func() {
		defer outW.Close()
		done <- Run(ctx, []string{"dev", "--listen", "127.0.0.1:0", "--nodes", "2", "--topic", "dev.roles"}, outW, &errOut)
	}()

	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(outR)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var line string
	select {
	case line = <-lines:
	case code := <-done:
		t.Fatalf("dev exited with %d before announcing its brokers: %s", code, errOut.String())
	case <-time.After(time.Minute):
		t.Fatal("dev announced no brokers within a minute")
	}
	addrs, ok := strings.CutPrefix(line, "brokers: ")
	require.True(t, ok, "first line: %q", line)
	brokers := strings.Split(addrs, ",")
	require.Len(t, brokers, 2, "--nodes 2 lists both brokers")
	for _, b := range brokers {
		host, port, err := net.SplitHostPort(b)
		require.NoError(t, err)
		assert.Equal(t, "127.0.0.1", host)
		assert.NotEqual(t, "0", port, "the real port, not 0")
	}

	flags := []string{"--brokers", addrs, "--topic", "dev.roles"}
	requireOK(t, run(t, append([]string{"register", "controller", "--member", "node-1"}, flags...)...))
	r := run(t, append([]string{"records", "controller", "-o", "json"}, flags...)...)
	requireOK(t, r)
	assert.Contains(t, r.Stdout, `"kind":"registration","member":"node-1"`)

	cancel()
	select {
	case code := <-done:
		assert.Equal(t, ExitOK, code, "stderr: %s", errOut.String())
	case <-time.After(time.Minute):
		t.Fatal("dev did not stop within a minute of its context ending")
	}
	assert.Contains(t, errOut.String(), "krole dev: stopped")
	_, more := <-lines
	assert.False(t, more, "dev prints one line on stdout")
}

func TestDevBusyPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	r := run(t, "dev", "--listen", ln.Addr().String())
	assertOneLineError(t, r, ExitFailure)
	assert.Contains(t, r.Stderr, "cannot listen on "+ln.Addr().String()+": address already in use")
}
