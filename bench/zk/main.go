// Command zookeeper-election-bench is krole bench's ZooKeeper peer: the
// scenarios of the etcd peer (bench/) on ZooKeeper's election recipe.
// Each candidate creates an ephemeral sequential node under
// /election/<name>; the lowest node leads; every other candidate watches
// the node just before its own (no herd) and looks again when it goes.
// The session timeout is the lease (--ttl); the client pings every
// ttl/3. Candidates that must die are separate processes of this binary
// (its hidden "candidate" mode); each prints a line when it leads.
//
//	zookeeper-election-bench failover --members N --rounds R --ttl D   SIGKILL the leader's process
//	zookeeper-election-bench handover --members N --rounds R --ttl D   SIGTERM it: it deletes its node, closes its session
//	zookeeper-election-bench acquire --rounds R --ttl D                one election on a session already open
//	  (--with-session: the session's start, then the election)
//
// With --start-zookeeper it runs one ZooKeeper server from Debian's
// zookeeper package (a temporary directory, a free port on 127.0.0.1,
// tickTime 200 ms) and stops it at exit; else it uses --servers. Times run
// from the signal (or the election's start) to the line of the candidate
// that now leads, as this process reads it. -o json prints the format of
// krole bench (package github.com/krabka/krole/internal/chart). What the
// peers share (the command line, the rounds, the candidate processes, the
// output) is bench/peerkit's.
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/krabka/krole/bench/peerkit"
)

const (
	name      = "zookeeper-election-bench"
	waitLimit = peerkit.WaitLimit
	tickTime  = 200 * time.Millisecond // of the server --start-zookeeper runs
)

// javaDir holds Debian's jars, the zookeeper package's among them.
var javaDir = "/usr/share/java"

func main() {
	peerkit.Main(name, "failover|handover|acquire (--start-zookeeper | --servers HOST:PORT,...) [--members N] [--rounds R] [--ttl D] [--with-session] [--label L] [-o json]",
		runDriver, runCandidate)
}

func runDriver(kind string, args []string) error {
	f := peerkit.NewFlags(name, kind, "the session timeout; the client pings every ttl/3",
		"acquire: time the session's start with the election")
	servers := f.String("servers", "", "a ZooKeeper ensemble's HOST:PORT list, comma-separated")
	start := f.Bool("start-zookeeper", false, "run one ZooKeeper server (Debian's zookeeper package) for the run")
	f.Parse(args, "--members >= 2, --rounds >= 1, --ttl >= 400ms, -o table|json, and one of --start-zookeeper and --servers",
		func() bool { return f.TTL >= 2*tickTime && (*servers == "") != !*start })
	settings := f.Settings()
	settings["ping_interval"] = (f.TTL / 3).String()
	settings["client"] = "github.com/go-zookeeper/zk v1.0.4"
	settings["recipe"] = "ephemeral sequential nodes, each watches its predecessor"
	srv := *servers
	if *start {
		z, err := startZooKeeper(f.TTL)
		if err != nil {
			return err
		}
		defer z.stop()
		srv = z.addr
		settings["cluster"] = "one ZooKeeper server started by the bench (" + z.version + ", Debian's package), " + z.addr
		settings["tick_time"] = tickTime.String()
	} else {
		settings["cluster"] = srv
	}
	if f.Output == "table" {
		fmt.Println("cluster:", settings["cluster"])
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	conn, negotiated, err := connect(srv, f.TTL)
	if err != nil {
		return err
	}
	defer conn.Close()
	settings["session_timeout"] = negotiated.String()
	d := &driver{conn: conn, servers: srv, ttl: f.TTL, stop: ctx.Done(), prefix: "/election/bench-" + kind + "-" + peerkit.RunID()}
	if err := ensurePath(conn, d.prefix); err != nil {
		return err
	}
	defer d.cleanUp()
	var samples []float64
	if kind == "acquire" {
		samples, err = peerkit.Acquire(ctx, f.Rounds, func(r int) (time.Duration, error) { return d.acquire(r, f.WithSession) })
	} else {
		s := &peerkit.Succession{Kind: kind, Members: f.Members, Rounds: f.Rounds, TTL: f.TTL,
			Args: []string{"--servers", d.servers, "--election", d.prefix}, Holds: d.holds}
		samples, err = s.Run(ctx)
	}
	if err != nil {
		return err
	}
	return f.Report("zookeeper", samples, settings)
}

// zooKeeper is a server startZooKeeper runs.
type zooKeeper struct {
	addr, version string
	stop          func()
}

// startZooKeeper runs one standalone ZooKeeper server from Debian's
// zookeeper package in a temporary directory, on a free port of
// 127.0.0.1, and waits until a client has a session with it. Its session
// timeouts may be as short as 2 ticks and as long as an hour. It dies
// with this process (Pdeathsig); stop ends it by its pid and removes the
// directory.
func startZooKeeper(ttl time.Duration) (*zooKeeper, error) {
	jars, _ := filepath.Glob(filepath.Join(javaDir, "*.jar"))
	var zkJar string
	for _, j := range jars {
		if m := regexp.MustCompile(`^zookeeper-(\d[\d.]*)\.jar$`).FindStringSubmatch(filepath.Base(j)); m != nil {
			zkJar = "ZooKeeper " + m[1]
		}
	}
	java, err := exec.LookPath("java")
	if zkJar == "" || err != nil {
		return nil, errors.New("ZooKeeper is not installed: apt-get install zookeeper (the Debian package zookeeper)")
	}
	dir, err := os.MkdirTemp("", name+"-")
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	cfg := fmt.Sprintf("tickTime=%d\ndataDir=%s\nclientPort=%d\nclientPortAddress=127.0.0.1\nadmin.enableServer=false\nminSessionTimeout=%d\nmaxSessionTimeout=%d\n",
		tickTime.Milliseconds(), filepath.Join(dir, "data"), port, (2 * tickTime).Milliseconds(), time.Hour.Milliseconds())
	if err := os.WriteFile(filepath.Join(dir, "zoo.cfg"), []byte(cfg), 0o644); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	logPath := filepath.Join(dir, "zookeeper.log")
	logf, err := os.Create(logPath)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(java, "-Dzookeeper.root.logger=INFO,CONSOLE", "-Dzookeeper.log.dir="+dir,
		"-cp", "/etc/zookeeper/conf:"+strings.Join(jars, ":"),
		"org.apache.zookeeper.server.quorum.QuorumPeerMain", filepath.Join(dir, "zoo.cfg"))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		os.RemoveAll(dir)
	}
	deadline := time.Now().Add(waitLimit)
	for {
		select {
		case <-exited:
			tail := lastLines(logPath, 5)
			os.RemoveAll(dir)
			return nil, fmt.Errorf("ZooKeeper exited at start: %s", tail)
		default:
		}
		if conn, _, err := connectWithin(addr, ttl, time.Second); err == nil {
			conn.Close()
			return &zooKeeper{addr: addr, version: zkJar, stop: stop}, nil
		}
		if time.Now().After(deadline) {
			stop()
			return nil, fmt.Errorf("ZooKeeper did not accept a session within %v", waitLimit)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func lastLines(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// quiet is the client's logger: it keeps the session timeout the server
// granted and drops the rest (errors reach the callers as errors).
type quiet struct {
	mu      sync.Mutex
	timeout time.Duration
}

var grantedRE = regexp.MustCompile(`^authenticated: id=\d+, timeout=(\d+)$`)

func (q *quiet) Printf(format string, args ...any) {
	if m := grantedRE.FindStringSubmatch(fmt.Sprintf(format, args...)); m != nil {
		ms, _ := strconv.Atoi(m[1])
		q.mu.Lock()
		q.timeout = time.Duration(ms) * time.Millisecond
		q.mu.Unlock()
	}
}

// connect opens a session with the session timeout ttl and returns it
// with the timeout the server granted.
func connect(servers string, ttl time.Duration) (*zk.Conn, time.Duration, error) {
	return connectWithin(servers, ttl, waitLimit)
}

func connectWithin(servers string, ttl, limit time.Duration) (*zk.Conn, time.Duration, error) {
	q := &quiet{}
	conn, events, err := zk.Connect(strings.Split(servers, ","), ttl, zk.WithLogger(q))
	if err != nil {
		return nil, 0, err
	}
	t := time.NewTimer(limit)
	defer t.Stop()
	for {
		select {
		case ev := <-events:
			if ev.State == zk.StateHasSession {
				// The events channel drops what nobody reads; keep it drained.
				go func() {
					for range events {
					}
				}()
				q.mu.Lock()
				defer q.mu.Unlock()
				return conn, q.timeout, nil
			}
		case <-t.C:
			conn.Close()
			return nil, 0, fmt.Errorf("no ZooKeeper session with %s within %v", servers, limit)
		}
	}
}

// ensurePath creates p and its parents as persistent nodes where missing.
func ensurePath(conn *zk.Conn, p string) error {
	at := ""
	for _, part := range strings.Split(strings.Trim(p, "/"), "/") {
		at += "/" + part
		if _, err := conn.Create(at, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return fmt.Errorf("create %s: %w", at, err)
		}
	}
	return nil
}

var errStopped = errors.New("stopped")

// campaign is the recipe: an ephemeral sequential node under election,
// holding id; it returns the node once it is the lowest, watching the node
// just before it meanwhile. It returns errStopped when stop closes.
func campaign(conn *zk.Conn, election, id string, stop <-chan struct{}) (string, error) {
	node, err := conn.Create(election+"/n_", []byte(id), zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll))
	if err != nil {
		return "", fmt.Errorf("create the candidate's node: %w", err)
	}
	me := node[len(election)+1:]
	for {
		kids, _, err := conn.Children(election)
		if err != nil {
			return node, err
		}
		sort.Strings(kids) // n_ and ten digits: the sequence's order
		i := sort.SearchStrings(kids, me)
		switch {
		case i == len(kids) || kids[i] != me:
			return node, fmt.Errorf("%s is gone: the session expired", node)
		case i == 0:
			return node, nil
		}
		ok, _, ch, err := conn.ExistsW(election + "/" + kids[i-1])
		if err != nil {
			return node, err
		}
		if !ok {
			continue
		}
		select {
		case ev := <-ch:
			if ev.Err != nil {
				return node, ev.Err
			}
		case <-stop:
			return node, errStopped
		}
	}
}

type driver struct {
	conn    *zk.Conn
	servers string
	ttl     time.Duration
	stop    <-chan struct{}
	prefix  string
}

// acquire: each round one election of its own (its parent node created
// before the clock starts) with one candidate, on a session opened before
// the clock starts (withSession: after). The sample is the node's
// creation and the look at its siblings that finds it lowest.
func (d *driver) acquire(r int, withSession bool) (time.Duration, error) {
	election := fmt.Sprintf("%s/%d", d.prefix, r)
	if err := ensurePath(d.conn, election); err != nil {
		return 0, err
	}
	t0 := time.Now()
	conn, _, err := connect(d.servers, d.ttl)
	if err != nil {
		return 0, err
	}
	if !withSession {
		t0 = time.Now()
	}
	node, err := campaign(conn, election, "acquirer", d.stop)
	if err != nil {
		conn.Close()
		return 0, err
	}
	took := time.Since(t0)
	_ = conn.Delete(node, -1)
	conn.Close()
	_ = d.conn.Delete(election, -1)
	return took, nil
}

// cleanUp deletes the run's nodes that are left (best effort: a killed
// candidate's node lasts until its session expires).
func (d *driver) cleanUp() {
	kids, _, _ := d.conn.Children(d.prefix)
	for _, k := range kids {
		_ = d.conn.Delete(d.prefix+"/"+k, -1)
	}
	_ = d.conn.Delete(d.prefix, -1)
}

// holds says whether the election holds n candidates' nodes.
func (d *driver) holds(n int) (bool, string, error) {
	kids, _, err := d.conn.Children(d.prefix)
	if err != nil {
		return false, "", err
	}
	return len(kids) == n, strconv.Itoa(len(kids)), nil
}

// runCandidate is one candidate process: it campaigns and prints "leader"
// when it leads; on SIGTERM it deletes its node if it leads, closes its
// session (which deletes the node of one that does not) and exits.
func runCandidate(args []string) error {
	f := peerkit.NewCandidateFlags()
	servers := f.String("servers", "", "")
	election := f.String("election", "", "")
	term := f.Parse(args)
	conn, _, err := connect(*servers, f.TTL)
	if err != nil {
		return err
	}
	defer conn.Close()
	stop := make(chan struct{})
	type won struct {
		node string
		err  error
	}
	wins := make(chan won, 1)
	go func() {
		node, err := campaign(conn, *election, f.Name, stop)
		wins <- won{node, err}
	}()
	var w won
	select {
	case <-term:
		close(stop)
		return nil
	case w = <-wins:
		if w.err != nil {
			return w.err
		}
	}
	fmt.Println(peerkit.LeaderLine)
	<-term
	return conn.Delete(w.node, -1)
}
