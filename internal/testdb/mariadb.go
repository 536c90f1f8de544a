package testdb

import (
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
)

// lookBin finds name on PATH or in /usr/sbin (not on a user's PATH).
func lookBin(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	p := filepath.Join("/usr/sbin", name)
	if _, err := os.Stat(p); err != nil {
		return "", err
	}
	return p, nil
}

// startMariaDB runs mariadb-install-db and mariadbd in a new directory,
// with --no-defaults so that no system configuration (its port, socket or
// data directory) applies, and creates the database "krole".
func startMariaDB() (*Server, error) {
	const missing = "testdb: MariaDB is not installed (no mariadbd or mariadb-install-db): apt-get install mariadb-server"
	mariadbd, err := lookBin("mariadbd")
	if err != nil {
		return nil, fmt.Errorf("%s", missing)
	}
	installDB, err := lookBin("mariadb-install-db")
	if err != nil {
		return nil, fmt.Errorf("%s", missing)
	}
	dir, err := makeDir("mariadb")
	if err != nil {
		return nil, fmt.Errorf("testdb: %w", err)
	}
	srv, err := initMariaDB(mariadbd, installDB, dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("testdb: MariaDB: %w", err)
	}
	return srv, nil
}

func initMariaDB(mariadbd, installDB, dir string) (*Server, error) {
	data := filepath.Join(dir, "data")
	// A temporary directory of its own: concurrent bootstraps in one /tmp
	// can collide on their temporary tables' files.
	tmp := filepath.Join(dir, "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return nil, err
	}
	var asRoot []string
	if os.Geteuid() == 0 {
		asRoot = []string{"--user=root"}
	}
	install := exec.Command(installDB, append([]string{"--no-defaults", "--datadir=" + data, "--tmpdir=" + tmp,
		"--auth-root-authentication-method=normal", "--skip-test-db"}, asRoot...)...)
	install.Dir = dir
	if err := run(install); err != nil {
		return nil, err
	}
	p, port, version, logPath, err := launch{
		name: "mariadbd", dir: dir, data: data, stop: syscall.SIGTERM,
		command: func(port int) *exec.Cmd {
			cmd := exec.Command(mariadbd, append([]string{"--no-defaults", "--datadir=" + data, "--tmpdir=" + tmp,
				"--port=" + strconv.Itoa(port), "--bind-address=127.0.0.1",
				"--socket=" + filepath.Join(dir, "mariadbd.sock"), "--pid-file=" + filepath.Join(dir, "mariadbd.pid"),
				"--skip-name-resolve", "--skip-log-bin", "--max-connections=200",
				"--innodb-buffer-pool-size=64M", "--innodb-flush-log-at-trx-commit=0", "--innodb-doublewrite=0",
				"--innodb-lock-wait-timeout=20"}, asRoot...)...)
			cmd.Dir = dir
			return cmd
		},
		driver:   "mysql",
		dsn:      func(port int) string { return fmt.Sprintf("root@tcp(127.0.0.1:%d)/", port) },
		identify: "SELECT version(), @@datadir",
		setup:    func(db *sql.DB) error { _, err := db.Exec("CREATE DATABASE krole"); return err },
	}.listen()
	if err != nil {
		return nil, err
	}
	return &Server{Driver: "mysql", DSN: fmt.Sprintf("root@tcp(127.0.0.1:%d)/krole?parseTime=true", port), Version: version,
		name: "mariadb", dir: dir, log: logPath, proc: p}, nil
}
