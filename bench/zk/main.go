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
// krole bench (package github.com/krabka/krole/internal/chart).
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
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

	"github.com/krabka/krole/internal/chart"
)

const (
	name      = "zookeeper-election-bench"
	waitLimit = 60 * time.Second
	tickTime  = 200 * time.Millisecond // of the server --start-zookeeper runs
)

// javaDir holds Debian's jars, the zookeeper package's among them.
var javaDir = "/usr/share/java"

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "failover", "handover", "acquire":
		err = runDriver(os.Args[1], os.Args[2:])
	case "candidate":
		err = runCandidate(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: "+name+" failover|handover|acquire (--start-zookeeper | --servers HOST:PORT,...) [--members N] [--rounds R] [--ttl D] [--with-session] [--label L] [-o json]")
	os.Exit(2)
}

func runDriver(kind string, args []string) error {
	fs := flag.NewFlagSet(kind, flag.ContinueOnError)
	members := fs.Int("members", 3, "candidate processes")
	rounds := fs.Int("rounds", 20, "rounds")
	ttl := fs.Duration("ttl", 3*time.Second, "the session timeout; the client pings every ttl/3")
	output := fs.String("o", "table", "table or json")
	servers := fs.String("servers", "", "a ZooKeeper ensemble's HOST:PORT list, comma-separated")
	start := fs.Bool("start-zookeeper", false, "run one ZooKeeper server (Debian's zookeeper package) for the run")
	label := fs.String("label", "", "the run's label in charts")
	withSession := fs.Bool("with-session", false, "acquire: time the session's start with the election")
	if err := fs.Parse(args); err != nil {
		os.Exit(2)
	}
	if *members < 2 || *rounds < 1 || *ttl < 2*tickTime || (*output != "table" && *output != "json") || (*servers == "") == !*start {
		fmt.Fprintln(os.Stderr, name+": --members >= 2, --rounds >= 1, --ttl >= 400ms, -o table|json, and one of --start-zookeeper and --servers")
		os.Exit(2)
	}
	settings := map[string]any{"ttl": ttl.String(), "ping_interval": (*ttl / 3).String(), "rounds": *rounds,
		"client": "github.com/go-zookeeper/zk v1.0.4", "recipe": "ephemeral sequential nodes, each watches its predecessor"}
	srv := *servers
	if *start {
		z, err := startZooKeeper(*ttl)
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
	if *output == "table" {
		fmt.Println("cluster:", settings["cluster"])
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(term)
	stop := make(chan struct{})
	go func() {
		if _, ok := <-term; ok {
			close(stop)
		}
	}()
	conn, negotiated, err := connect(srv, *ttl)
	if err != nil {
		return err
	}
	defer conn.Close()
	settings["session_timeout"] = negotiated.String()
	run := fmt.Sprintf("%x", time.Now().UnixNano()&0xffffffffff)
	d := &driver{conn: conn, servers: srv, ttl: *ttl, stop: stop, prefix: "/election/bench-" + kind + "-" + run,
		procs: map[string]*exec.Cmd{}, exited: map[string]chan struct{}{}, leads: make(chan lead, 16)}
	if err := ensurePath(conn, d.prefix); err != nil {
		return err
	}
	defer d.cleanUp()
	var samples []float64
	if kind == "acquire" {
		settings["with_session"] = *withSession
		samples, err = d.acquire(*rounds, *withSession)
	} else {
		settings["members"] = *members
		samples, err = d.succession(kind, *members, *rounds)
		d.stopAll()
	}
	fmt.Fprintln(os.Stderr)
	if err != nil {
		return err
	}
	res := chart.Result{Kind: kind, System: "zookeeper", Label: *label, SamplesMS: samples, Settings: settings}
	res.Stats = chart.Summarize(res.SamplesMS)
	if *output == "json" {
		return json.NewEncoder(os.Stdout).Encode(res)
	}
	chart.WriteText(os.Stdout, res)
	return nil
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

type lead struct {
	name string
	at   time.Time
}

type driver struct {
	conn    *zk.Conn
	servers string
	ttl     time.Duration
	stop    chan struct{}
	prefix  string
	procs   map[string]*exec.Cmd
	exited  map[string]chan struct{}
	leads   chan lead
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "\r%-70s", fmt.Sprintf(format, args...))
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// acquire: each round one election of its own (its parent node created
// before the clock starts) with one candidate, on a session opened before
// the clock starts (withSession: after). The sample is the node's
// creation and the look at its siblings that finds it lowest.
func (d *driver) acquire(rounds int, withSession bool) ([]float64, error) {
	var samples []float64
	for r := range rounds {
		select {
		case <-d.stop:
			return nil, errStopped
		default:
		}
		election := fmt.Sprintf("%s/%d", d.prefix, r)
		if err := ensurePath(d.conn, election); err != nil {
			return nil, err
		}
		t0 := time.Now()
		conn, _, err := connect(d.servers, d.ttl)
		if err != nil {
			return nil, err
		}
		if !withSession {
			t0 = time.Now()
		}
		node, err := campaign(conn, election, "acquirer", d.stop)
		if err != nil {
			conn.Close()
			return nil, err
		}
		samples = append(samples, ms(time.Since(t0)))
		progress("acquire round %d/%d: %.2f ms", r+1, rounds, samples[r])
		_ = conn.Delete(node, -1)
		conn.Close()
		_ = d.conn.Delete(election, -1)
	}
	return samples, nil
}

// start runs candidate name as a process; its lines "leader" go to
// d.leads with the time they are read.
func (d *driver) start(cand string) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(exe, "candidate", "--servers", d.servers, "--election", d.prefix, "--name", cand, "--ttl", d.ttl.String())
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "leader" {
				d.leads <- lead{cand, time.Now()}
			}
		}
		_ = cmd.Wait()
		close(done)
	}()
	d.procs[cand] = cmd
	d.exited[cand] = done
	return nil
}

func (d *driver) stopAll() {
	for cand, cmd := range d.procs {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.exited[cand]:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
		}
	}
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

// waitCount waits until the election holds n candidates' nodes.
func (d *driver) waitCount(n int) error {
	deadline := time.Now().Add(d.ttl + waitLimit)
	for {
		for cand, done := range d.exited {
			select {
			case <-done:
				if d.procs[cand] != nil {
					return fmt.Errorf("candidate %s exited", cand)
				}
			default:
			}
		}
		kids, _, err := d.conn.Children(d.prefix)
		if err != nil {
			return err
		}
		if len(kids) == n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("waited for %d candidates, have %d", n, len(kids))
		}
		select {
		case <-d.stop:
			return errStopped
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// succession runs failover and handover rounds.
func (d *driver) succession(kind string, n, rounds int) ([]float64, error) {
	leader := ""
	await := func(ok func(string) bool) (time.Time, error) {
		if ok(leader) {
			return time.Now(), nil
		}
		t := time.NewTimer(d.ttl + waitLimit)
		defer t.Stop()
		for {
			select {
			case l := <-d.leads:
				leader = l.name
				if ok(leader) {
					return l.at, nil
				}
			case <-t.C:
				return time.Time{}, errors.New("no new leader in time")
			case <-d.stop:
				return time.Time{}, errStopped
			}
		}
	}
	for i := range n {
		if err := d.start(fmt.Sprintf("cand-%d", i+1)); err != nil {
			return nil, err
		}
		if err := d.waitCount(i + 1); err != nil {
			return nil, err
		}
	}
	var samples []float64
	for r := range rounds {
		if _, err := await(func(l string) bool { return d.procs[l] != nil }); err != nil {
			return nil, err
		}
		sig := syscall.SIGTERM
		if kind == "failover" {
			sig = syscall.SIGKILL
			time.Sleep(rand.N(d.ttl / 3)) // a random phase of the ping interval
		}
		old := leader
		cmd := d.procs[old]
		t0 := time.Now()
		if err := cmd.Process.Signal(sig); err != nil {
			return nil, err
		}
		at, err := await(func(l string) bool { return l != old && l != "" })
		if err != nil {
			return nil, err
		}
		samples = append(samples, ms(at.Sub(t0)))
		progress("%s round %d/%d: %.2f ms", kind, r+1, rounds, samples[r])
		<-d.exited[old]
		delete(d.procs, old)
		// The old leader's node is gone (deleted, or its session expired):
		// start it again, at the back.
		if err := d.waitCount(n - 1); err != nil {
			return nil, err
		}
		if err := d.start(old); err != nil {
			return nil, err
		}
		if err := d.waitCount(n); err != nil {
			return nil, err
		}
	}
	return samples, nil
}

// runCandidate is one candidate process: it campaigns and prints "leader"
// when it leads; on SIGTERM it deletes its node if it leads, closes its
// session (which deletes the node of one that does not) and exits.
func runCandidate(args []string) error {
	fs := flag.NewFlagSet("candidate", flag.ContinueOnError)
	servers := fs.String("servers", "", "")
	election := fs.String("election", "", "")
	id := fs.String("name", "", "")
	ttl := fs.Duration("ttl", 3*time.Second, "")
	if err := fs.Parse(args); err != nil {
		os.Exit(2)
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM, os.Interrupt)
	conn, _, err := connect(*servers, *ttl)
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
		node, err := campaign(conn, *election, *id, stop)
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
	fmt.Println("leader")
	<-term
	return conn.Delete(w.node, -1)
}
