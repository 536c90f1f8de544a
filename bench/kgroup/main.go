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
//	kgroup-election-bench balance --members M --partitions K --ttl D   the group as a shard manager (balance.go)
//
// balance is not an election: M consumers in this process (one kgo
// client each) share a topic of K partitions, and it times the group
// start, a member's join, its leave (LeaveGroup) and its death (its
// connections cut: the coordinator expires it), from the members'
// assignment callbacks.
//
// Without --brokers it runs an embedded cluster (kfake) in this process.
// Times run from the signal (or the join's start) to the line of the
// candidate now assigned, as this process reads it. -o json prints the
// format of krole bench (package github.com/krabka/krole/internal/chart).
// What the peers share (the command line, the rounds, the candidate
// processes, the output) is bench/peerkit's.
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/krabka/krole/bench/peerkit"
)

const (
	name      = "kgroup-election-bench"
	waitLimit = peerkit.WaitLimit
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
	if len(os.Args) > 1 && os.Args[1] == "balance" {
		// balance is this peer's own: peerkit's modes are the elections'.
		if err := runBalance(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, name+":", err)
			os.Exit(1)
		}
		return
	}
	peerkit.Main(name, "failover|handover|acquire [--members N] [--rounds R] [--ttl D] [--with-session] [--brokers HOST:PORT,...] [--label L] [-o json]\n"+
		"       "+name+" "+balanceUsage, runDriver, runCandidate)
}

// newKfake starts the embedded cluster: one kfake broker on the loopback
// interface that allows session timeouts down to 100 ms.
func newKfake() (*kfake.Cluster, error) {
	return kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(100*time.Millisecond),
		kfake.ListenFn(func(network, _ string) (net.Listener, error) { return net.Listen(network, "127.0.0.1:0") }))
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
	f := peerkit.NewFlags(name, kind, "the group session timeout; heartbeats every ttl/3",
		"acquire: time the client's creation and first connection with the join")
	brokers := f.String("brokers", "", "a Kafka cluster's HOST:PORT list, comma-separated (default: an embedded kfake cluster)")
	f.Parse(args, "--members >= 2, --rounds >= 1, --ttl >= 300ms, -o table|json",
		func() bool { return f.TTL >= 300*time.Millisecond })
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	settings := f.Settings()
	settings["session_timeout"] = f.TTL.String()
	settings["heartbeat_interval"] = (f.TTL / 3).String()
	settings["rebalance_timeout"] = "60s (kgo's default)"
	settings["client"] = franzGo
	settings["protocol"] = "classic (JoinGroup/SyncGroup), cooperative-sticky balancer, one partition"
	eps := *brokers
	if eps == "" {
		c, err := newKfake()
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
	if f.Output == "table" {
		fmt.Println("cluster:", settings["cluster"])
	}
	admin, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(eps, ",")...))
	if err != nil {
		return err
	}
	defer admin.Close()
	run := peerkit.RunID()
	d := &driver{ctx: ctx, admin: admin, brokers: eps, ttl: f.TTL, topic: "krole-bench-" + kind + "-" + run,
		group: "krole-bench-" + kind + "-" + run}
	if err := d.createTopic(1); err != nil {
		return err
	}
	defer d.cleanUp()
	var samples []float64
	if kind == "acquire" {
		settings["signal_phase"] = "random within the heartbeat interval (handover and failover)"
		samples, err = peerkit.Acquire(ctx, f.Rounds, func(r int) (time.Duration, error) { return d.acquire(r, f.WithSession) })
	} else {
		settings["signal_phase"] = "random within the heartbeat interval"
		d.groupsUsed = []string{d.group}
		// A random phase of the heartbeat interval, in both kinds: the
		// other members learn of a rebalance from their next heartbeat,
		// and they all heartbeat in step, 500 ms after a rebalance (kgo's
		// check for cooperative groups) and every ttl/3 from then on.
		s := &peerkit.Succession{Kind: kind, Members: f.Members, Rounds: f.Rounds, TTL: f.TTL, PhaseInHandover: true,
			Args: []string{"--brokers", d.brokers, "--topic", d.topic, "--group", d.group}, Holds: d.stable}
		samples, err = s.Run(ctx)
	}
	if err != nil {
		return err
	}
	return f.Report("consumer group", samples, settings)
}

type driver struct {
	ctx     context.Context
	admin   *kgo.Client
	brokers string
	ttl     time.Duration
	topic   string
	group   string
	// groupsUsed are the groups to delete at the end.
	groupsUsed []string
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
func (d *driver) acquire(r int, withSession bool) (time.Duration, error) {
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
		return 0, err
	}
	defer cl.Close()
	if !withSession {
		if err := cl.Ping(d.ctx); err != nil {
			return 0, err
		}
		t0 = time.Now()
		cl.AddConsumeTopics(d.topic)
	}
	select {
	case <-assigned:
		return time.Since(t0), nil
	case <-time.After(waitLimit):
		return 0, fmt.Errorf("no assignment within %v", waitLimit)
	case <-d.ctx.Done():
		return 0, d.ctx.Err()
	}
}

// stable says whether the group is stable with n members.
func (d *driver) stable(n int) (bool, string, error) {
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Groups = []string{d.group}
	resp, err := req.RequestWith(d.ctx, d.admin)
	if err != nil {
		return false, "", err
	}
	if len(resp.Groups) != 1 || resp.Groups[0].ErrorCode != 0 {
		return false, "no group described", nil
	}
	g := resp.Groups[0]
	return g.State == "Stable" && len(g.Members) == n, fmt.Sprintf("%d (%s)", len(g.Members), g.State), nil
}

// runCandidate is one candidate process: a consumer in the group that
// prints "leader" when it is assigned the partition and "follower" when
// it loses it; on SIGTERM it closes its client, which leaves the group,
// and exits.
func runCandidate(args []string) error {
	f := peerkit.NewCandidateFlags()
	brokers := f.String("brokers", "", "")
	topic := f.String("topic", "", "")
	group := f.String("group", "", "")
	term := f.Parse(args)
	lost := func(_ context.Context, _ *kgo.Client, gone map[string][]int32) {
		if len(gone[*topic]) > 0 {
			fmt.Println(peerkit.FollowerLine)
		}
	}
	opts := append(groupOpts(*group, f.TTL), kgo.SeedBrokers(strings.Split(*brokers, ",")...),
		kgo.ClientID(f.Name), kgo.ConsumeTopics(*topic),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, added map[string][]int32) {
			if len(added[*topic]) > 0 {
				fmt.Println(peerkit.LeaderLine)
			}
		}),
		kgo.OnPartitionsRevoked(lost), kgo.OnPartitionsLost(lost), kgo.WithHooks(manageErrors{f.TTL}))
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
