// Command etcd-election-bench is krole bench's peer: the same scenarios on
// etcd's election (go.etcd.io/etcd/client/v3/concurrency), on one embedded
// etcd server (go.etcd.io/etcd/server/v3/embed) in this process, or on the
// cluster --endpoints names. Candidates that must die are separate
// processes of this binary (its hidden "candidate" mode).
//
//	etcd-election-bench failover --members N --rounds R --ttl D   SIGKILL the leader's process
//	etcd-election-bench handover --members N --rounds R --ttl D   SIGTERM it: it Resigns
//	etcd-election-bench acquire --rounds R --ttl D                an uncontended Campaign
//	  (--with-session: NewSession, its lease grant, and the Campaign)
//
// Each prints min, median, p90, p99 and max in milliseconds; -o json prints
// one object in the format of krole bench (see package
// github.com/krabka/krole/internal/chart). Times run from the signal (or
// the Campaign call) to the new leader as this process's Observe shows it
// (or Campaign's return). It lives in a module of its own so that krole's
// module never depends on etcd.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.etcd.io/etcd/server/v3/embed"

	"github.com/krabka/krole/internal/chart"
)

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
		fmt.Fprintln(os.Stderr, "etcd-election-bench:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: etcd-election-bench failover|handover|acquire [--members N] [--rounds R] [--ttl D] [--with-session] [-o json] [--endpoints URLS]")
	os.Exit(2)
}

const waitLimit = 60 * time.Second

func runDriver(kind string, args []string) error {
	fs := flag.NewFlagSet(kind, flag.ContinueOnError)
	members := fs.Int("members", 3, "candidate processes")
	rounds := fs.Int("rounds", 20, "rounds")
	ttl := fs.Duration("ttl", 3*time.Second, "the session TTL (whole seconds); keep-alives every TTL/3")
	output := fs.String("o", "table", "table or json")
	endpoints := fs.String("endpoints", "", "an etcd cluster's client URLs, comma-separated (default: an embedded server)")
	label := fs.String("label", "", "the run's label in charts")
	withSession := fs.Bool("with-session", false, "acquire: time NewSession (its lease grant) with the Campaign, as krole's acquire times its member session's start with the campaign")
	if err := fs.Parse(args); err != nil {
		os.Exit(2)
	}
	if *members < 2 || *rounds < 1 || *ttl < time.Second || *ttl%time.Second != 0 || (*output != "table" && *output != "json") {
		fmt.Fprintln(os.Stderr, "etcd-election-bench: --members >= 2, --rounds >= 1, --ttl whole seconds >= 1s, -o table|json")
		os.Exit(2)
	}
	cluster := "embedded (etcd server in the bench process)"
	eps := *endpoints
	if eps == "" {
		e, stop, err := startEtcd()
		if err != nil {
			return err
		}
		defer stop()
		eps = e
	} else {
		cluster = eps
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(eps, ","), DialTimeout: 5 * time.Second})
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	run := fmt.Sprintf("%x", time.Now().UnixNano()&0xffffffffff)
	d := &driver{ctx: ctx, cli: cli, eps: eps, ttl: *ttl, prefix: "/bench-" + kind + "/" + run, procs: map[string]*exec.Cmd{}}
	var samples []float64
	settings := map[string]any{"ttl": ttl.String(), "keepalive_interval": (*ttl / 3).String(), "rounds": *rounds,
		"cluster": cluster, "etcd": "v3.7 (server/v3/embed, client/v3/concurrency)"}
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
	res := chart.Result{Kind: kind, System: "etcd", Label: *label, SamplesMS: samples, Settings: settings}
	res.Stats = chart.Summarize(res.SamplesMS)
	if *output == "json" {
		return json.NewEncoder(os.Stdout).Encode(res)
	}
	chart.WriteText(os.Stdout, res)
	return nil
}

// startEtcd starts one etcd server on free 127.0.0.1 ports, in a
// temporary directory, and returns its client URL.
func startEtcd() (string, func(), error) {
	dir, err := os.MkdirTemp("", "etcd-election-bench-")
	if err != nil {
		return "", nil, err
	}
	cfg := embed.NewConfig()
	cfg.Dir = dir
	cfg.LogLevel = "fatal" // its shutdown logs errors of closed listeners
	cu, pu := freeURL(), freeURL()
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(waitLimit):
		e.Close()
		os.RemoveAll(dir)
		return "", nil, errors.New("the embedded etcd server did not start")
	}
	return cu.String(), func() { e.Close(); os.RemoveAll(dir) }, nil
}

func freeURL() url.URL {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	return url.URL{Scheme: "http", Host: ln.Addr().String()}
}

type driver struct {
	ctx    context.Context
	cli    *clientv3.Client
	eps    string
	ttl    time.Duration
	prefix string
	procs  map[string]*exec.Cmd
	exited map[string]chan struct{}
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "\r%-70s", fmt.Sprintf(format, args...))
}

// acquire: each round a fresh session (its lease granted before the clock
// starts) campaigns on a fresh election; the sample is the Campaign call.
func (d *driver) acquire(rounds int, withSession bool) ([]float64, error) {
	var samples []float64
	for r := range rounds {
		t0 := time.Now()
		sess, err := concurrency.NewSession(d.cli, concurrency.WithTTL(int(d.ttl/time.Second)))
		if err != nil {
			return nil, err
		}
		el := concurrency.NewElection(sess, fmt.Sprintf("%s/%d", d.prefix, r))
		if !withSession {
			t0 = time.Now()
		}
		if err := el.Campaign(d.ctx, "acquirer"); err != nil {
			sess.Close()
			return nil, err
		}
		samples = append(samples, float64(time.Since(t0).Microseconds())/1000)
		progress("acquire round %d/%d: %.2f ms", r+1, rounds, samples[r])
		_ = el.Resign(d.ctx)
		sess.Close()
	}
	return samples, nil
}

func (d *driver) start(name string) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(exe, "candidate", "--endpoints", d.eps, "--prefix", d.prefix, "--name", name, "--ttl", d.ttl.String())
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	d.procs[name] = cmd
	d.exited[name] = done
	return nil
}

func (d *driver) stopAll() {
	for name, cmd := range d.procs {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.exited[name]:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
		}
	}
}

// count is how many candidates' keys the election holds.
func (d *driver) count() (int64, error) {
	resp, err := d.cli.Get(d.ctx, d.prefix+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return resp.Count, nil
}

func (d *driver) waitCount(n int64) error {
	deadline := time.Now().Add(waitLimit)
	for {
		c, err := d.count()
		if err != nil {
			return err
		}
		if c == n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("waited %v for %d candidates, have %d", waitLimit, n, c)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// succession runs failover and handover rounds.
func (d *driver) succession(kind string, n, rounds int) ([]float64, error) {
	d.exited = map[string]chan struct{}{}
	sess, err := concurrency.NewSession(d.cli, concurrency.WithTTL(int(d.ttl/time.Second)))
	if err != nil {
		return nil, err
	}
	defer sess.Close()
	octx, cancel := context.WithCancel(d.ctx)
	defer cancel()
	obs := concurrency.NewElection(sess, d.prefix).Observe(octx)
	leader := ""
	await := func(ok func(string) bool) (time.Time, error) {
		if ok(leader) {
			return time.Now(), nil
		}
		t := time.NewTimer(d.ttl + waitLimit)
		defer t.Stop()
		for {
			select {
			case resp, open := <-obs:
				if !open {
					return time.Time{}, errors.New("the observer stopped")
				}
				at := time.Now()
				if len(resp.Kvs) > 0 {
					leader = string(resp.Kvs[0].Value)
				}
				if ok(leader) {
					return at, nil
				}
			case <-t.C:
				return time.Time{}, errors.New("no new leader in time")
			case <-d.ctx.Done():
				return time.Time{}, d.ctx.Err()
			}
		}
	}
	for i := range n {
		if err := d.start(fmt.Sprintf("cand-%d", i+1)); err != nil {
			return nil, err
		}
		if err := d.waitCount(int64(i + 1)); err != nil {
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
			time.Sleep(rand.N(d.ttl / 3)) // a random phase of the keep-alive interval
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
		samples = append(samples, float64(at.Sub(t0).Microseconds())/1000)
		progress("%s round %d/%d: %.2f ms", kind, r+1, rounds, samples[r])
		<-d.exited[old]
		delete(d.procs, old)
		// The dead candidate's key is gone (deleted, or its lease expired):
		// start it again, at the back.
		if err := d.waitCount(int64(n - 1)); err != nil {
			return nil, err
		}
		if err := d.start(old); err != nil {
			return nil, err
		}
		if err := d.waitCount(int64(n)); err != nil {
			return nil, err
		}
	}
	return samples, nil
}

// runCandidate is one candidate process: it campaigns; on SIGTERM, it
// resigns if it leads (else withdraws) and exits.
func runCandidate(args []string) error {
	fs := flag.NewFlagSet("candidate", flag.ContinueOnError)
	eps := fs.String("endpoints", "", "")
	prefix := fs.String("prefix", "", "")
	name := fs.String("name", "", "")
	ttl := fs.Duration("ttl", 3*time.Second, "")
	if err := fs.Parse(args); err != nil {
		os.Exit(2)
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM, os.Interrupt)
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(*eps, ","), DialTimeout: 5 * time.Second})
	if err != nil {
		return err
	}
	defer cli.Close()
	sess, err := concurrency.NewSession(cli, concurrency.WithTTL(int(*ttl/time.Second)))
	if err != nil {
		return err
	}
	el := concurrency.NewElection(sess, *prefix)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	won := make(chan error, 1)
	go func() { won <- el.Campaign(ctx, *name) }()
	select {
	case <-term:
		cancel()
		sess.Close()
		return nil
	case err := <-won:
		if err != nil {
			return err
		}
	}
	<-term
	if err := el.Resign(context.Background()); err != nil {
		return err
	}
	_ = sess.Orphan // the resigned key is gone; the session's lease may lapse
	return nil
}
