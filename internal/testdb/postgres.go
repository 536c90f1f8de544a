package testdb

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// pgBinDir finds the newest /usr/lib/postgresql/*/bin with a postgres in it.
func pgBinDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	var ok []string
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "postgres")); err == nil {
			ok = append(ok, d)
		}
	}
	if len(ok) == 0 {
		return "", fmt.Errorf("testdb: PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/postgres): apt-get install postgresql")
	}
	major := func(d string) int { n, _ := strconv.Atoi(filepath.Base(filepath.Dir(d))); return n }
	sort.Slice(ok, func(i, j int) bool { return major(ok[i]) > major(ok[j]) })
	return ok[0], nil
}

// pgCredential is the postgres user's, when running as root (initdb and
// postgres refuse root); nil otherwise: they run as this user.
func pgCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("testdb: running as root, and there is no postgres user to run PostgreSQL as: apt-get install postgresql")
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// startPostgres runs initdb and postgres in a new directory. As root it
// runs them as the postgres user through the child's credentials rather
// than runuser: runuser forks and waits, and the kernel clears the
// parent-death signal when the uid changes, so the server could outlive a
// killed test binary.
func startPostgres() (*Server, error) { return startPG(false) }

// startDurablePostgres is startPostgres with PostgreSQL's default
// durability: every commit waits for its WAL to reach the disk.
func startDurablePostgres() (*Server, error) { return startPG(true) }

func startPG(durable bool) (*Server, error) {
	bin, err := pgBinDir()
	if err != nil {
		return nil, err
	}
	cred, err := pgCredential()
	if err != nil {
		return nil, err
	}
	dir, err := makeDir("postgres")
	if err != nil {
		return nil, fmt.Errorf("testdb: %w", err)
	}
	srv, err := initPostgres(bin, cred, dir, durable)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("testdb: PostgreSQL: %w", err)
	}
	return srv, nil
}

func initPostgres(bin string, cred *syscall.Credential, dir string, durable bool) (*Server, error) {
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, err
		}
	}
	data := filepath.Join(dir, "data")
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-A", "trust", "-U", "krole",
		"-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions")
	initdb.Dir = dir
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if err := run(initdb); err != nil {
		return nil, err
	}
	dsn := func(port int) string {
		return fmt.Sprintf("postgres://krole@127.0.0.1:%d/postgres?sslmode=disable", port)
	}
	p, port, version, logPath, err := launch{
		name: "postgres", dir: dir, data: data, stop: syscall.SIGINT, // SIGINT: fast shutdown
		command: func(port int) *exec.Cmd {
			args := []string{"-D", data, "-p", strconv.Itoa(port), "-k", dir,
				"-c", "listen_addresses=127.0.0.1", "-c", "max_connections=200", "-c", "deadlock_timeout=100ms"}
			if !durable {
				args = append(args, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
			}
			cmd := exec.Command(filepath.Join(bin, "postgres"), args...)
			cmd.Dir = dir
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
			return cmd
		},
		driver:   "pgx",
		dsn:      dsn,
		identify: "SELECT version(), current_setting('data_directory')",
	}.listen()
	if err != nil {
		return nil, err
	}
	return &Server{Driver: "pgx", DSN: dsn(port), Version: strings.TrimSpace(version), name: "postgres", dir: dir, log: logPath, proc: p}, nil
}
