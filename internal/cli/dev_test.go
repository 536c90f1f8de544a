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

// TestDev runs `krole dev` in-process on free ports, uses the cluster it
// announces, and stops it by cancelling its context, as SIGINT does.
func TestDev(t *testing.T) {
	t.Parallel()
	addrs, stop := startDev(t, "--listen", "127.0.0.1:0", "--nodes", "2", "--topic", "dev.roles")
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
	stop()
}

// --data-dir keeps the cluster's state: a registration made before a
// restart is there after it.
func TestDevDataDirSurvivesARestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	addrs, stop := startDev(t, "--listen", "127.0.0.1:0", "--data-dir", dir)
	requireOK(t, run(t, "register", "controller", "--member", "node-1", "--brokers", addrs))
	stop()

	addrs, stop = startDev(t, "--listen", "127.0.0.1:0", "--data-dir", dir)
	r := run(t, "records", "controller", "-o", "json", "--brokers", addrs)
	requireOK(t, r)
	assert.Contains(t, r.Stdout, `"kind":"registration","member":"node-1"`, "the registration survived the restart")
	stop()
}

// startDev runs `krole dev` in-process with args, waits for its one line
// on stdout and returns the brokers it names and a stop function that
// cancels its context, as SIGINT does, and checks that it stopped cleanly
// having printed nothing more on stdout.
func startDev(t *testing.T, args ...string) (string, func()) {
	t.Helper()
	addrs, _, stop := startDevStderr(t, args...)
	return addrs, stop
}

// startDevStderr is startDev that also returns what dev writes on stderr.
func startDevStderr(t *testing.T, args ...string) (string, *testcluster.SyncBuffer, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	outR, outW := io.Pipe()
	errOut := &testcluster.SyncBuffer{}
	done := make(chan int, 1)
	appDone := startApp(t, ctx, append([]string{"dev"}, args...), outW, errOut)
	go func() {
		code := <-appDone
		_ = outW.Close()
		done <- code
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
	return addrs, errOut, func() {
		t.Helper()
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
}

func TestDevBusyPort(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	r := run(t, "dev", "--listen", ln.Addr().String())
	assertOneLineError(t, r, ExitFailure)
	assert.Contains(t, r.Stderr, "cannot listen on "+ln.Addr().String()+": address already in use")
}

// Without --listen, dev listens where --brokers points, as the other
// commands given the same flag will look (it was ignored before).
func TestDevListensWhereBrokersPoint(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	addrs, stop := startDev(t, "-b", addr+",127.0.0.1:1")
	assert.Equal(t, addr, addrs, "the first of --brokers")
	requireOK(t, run(t, "register", "controller", "--member", "node-1", "--brokers", addr))
	stop()
}
