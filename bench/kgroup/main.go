// Command kgroup-election-bench is krole bench's Kafka consumer group
// peer: the scenarios of the etcd peer (bench/) on a consumer group used
// as an election. The topic has one partition; each candidate is a
// franz-go (kgo) consumer in one group, with the classic protocol
// (JoinGroup/SyncGroup) and the cooperative-sticky balancer, so the
// partition stays where it is while members come and go; the candidate
// assigned the partition leads. The session timeout is the lease (--ttl);
// candidates heartbeat every ttl/3. Candidates are separate processes of
// this binary (its hidden "candidate" mode); each prints a line when it is
// assigned the partition.
//
//	kgroup-election-bench failover --members N --rounds R --ttl D   SIGKILL the leader's process: no LeaveGroup
//	kgroup-election-bench handover --members N --rounds R --ttl D   SIGTERM it: it closes its client, which leaves the group
//	kgroup-election-bench acquire --rounds R --ttl D                a member of a connected client joins an empty group
//	  (--with-session: the client's creation and first connection too)
//
// Without --brokers it runs an embedded cluster (kfake) in this process.
// Times run from the signal (or the join's start) to the line of the
// candidate now assigned, as this process reads it. -o json prints the
// format of krole bench (package github.com/krabka/krole/internal/chart).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/krabka/krole/internal/chart"
)

const (
	name      = "kgroup-election-bench"
	waitLimit = 60 * time.Second
	// versions are those of go.mod.
	franzGo = "franz-go v1.22.3"
	kfakeV  = "kfake v0.0.0-20260918054303-01f206a7e32c"
)

// kfakeNote is where the embedded cluster's group coordinator differs
// from Apache Kafka's, for the figures.
const kfakeNote = "kfake completes a rebalance as soon as every member has rejoined, as Apache Kafka does, " +
	"but completes the first join into an empty group at once, where Apache Kafka waits " +
	"group.initial.rebalance.delay.ms (3 s by default, 0 in its sample server.properties) for more members; " +
	"Apache Kafka refuses session timeouts below group.min.session.timeout.ms (6 s by default), kfake here allows 100 ms"

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
	fmt.Fprintln(os.Stderr, "usage: "+name+" failover|handover|acquire [--members N] [--rounds R] [--ttl D] [--with-session] [--brokers HOST:PORT,...] [--label L] [-o json]")
	os.Exit(2)
}

// groupOpts are a candidate's group settings.
func groupOpts(group string, ttl time.Duration) []kgo.Opt {
	return []kgo.Opt{
		kgo.ConsumerGroup(group),
		kgo.SessionTimeout(ttl),
		kgo.HeartbeatInterval(ttl / 3),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.DisableAutoCommit(),
	}
}

func runDriver(kind string, args []string) error {
	fs := flag.NewFlagSet(kind, flag.ContinueOnError)
	members := fs.Int("members", 3, "candidate processes")
	rounds := fs.Int("rounds", 20, "rounds")
	ttl := fs.Duration("ttl", 3*time.Second, "the group session timeout; heartbeats every ttl/3")
	output := fs.String("o", "table", "table or json")
	brokers := fs.String("brokers", "", "a Kafka cluster's HOST:PORT list, comma-separated (default: an embedded kfake cluster)")
	label := fs.String("label", "", "the run's label in charts")
	withSession := fs.Bool("with-session", false, "acquire: time the client's creation and first connection with the join")
	if err := fs.Parse(args); err != nil {
		os.Exit(2)
	}
	if *members < 2 || *rounds < 1 || *ttl < 300*time.Millisecond || (*output != "table" && *output != "json") {
		fmt.Fprintln(os.Stderr, name+": --members >= 2, --rounds >= 1, --ttl >= 300ms, -o table|json")
		os.Exit(2)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	settings := map[string]any{"ttl": ttl.String(), "session_timeout": ttl.String(), "heartbeat_interval": (*ttl / 3).String(),
		"signal_phase":      "random within the heartbeat interval (handover and failover)",
		"rebalance_timeout": "60s (kgo's default)", "rounds": *rounds, "client": franzGo,
		"protocol": "classic (JoinGroup/SyncGroup), cooperative-sticky balancer, one partition"}
	eps := *brokers
	if eps == "" {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(100*time.Millisecond),
			kfake.ListenFn(func(network, _ string) (net.Listener, error) { return net.Listen(network, "127.0.0.1:0") }))
		if err != nil {
			return err
		}
		defer c.Close()
		eps = strings.Join(c.ListenAddrs(), ",")
		settings["cluster"] = "embedded (" + kfakeV + ", one broker, in the bench process) " + eps
		settings["kfake_vs_kafka"] = kfakeNote
	} else {
		settings["cluster"] = eps
	}
	if *output == "table" {
		fmt.Println("cluster:", settings["cluster"])
	}
	admin, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(eps, ",")...))
	if err != nil {
		return err
	}
	defer admin.Close()
	run := fmt.Sprintf("%x", time.Now().UnixNano()&0xffffffffff)
	d := &driver{ctx: ctx, admin: admin, brokers: eps, ttl: *ttl, topic: "krole-bench-" + kind + "-" + run,
		group: "krole-bench-" + kind + "-" + run, procs: map[string]*exec.Cmd{}, exited: map[string]chan struct{}{},
		events: make(chan event, 16)}
	if err := d.createTopic(); err != nil {
		return err
	}
	defer d.cleanUp()
	var samples []float64
	if kind == "acquire" {
		settings["with_session"] = *withSession
		samples, err = d.acquire(*rounds, *withSession)
	} else {
		settings["members"] = *members
		settings["signal_phase"] = "random within the heartbeat interval"
		samples, err = d.succession(kind, *members, *rounds)
		d.stopAll()
	}
	fmt.Fprintln(os.Stderr)
	if err != nil {
		return err
	}
	res := chart.Result{Kind: kind, System: "consumer group", Label: *label, SamplesMS: samples, Settings: settings}
	res.Stats = chart.Summarize(res.SamplesMS)
	if *output == "json" {
		return json.NewEncoder(os.Stdout).Encode(res)
	}
	chart.WriteText(os.Stdout, res)
	return nil
}

// event is a candidate's line: "leader" when it is assigned the
// partition, "follower" when it loses it.
type event struct {
	name, what string
	at         time.Time
}

type driver struct {
	ctx     context.Context
	admin   *kgo.Client
	brokers string
	ttl     time.Duration
	topic   string
	group   string
	procs   map[string]*exec.Cmd
	exited  map[string]chan struct{}
	events  chan event
	// groupsUsed are the groups to delete at the end.
	groupsUsed []string
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "\r%-70s", fmt.Sprintf(format, args...))
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// createTopic creates the run's one-partition topic.
func (d *driver) createTopic() error {
	req := kmsg.NewPtrCreateTopicsRequest()
	t := kmsg.NewCreateTopicsRequestTopic()
	t.Topic, t.NumPartitions, t.ReplicationFactor = d.topic, 1, -1
	req.Topics = append(req.Topics, t)
	req.TimeoutMillis = int32(waitLimit.Milliseconds())
	resp, err := req.RequestWith(d.ctx, d.admin)
	if err != nil {
		return fmt.Errorf("create topic %s: %w", d.topic, err)
	}
	if err := kerr.ErrorForCode(resp.Topics[0].ErrorCode); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("create topic %s: %w", d.topic, err)
	}
	return nil
}

// cleanUp deletes the run's topic and groups (best effort; on an
// embedded cluster they go with it).
func (d *driver) cleanUp() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	dg := kmsg.NewPtrDeleteGroupsRequest()
	dg.Groups = d.groupsUsed
	_, _ = dg.RequestWith(ctx, d.admin)
	dt := kmsg.NewPtrDeleteTopicsRequest()
	t := kmsg.NewDeleteTopicsRequestTopic()
	t.Topic = kmsg.StringPtr(d.topic)
	dt.Topics, dt.TopicNames = append(dt.Topics, t), []string{d.topic}
	_, _ = dt.RequestWith(ctx, d.admin)
}

// acquire: each round a member joins a group of its own, empty, on a
// client whose connections to the cluster are open (a metadata request
// answered) before the clock starts (withSession: the client is created
// after). The sample runs to the assignment of the partition: a metadata
// request, FindCoordinator, JoinGroup twice (the first returns the member
// id), SyncGroup.
func (d *driver) acquire(rounds int, withSession bool) ([]float64, error) {
	var samples []float64
	for r := range rounds {
		group := fmt.Sprintf("%s-%d", d.group, r)
		d.groupsUsed = append(d.groupsUsed, group)
		assigned := make(chan struct{}, 1)
		opts := append(groupOpts(group, d.ttl), kgo.SeedBrokers(strings.Split(d.brokers, ",")...),
			kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, added map[string][]int32) {
				if len(added[d.topic]) > 0 {
					select {
					case assigned <- struct{}{}:
					default:
					}
				}
			}))
		t0 := time.Now()
		if withSession {
			opts = append(opts, kgo.ConsumeTopics(d.topic))
		}
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			return nil, err
		}
		if !withSession {
			if err := cl.Ping(d.ctx); err != nil {
				cl.Close()
				return nil, err
			}
			t0 = time.Now()
			cl.AddConsumeTopics(d.topic)
		}
		select {
		case <-assigned:
		case <-time.After(waitLimit):
			cl.Close()
			return nil, fmt.Errorf("no assignment within %v", waitLimit)
		case <-d.ctx.Done():
			cl.Close()
			return nil, d.ctx.Err()
		}
		samples = append(samples, ms(time.Since(t0)))
		progress("acquire round %d/%d: %.2f ms", r+1, rounds, samples[r])
		cl.Close()
	}
	return samples, nil
}

// start runs candidate cand as a process; its lines go to d.events with
// the time they are read.
func (d *driver) start(cand string) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(exe, "candidate", "--brokers", d.brokers, "--topic", d.topic, "--group", d.group, "--name", cand, "--ttl", d.ttl.String())
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
			d.events <- event{cand, sc.Text(), time.Now()}
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

// waitStable waits until the group is stable with n members.
func (d *driver) waitStable(n int) error {
	deadline := time.Now().Add(d.ttl + waitLimit)
	state, have := "", 0
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
		req := kmsg.NewPtrDescribeGroupsRequest()
		req.Groups = []string{d.group}
		resp, err := req.RequestWith(d.ctx, d.admin)
		if err != nil {
			return err
		}
		if len(resp.Groups) == 1 && resp.Groups[0].ErrorCode == 0 {
			state, have = resp.Groups[0].State, len(resp.Groups[0].Members)
			if state == "Stable" && have == n {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("waited for a stable group of %d members, have %d (%s)", n, have, state)
		}
		select {
		case <-d.ctx.Done():
			return d.ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// succession runs failover and handover rounds.
func (d *driver) succession(kind string, n, rounds int) ([]float64, error) {
	d.groupsUsed = []string{d.group}
	leader := ""
	await := func(ok func(string) bool) (time.Time, error) {
		if ok(leader) {
			return time.Now(), nil
		}
		t := time.NewTimer(d.ttl + waitLimit)
		defer t.Stop()
		for {
			select {
			case e := <-d.events:
				switch {
				case e.what == "leader":
					leader = e.name
				case e.what == "follower" && e.name == leader:
					leader = ""
				}
				if ok(leader) {
					return e.at, nil
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
		if err := d.waitStable(i + 1); err != nil {
			return nil, err
		}
	}
	var samples []float64
	for r := range rounds {
		if _, err := await(func(l string) bool { return d.procs[l] != nil }); err != nil {
			return nil, err
		}
		// A random phase of the heartbeat interval, in both kinds: the
		// other members learn of a rebalance from their next heartbeat,
		// and they all heartbeat in step, 500 ms after a rebalance (kgo's
		// check for cooperative groups) and every ttl/3 from then on.
		time.Sleep(rand.N(d.ttl / 3))
		sig := syscall.SIGTERM
		if kind == "failover" {
			sig = syscall.SIGKILL
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
		// The old leader is out of the group (it left, or its session
		// expired): start it again, at the back.
		if err := d.waitStable(n - 1); err != nil {
			return nil, err
		}
		if err := d.start(old); err != nil {
			return nil, err
		}
		if err := d.waitStable(n); err != nil {
			return nil, err
		}
	}
	return samples, nil
}

// runCandidate is one candidate process: a consumer in the group that
// prints "leader" when it is assigned the partition and "follower" when
// it loses it; on SIGTERM it closes its client, which leaves the group,
// and exits.
func runCandidate(args []string) error {
	fs := flag.NewFlagSet("candidate", flag.ContinueOnError)
	brokers := fs.String("brokers", "", "")
	topic := fs.String("topic", "", "")
	group := fs.String("group", "", "")
	id := fs.String("name", "", "")
	ttl := fs.Duration("ttl", 3*time.Second, "")
	if err := fs.Parse(args); err != nil {
		os.Exit(2)
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM, os.Interrupt)
	lost := func(_ context.Context, _ *kgo.Client, gone map[string][]int32) {
		if len(gone[*topic]) > 0 {
			fmt.Println("follower")
		}
	}
	opts := append(groupOpts(*group, *ttl), kgo.SeedBrokers(strings.Split(*brokers, ",")...),
		kgo.ClientID(*id), kgo.ConsumeTopics(*topic),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, added map[string][]int32) {
			if len(added[*topic]) > 0 {
				fmt.Println("leader")
			}
		}),
		kgo.OnPartitionsRevoked(lost), kgo.OnPartitionsLost(lost), kgo.WithHooks(manageErrors{*ttl}))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	<-term
	cl.Close()
	return nil
}

// manageErrors reports the errors of the client's group management: a
// session timeout the broker refuses ends the candidate; kgo retries the
// others.
type manageErrors struct{ ttl time.Duration }

func (m manageErrors) OnGroupManageError(err error) {
	if errors.Is(err, kerr.InvalidSessionTimeout) {
		fmt.Fprintf(os.Stderr, "%s: the broker refuses a group session timeout of %v: its group.min.session.timeout.ms is higher (6 s by default)\n", name, m.ttl)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "%s: candidate: group management: %v\n", name, err)
}
