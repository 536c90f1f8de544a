package testdb

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	if os.Getenv("TESTDB_CHILD") != "" {
		child()
		return
	}
	os.Exit(Run(m))
}

// child starts both servers, prints their pids and waits to be killed.
func child() {
	var wg sync.WaitGroup
	var pg, my *Server
	var pgErr, myErr error
	wg.Add(2)
	go func() { defer wg.Done(); pg, pgErr = startPostgres() }()
	go func() { defer wg.Done(); my, myErr = startMariaDB() }()
	wg.Wait()
	if err := errors.Join(pgErr, myErr); err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println("pids", pg.proc.pid, my.proc.pid)
	select {}
}

func TestServers(t *testing.T) {
	for _, tc := range []struct {
		name      string
		srv       func(testing.TB) *Server
		isolation string
	}{
		{"postgres", Postgres, "SHOW transaction_isolation"},
		{"mariadb", MariaDB, "SELECT @@tx_isolation"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := tc.srv(t)
			if again := tc.srv(t); again != s {
				t.Fatalf("a second call started another server")
			}
			db := s.Open(t)
			var level string
			if err := db.QueryRow(tc.isolation).Scan(&level); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %s; default isolation %s", tc.name, s.Version, level)
			if !strings.Contains(strings.ToLower(s.Version), map[string]string{"postgres": "postgresql", "mariadb": "mariadb"}[tc.name]) {
				t.Errorf("version %q is not %s's", s.Version, tc.name)
			}
		})
	}
}

// TestNoOrphans kills a test binary that started both servers, with
// SIGKILL, so that nothing of it runs: the servers must die with it.
func TestNoOrphans(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "TESTDB_CHILD=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("the child said nothing: %v", err)
	}
	var pgPid, myPid int
	if _, err := fmt.Sscanf(line, "pids %d %d", &pgPid, &myPid); err != nil {
		t.Fatalf("the child: %q", line)
	}
	for _, pid := range []int{pgPid, myPid} {
		if !alive(pid) {
			t.Fatalf("server pid %d is not running before the kill", pid)
		}
	}
	cmd.Process.Kill()
	cmd.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, pid := range []int{pgPid, myPid} {
		for alive(pid) {
			if ctx.Err() != nil {
				syscall.Kill(-pid, syscall.SIGKILL)
				t.Fatalf("server pid %d outlived its test binary by 20s", pid)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	removeStale()
	for _, pid := range []int{cmd.Process.Pid} {
		if dirs := ownedBy(pid); len(dirs) > 0 {
			t.Errorf("removeStale left the dead binary's directories %v", dirs)
		}
	}
}

// alive reports whether pid runs (a zombie counts as gone).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the command name's closing parenthesis.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

func ownedBy(pid int) []string {
	var dirs []string
	matches, _ := os.ReadDir(os.TempDir())
	for _, e := range matches {
		if !strings.HasPrefix(e.Name(), dirPrefix) {
			continue
		}
		b, err := os.ReadFile(os.TempDir() + "/" + e.Name() + "/" + ownerFile)
		if err == nil && strings.TrimSpace(string(b)) == strconv.Itoa(pid) {
			dirs = append(dirs, e.Name())
		}
	}
	return dirs
}
