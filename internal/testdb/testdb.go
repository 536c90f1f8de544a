// Package testdb starts throwaway PostgreSQL and MariaDB servers from the
// Debian packages for tests: one of each per test binary, started on first
// use, listening on a free port of 127.0.0.1, with its data and socket in a
// temporary directory, and stopped by [Run].
//
// A missing server fails the test (it does not skip) with the Debian
// package to install. The servers run with fsync off (their data is thrown
// away), and PostgreSQL detects deadlocks after 100ms. Each server is
// started with the kernel's parent-death signal, so it dies with the test
// binary even when [Run] never gets to stop it (a panic, a -timeout, a
// kill); PostgreSQL's own children exit when it does.
package testdb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // registers "mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx"
)

// Server is a running database server.
type Server struct {
	// Driver is the database/sql driver name the DSN is for: "pgx" or
	// "mysql".
	Driver string
	// DSN connects to the server's test database (PostgreSQL's "postgres",
	// MariaDB's "krole") as a superuser without a password.
	DSN string
	// Version is what the server says of itself (SELECT version()).
	Version string

	name string // "postgres" or "mariadb"
	dir  string
	log  string
	proc *proc
}

// Open returns a pool on the server, closed at tb's cleanup.
func (s *Server) Open(tb testing.TB) *sql.DB {
	tb.Helper()
	db, err := sql.Open(s.Driver, s.DSN)
	if err != nil {
		tb.Fatalf("testdb: open %s: %v", s.name, err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}

// shared is one server per test binary.
type shared struct {
	once sync.Once
	srv  *Server
	err  error
}

var (
	pgShared, pgDurable, myShared shared
	startedMu                     sync.Mutex
	started                       []*Server
)

// Postgres returns the binary's PostgreSQL server, starting it on the first
// call (a second or two); a server that cannot start fails tb.
func Postgres(tb testing.TB) *Server {
	tb.Helper()
	return pgShared.get(tb, startPostgres)
}

// DurablePostgres is Postgres for benchmarks of what commits cost: a
// server of its own with PostgreSQL's default durability (fsync on, every
// commit flushed), where the shared one runs with fsync off.
func DurablePostgres(tb testing.TB) *Server {
	tb.Helper()
	return pgDurable.get(tb, startDurablePostgres)
}

// MariaDB returns the binary's MariaDB server, starting it on the first call;
// a server that cannot start fails tb.
func MariaDB(tb testing.TB) *Server {
	tb.Helper()
	return myShared.get(tb, startMariaDB)
}

func (s *shared) get(tb testing.TB, start func() (*Server, error)) *Server {
	tb.Helper()
	s.once.Do(func() {
		removeStale()
		s.srv, s.err = start()
		if s.err == nil {
			startedMu.Lock()
			started = append(started, s.srv)
			startedMu.Unlock()
		}
	})
	if s.err != nil {
		tb.Fatal(s.err)
	}
	return s.srv
}

// Run runs the package's tests, then stops the servers they started and
// removes their directories. Call it from TestMain: os.Exit(testdb.Run(m)).
func Run(m *testing.M) int {
	code := m.Run()
	StopAll()
	return code
}

// StopAll stops every server this binary started (each within 10s, then
// SIGKILL to its process group) and removes their directories.
func StopAll() {
	startedMu.Lock()
	srvs := started
	started = nil
	startedMu.Unlock()
	var wg sync.WaitGroup
	for _, s := range srvs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.proc.stop(10 * time.Second)
			os.RemoveAll(s.dir)
		}()
	}
	wg.Wait()
}

// proc is a server process, started from a goroutine locked to its OS
// thread: Linux sends the parent-death signal when the thread that started
// the child exits, and a locked thread exits only with its goroutine, which
// lives until the process has ended.
type proc struct {
	pid  int
	sig  syscall.Signal // the signal that shuts the server down cleanly
	done chan struct{}  // closed once the process has been reaped
	err  error          // its exit status, once done
}

func startProc(cmd *exec.Cmd, stop syscall.Signal) (*proc, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	p := &proc{sig: stop, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		p.pid = cmd.Process.Pid
		started <- nil
		p.err = cmd.Wait()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return p, nil
}

// stop sends the clean-shutdown signal, waits up to grace, then kills the
// process group (a server's children included) and waits for the reap.
func (p *proc) stop(grace time.Duration) {
	syscall.Kill(p.pid, p.sig)
	select {
	case <-p.done:
	case <-time.After(grace):
	}
	syscall.Kill(-p.pid, syscall.SIGKILL)
	<-p.done
}

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// launch says how to start one server and check that it is the one
// that answers.
type launch struct {
	name     string                   // the log's name: NAME-PORT.log in dir
	dir      string                   // the server's directory
	data     string                   // its data directory, as the server reports it
	command  func(port int) *exec.Cmd // the server on port, Dir and credentials set
	stop     syscall.Signal           // its clean-shutdown signal
	driver   string                   // the database/sql driver
	dsn      func(port int) string    // what waitReady opens
	identify string                   // a query answering the version and the data directory
	setup    func(db *sql.DB) error   // run once it answers; may be nil
}

// listen starts l's server on a free port and waits until it answers. It
// tries another port when another process took the port first (the
// server could not bind it, or another server answered on it).
func (l launch) listen() (p *proc, port int, version, logPath string, err error) {
	for try := 0; try < 3; try++ {
		if port, err = freePort(); err != nil {
			return nil, 0, "", "", err
		}
		logPath = filepath.Join(l.dir, fmt.Sprintf("%s-%d.log", l.name, port))
		logf, ferr := os.Create(logPath)
		if ferr != nil {
			return nil, 0, "", "", ferr
		}
		cmd := l.command(port)
		cmd.Stdout, cmd.Stderr = logf, logf
		p, err = startProc(cmd, l.stop)
		logf.Close()
		if err != nil {
			return nil, 0, "", "", err
		}
		db, werr := waitReady(p, l.driver, l.dsn(port), logPath)
		if werr != nil {
			p.stop(0)
			err = werr
			if bindFailed(logPath) {
				continue
			}
			return nil, 0, "", "", err
		}
		var dataDir string
		err = db.QueryRow(l.identify).Scan(&version, &dataDir)
		if err == nil && filepath.Clean(dataDir) != l.data {
			db.Close()
			p.stop(0)
			err = fmt.Errorf("port %d answered from data directory %s, not %s", port, dataDir, l.data)
			continue
		}
		if err == nil && l.setup != nil {
			err = l.setup(db)
		}
		db.Close()
		if err != nil {
			p.stop(0)
			return nil, 0, "", "", err
		}
		return p, port, version, logPath, nil
	}
	return nil, 0, "", "", err
}

// freePort returns a port of 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitReady pings dsn until it answers, the process exits, or 60s pass.
func waitReady(p *proc, driver, dsn, logPath string) (*sql.DB, error) {
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err = db.PingContext(ctx)
		cancel()
		if err == nil {
			return db, nil
		}
		if p.exited() {
			db.Close()
			return nil, fmt.Errorf("the server exited (%v) before it answered; its log: %s", p.err, logTail(logPath))
		}
		if time.Now().After(deadline) {
			db.Close()
			return nil, fmt.Errorf("no answer in 60s (%v); its log: %s", err, logTail(logPath))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// bindFailed reports whether the server's log says its port was taken.
func bindFailed(logPath string) bool {
	b, _ := os.ReadFile(logPath)
	s := string(b)
	return strings.Contains(s, "Address already in use") || strings.Contains(s, "could not bind")
}

// logTail is the last lines of a server's log, on one line.
func logTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return strings.Join(lines, " | ")
}

// run runs a setup command, returning the lines of its output that name
// an error (or its last lines) in the error.
func run(cmd *exec.Cmd) error {
	out, err := cmd.CombinedOutput()
	if err == nil {
		return nil
	}
	var errLines []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(strings.ToLower(l), "error") {
			errLines = append(errLines, strings.TrimSpace(l))
		}
	}
	msg := strings.Join(errLines, " | ")
	if msg == "" {
		msg = lastLines(string(out), 5)
	}
	return fmt.Errorf("%s: %w: %s", filepath.Base(cmd.Path), err, msg)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// Directories are named dirPrefix+"*" in os.TempDir() and hold the pid of
// the test binary that made them in ownerFile.
const (
	dirPrefix = "krole-testdb-"
	ownerFile = "owner.pid"
)

// makeDir creates a server's directory, recording this process as its owner.
func makeDir(name string) (string, error) {
	dir, err := os.MkdirTemp("", dirPrefix+name+"-")
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// removeStale removes the directories of test binaries that are gone
// without having removed them (killed, or a panic before Run's StopAll).
// Their servers died with them (the parent-death signal).
func removeStale() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*"))
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			os.RemoveAll(dir)
		}
	}
}
