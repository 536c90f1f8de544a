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
// module never depends on etcd; what the peers share (the command line,
// the rounds, the candidate processes, the output) is bench/peerkit's.
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.etcd.io/etcd/server/v3/embed"

	"github.com/krabka/krole/bench/peerkit"
)

const name = "etcd-election-bench"

func main() {
	peerkit.Main(name, "failover|handover|acquire [--members N] [--rounds R] [--ttl D] [--with-session] [-o json] [--endpoints URLS]",
		runDriver, runCandidate)
}

func runDriver(kind string, args []string) error {
	f := peerkit.NewFlags(name, kind, "the session TTL (whole seconds); keep-alives every TTL/3",
		"acquire: time NewSession (its lease grant) with the Campaign, as krole's acquire times its member session's start with the campaign")
	endpoints := f.String("endpoints", "", "an etcd cluster's client URLs, comma-separated (default: an embedded server)")
	f.Parse(args, "--members >= 2, --rounds >= 1, --ttl whole seconds >= 1s, -o table|json",
		func() bool { return f.TTL >= time.Second && f.TTL%time.Second == 0 })
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
	d := &driver{ctx: ctx, cli: cli, eps: eps, ttl: f.TTL, prefix: "/bench-" + kind + "/" + peerkit.RunID()}
	settings := f.Settings()
	settings["keepalive_interval"] = (f.TTL / 3).String()
	settings["cluster"] = cluster
	settings["etcd"] = "v3.7 (server/v3/embed, client/v3/concurrency)"
	var samples []float64
	if kind == "acquire" {
		samples, err = peerkit.Acquire(ctx, f.Rounds, func(r int) (time.Duration, error) { return d.acquire(r, f.WithSession) })
	} else {
		samples, err = d.succession(kind, f.Members, f.Rounds)
	}
	if err != nil {
		return err
	}
	return f.Report("etcd", samples, settings)
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
	case <-time.After(peerkit.WaitLimit):
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
}

// acquire: each round a fresh session (its lease granted before the clock
// starts) campaigns on a fresh election; the sample is the Campaign call.
func (d *driver) acquire(r int, withSession bool) (time.Duration, error) {
	t0 := time.Now()
	sess, err := concurrency.NewSession(d.cli, concurrency.WithTTL(int(d.ttl/time.Second)))
	if err != nil {
		return 0, err
	}
	defer sess.Close()
	el := concurrency.NewElection(sess, fmt.Sprintf("%s/%d", d.prefix, r))
	if !withSession {
		t0 = time.Now()
	}
	if err := el.Campaign(d.ctx, "acquirer"); err != nil {
		return 0, err
	}
	took := time.Since(t0)
	_ = el.Resign(d.ctx)
	return took, nil
}

// succession runs failover and handover rounds; the leader is who this
// process's Observe of the election shows.
func (d *driver) succession(kind string, n, rounds int) ([]float64, error) {
	sess, err := concurrency.NewSession(d.cli, concurrency.WithTTL(int(d.ttl/time.Second)))
	if err != nil {
		return nil, err
	}
	defer sess.Close()
	octx, cancel := context.WithCancel(d.ctx)
	defer cancel()
	obs := concurrency.NewElection(sess, d.prefix).Observe(octx)
	events := make(chan peerkit.Event)
	go func() {
		defer close(events)
		for resp := range obs {
			if len(resp.Kvs) == 0 {
				continue
			}
			select {
			case events <- peerkit.Event{Name: string(resp.Kvs[0].Value), Leads: true, At: time.Now()}:
			case <-octx.Done():
				return
			}
		}
	}()
	s := &peerkit.Succession{Kind: kind, Members: n, Rounds: rounds, TTL: d.ttl,
		Args: []string{"--endpoints", d.eps, "--prefix", d.prefix}, Events: events,
		Holds: func(want int) (bool, string, error) {
			// Each candidate's key is under the election's prefix.
			resp, err := d.cli.Get(d.ctx, d.prefix+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
			if err != nil {
				return false, "", err
			}
			return resp.Count == int64(want), fmt.Sprint(resp.Count), nil
		}}
	return s.Run(d.ctx)
}

// runCandidate is one candidate process: it campaigns; on SIGTERM, it
// resigns if it leads (else withdraws) and exits.
func runCandidate(args []string) error {
	f := peerkit.NewCandidateFlags()
	eps := f.String("endpoints", "", "")
	prefix := f.String("prefix", "", "")
	term := f.Parse(args)
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(*eps, ","), DialTimeout: 5 * time.Second})
	if err != nil {
		return err
	}
	defer cli.Close()
	sess, err := concurrency.NewSession(cli, concurrency.WithTTL(int(f.TTL/time.Second)))
	if err != nil {
		return err
	}
	el := concurrency.NewElection(sess, *prefix)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	won := make(chan error, 1)
	go func() { won <- el.Campaign(ctx, f.Name) }()
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
