package main

// The balance scenario: the consumer group as a shard manager. A topic of
// K partitions; M consumers (in this process, one kgo client each) in one
// group with the cooperative-sticky balancer share them. It times how the
// group spreads the partitions when its members start, when one joins,
// leaves (LeaveGroup) or dies (no LeaveGroup: the coordinator expires it
// after the session timeout), as the members' own callbacks
// (OnPartitionsAssigned, OnPartitionsRevoked, OnPartitionsLost) see it.

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/krabka/krole/bench/peerkit"
	"github.com/krabka/krole/internal/chart"
)

const balanceUsage = "balance [--members M] [--partitions K] [--ttl D] [--pause D] [--brokers HOST:PORT,...] [--label L] [-o json]"

// balanceNote says how kfake's group coordinator differs from Apache
// Kafka's for this scenario, beyond kfakeNote.
const balanceNote = "; kfake runs the coordinator on one event loop in the bench process, beside the consumers, on loopback, " +
	"and keeps the group in memory, where Apache Kafka answers SyncGroup once the assignment is written to __consumer_offsets " +
	"(and replicated): the rebalances here lack that write and any network"

// balanceConfig is a balance run's command line.
type balanceConfig struct {
	members, partitions int
	ttl, pause          time.Duration
	brokers             string
	output, label       string
}

func runBalance(args []string) error {
	var c balanceConfig
	f := flag.NewFlagSet("balance", flag.ContinueOnError)
	f.IntVar(&c.members, "members", 10, "consumers that start the group (one more joins)")
	f.IntVar(&c.partitions, "partitions", 1000, "the topic's partitions")
	f.DurationVar(&c.ttl, "ttl", 3*time.Second, "the group session timeout; heartbeats every ttl/3")
	f.DurationVar(&c.pause, "pause", 100*time.Millisecond, "between two members' starts")
	f.StringVar(&c.brokers, "brokers", "", "a Kafka cluster's HOST:PORT list, comma-separated (default: an embedded kfake cluster)")
	f.StringVar(&c.output, "o", "table", "table or json")
	f.StringVar(&c.label, "label", "", "the run's label in charts (each scenario's name follows it)")
	if err := f.Parse(args); err != nil {
		os.Exit(2)
	}
	if c.members < 2 || c.partitions < 1 || c.ttl < 300*time.Millisecond || c.pause < 0 || (c.output != "table" && c.output != "json") {
		fmt.Fprintln(os.Stderr, name+": --members >= 2, --partitions >= 1, --ttl >= 300ms, --pause >= 0, -o table|json")
		os.Exit(2)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	results, err := balance(ctx, c, os.Stderr)
	if err != nil {
		return err
	}
	if c.output == "json" {
		enc := json.NewEncoder(os.Stdout)
		for _, r := range results {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
		return nil
	}
	writeBalanceTable(results)
	return nil
}

// balance runs the four scenarios on the cluster of c (an embedded one
// without --brokers) and returns their results, in the order they ran:
// group start, group join, group leave, group kill. It shows its
// progress on progress.
func balance(ctx context.Context, c balanceConfig, progress *os.File) ([]chart.Result, error) {
	settings := map[string]any{
		"members":            c.members,
		"partitions":         c.partitions,
		"ttl":                c.ttl.String(),
		"session_timeout":    c.ttl.String(),
		"heartbeat_interval": (c.ttl / 3).String(),
		"rebalance_timeout":  "60s (kgo's default)",
		"client":             franzGo,
		"protocol":           "classic (JoinGroup/SyncGroup), cooperative-sticky balancer",
		"consumers":          "in the bench process, one kgo client (and its connections) each",
		"pause":              c.pause.String(),
		"balanced":           "every partition assigned to exactly one live member, and the most any member holds <= max(ceil(K/n), 1.05 K/n)",
		"samples": "group start: the time from the last member's start (the members start --pause apart) to a balanced assignment; " +
			"join, leave, kill: each partition that changed hands, the time it had no owner " +
			"(from its revoke, or kill: from the kill, to its next assign)",
		"rounds": "balanced_ms: from the scenario's start to a balanced assignment; " +
			"owned_ms (leave, kill): to the last of the departed member's partitions assigned again; " +
			"moved: partitions revoked from (or lost by) one member and assigned to another; " +
			"moved_share (join): ceil(K/(M+1)), the new member's share rounded up (balance needs at least floor(K/(M+1)) moved); subject_partitions: the departed member's; other_moved: moved, not the departed member's; " +
			"overlaps: assignments of a partition another member still held",
	}
	eps := c.brokers
	if eps == "" {
		cl, err := newKfake()
		if err != nil {
			return nil, err
		}
		defer cl.Close()
		eps = strings.Join(cl.ListenAddrs(), ",")
		settings["cluster"] = "embedded (" + kfakeV + ", one broker, in the bench process) " + eps
		settings["kfake_vs_kafka"] = kfakeNote + balanceNote
	} else {
		settings["cluster"] = eps
	}
	fmt.Fprintln(progress, "cluster:", settings["cluster"])
	admin, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(eps, ",")...))
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	run := peerkit.RunID()
	d := &driver{ctx: ctx, admin: admin, brokers: eps, ttl: c.ttl, topic: "krole-bench-balance-" + run,
		group: "krole-bench-balance-" + run}
	d.groupsUsed = []string{d.group}
	if err := d.createTopic(int32(c.partitions)); err != nil {
		return nil, err
	}
	defer d.cleanUp()
	b := &balancer{d: d, t: newTracker(c.partitions), fatal: make(chan error, 1)}
	defer b.closeAll()

	result := func(kind string, samples []float64, round map[string]float64) chart.Result {
		r := chart.Result{Kind: kind, System: "consumer group", SamplesMS: samples, Settings: settings,
			Rounds: []map[string]float64{round}}
		if c.label != "" {
			r.Label = c.label + " " + kind
		}
		r.Stats = chart.Summarize(r.SamplesMS)
		return r
	}
	var results []chart.Result

	// start: the members start one after another, --pause apart.
	fmt.Fprintf(progress, "group start: %d members, %d partitions\n", c.members, c.partitions)
	b.t.phase(-1)
	var t0 time.Time
	for i := range c.members {
		if i > 0 {
			if err := sleepCtx(ctx, c.pause); err != nil {
				return nil, err
			}
		}
		if err := b.start(); err != nil {
			return nil, err
		}
		t0 = time.Now()
	}
	ph, err := b.settle(c.members, t0)
	if err != nil {
		return nil, fmt.Errorf("group start: %w", err)
	}
	results = append(results, result("group start", []float64{ms(ph.balancedAt.Sub(t0))}, ph.round(t0, c.members, c.partitions)))

	// join: one more.
	fmt.Fprintln(progress, "group join: one more member")
	b.t.phase(-1)
	t0 = time.Now()
	if err := b.start(); err != nil {
		return nil, err
	}
	ph, err = b.settle(c.members+1, t0)
	if err != nil {
		return nil, fmt.Errorf("group join: %w", err)
	}
	round := ph.round(t0, c.members+1, c.partitions)
	round["moved_share"] = math.Ceil(float64(c.partitions) / float64(c.members+1))
	results = append(results, result("group join", ph.unowned, round))

	// leave: member 0 closes its client, which leaves the group.
	fmt.Fprintln(progress, "group leave: a member closes its client (LeaveGroup)")
	leaver := 0
	b.t.phase(leaver)
	t0 = time.Now()
	b.leave(leaver)
	ph, err = b.settle(c.members, t0)
	if err != nil {
		return nil, fmt.Errorf("group leave: %w", err)
	}
	results = append(results, result("group leave", ph.unowned, ph.round(t0, c.members, c.partitions)))

	// kill: member 1's connections are cut, at a random phase of its
	// heartbeats; the coordinator expires it after the session timeout.
	fmt.Fprintln(progress, "group kill: a member's connections are cut (no LeaveGroup)")
	victim := 1
	if err := sleepCtx(ctx, rand.N(c.ttl/3)); err != nil {
		return nil, err
	}
	b.t.phase(victim)
	t0 = time.Now()
	b.kill(victim, t0)
	ph, err = b.settle(c.members-1, t0)
	if err != nil {
		return nil, fmt.Errorf("group kill: %w", err)
	}
	results = append(results, result("group kill", ph.unowned, ph.round(t0, c.members-1, c.partitions)))
	return results, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// createTopic creates the run's topic with n partitions (1 but for a
// balance run).
func (d *driver) createTopic(n int32) error {
	req := kmsg.NewPtrCreateTopicsRequest()
	t := kmsg.NewCreateTopicsRequestTopic()
	t.Topic, t.NumPartitions, t.ReplicationFactor = d.topic, n, -1
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

// balancer holds the members of a balance run.
type balancer struct {
	d       *driver
	t       *tracker
	members []*member
	fatal   chan error
}

// A member is one consumer: its client and the dialer that can cut it
// off the cluster.
type member struct {
	cl   *kgo.Client
	cut  *cutter
	gone bool // closed or killed
}

// start starts member len(b.members) in the group.
func (b *balancer) start() error {
	m := len(b.members)
	cut := &cutter{}
	t := b.t
	opts := append(groupOpts(b.d.group, b.d.ttl), kgo.SeedBrokers(strings.Split(b.d.brokers, ",")...),
		kgo.ClientID(fmt.Sprintf("member-%d", m)), kgo.ConsumeTopics(b.d.topic), kgo.Dialer(cut.dial),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, added map[string][]int32) {
			t.assigned(m, added[b.d.topic], time.Now())
		}),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, gone map[string][]int32) {
			t.revoked(m, gone[b.d.topic], time.Now())
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, gone map[string][]int32) {
			t.revoked(m, gone[b.d.topic], time.Now())
		}),
		kgo.WithHooks(memberErrors{b, m}))
	t.join(m)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	b.members = append(b.members, &member{cl: cl, cut: cut})
	return nil
}

// leave closes member m's client, which revokes its partitions and
// leaves the group.
func (b *balancer) leave(m int) {
	b.t.leave(m)
	b.members[m].cl.Close()
	b.members[m].gone = true
	b.t.kill(m, time.Time{})
}

// kill cuts member m's connections at t0 and refuses it new ones: it
// neither heartbeats nor leaves.
func (b *balancer) kill(m int, t0 time.Time) {
	b.members[m].cut.cutAll()
	b.members[m].gone = true
	b.t.kill(m, t0)
}

// closeAll closes the members' clients, those in the group together; the
// killed ones' in the background, as they cannot reach the cluster.
func (b *balancer) closeAll() {
	var wg sync.WaitGroup
	for _, m := range b.members {
		if m.cut.isCut() {
			go m.cl.Close()
			continue
		}
		if !m.gone {
			wg.Go(m.cl.Close)
		}
	}
	wg.Wait()
}

// memberErrors ends the run on a session timeout the broker refuses and
// ignores the other errors of group management, which kgo retries (the
// killed member's are expected).
type memberErrors struct {
	b *balancer
	m int
}

func (h memberErrors) OnGroupManageError(err error) {
	if errors.Is(err, kerr.InvalidSessionTimeout) {
		select {
		case h.b.fatal <- fmt.Errorf("the broker refuses a group session timeout of %v: its group.min.session.timeout.ms is higher (6 s by default)", h.b.d.ttl):
		default:
		}
	}
}

// settle waits until the group holds n members, stable, its partitions
// balanced among them, and nothing changed for a quiet while (a
// cooperative member checks for a further rebalance 500 ms after one, and
// heartbeats every ttl/3), then returns the scenario's figures.
func (b *balancer) settle(n int, t0 time.Time) (*phaseResult, error) {
	quiet := 500*time.Millisecond + b.d.ttl/3 + 200*time.Millisecond
	deadline := time.Now().Add(b.d.ttl + waitLimit)
	for {
		select {
		case err := <-b.fatal:
			return nil, err
		case <-b.d.ctx.Done():
			return nil, b.d.ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
		ph, last := b.t.snapshot()
		if !ph.balancedAt.IsZero() && time.Since(last) >= quiet {
			ok, have, err := b.d.stable(n)
			if err != nil {
				return nil, err
			}
			if ok {
				return ph, nil
			}
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("waited for %d members, stable, have %s", n, have)
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("not balanced within %v: %s", time.Since(t0).Round(time.Millisecond), b.t.describe())
		}
	}
}

// A cutter dials a member's connections and can cut them all, for good.
type cutter struct {
	mu    sync.Mutex
	cut   bool
	conns []net.Conn
}

func (c *cutter) dial(ctx context.Context, network, host string) (net.Conn, error) {
	conn, err := (&net.Dialer{Timeout: 10 * time.Second}).DialContext(ctx, network, host)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cut {
		conn.Close()
		return nil, errors.New("cut off the cluster")
	}
	c.conns = append(c.conns, conn)
	return conn, nil
}

func (c *cutter) cutAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cut = true
	for _, conn := range c.conns {
		conn.Close()
	}
	c.conns = nil
}

func (c *cutter) isCut() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cut
}

// tracker is who owns each partition, as the members' callbacks say, and
// the current scenario's figures.
type tracker struct {
	mu    sync.Mutex
	owner []int // member, or -1
	// lastOwner is the partition's owner before it had none, or -1.
	lastOwner []int
	// freedAt is when the partition lost its owner (zero: it has one,
	// or never had).
	freedAt []time.Time
	live    map[int]bool // the members the partitions should spread over
	dead    map[int]bool // members whose callbacks no longer count
	last    time.Time    // the last callback's
	ph      phaseResult
}

// phaseResult are a scenario's figures.
type phaseResult struct {
	subject    int // the member leaving or killed, or -1
	balancedAt time.Time
	// ownedAt is when the last of the subject's partitions was assigned.
	ownedAt            time.Time
	subjectPartitions  int
	moved, otherMoved  int
	overlaps           int
	unowned            []float64
	ownedByLiveMembers bool
}

func newTracker(k int) *tracker {
	t := &tracker{owner: make([]int, k), lastOwner: make([]int, k), freedAt: make([]time.Time, k),
		live: map[int]bool{}, dead: map[int]bool{}}
	for p := range k {
		t.owner[p], t.lastOwner[p] = -1, -1
	}
	return t
}

// phase starts a scenario whose subject is member subject (-1: none).
func (t *tracker) phase(subject int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ph = phaseResult{subject: subject}
	if subject >= 0 {
		for _, o := range t.owner {
			if o == subject {
				t.ph.subjectPartitions++
			}
		}
	}
	t.check(time.Now())
}

func (t *tracker) join(m int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.live[m] = true
	t.check(time.Now())
}

// leave takes member m out of the members the partitions should spread
// over; its callbacks still count until kill.
func (t *tracker) leave(m int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.live, m)
	t.check(time.Now())
}

// kill ignores member m's callbacks from now on; the partitions it still
// holds lose their owner at t0 (zero: now).
func (t *tracker) kill(m int, t0 time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t0.IsZero() {
		t0 = time.Now()
	}
	delete(t.live, m)
	t.dead[m] = true
	for p, o := range t.owner {
		if o == m {
			t.owner[p], t.freedAt[p] = -1, t0
		}
	}
	t.check(t0)
}

func (t *tracker) assigned(m int, parts []int32, at time.Time) {
	t.update(m, parts, at, func(p int32) {
		prev := t.owner[p]
		if prev == m {
			return
		}
		from := t.lastOwner[p]
		if prev >= 0 {
			t.ph.overlaps++
			from = prev
		}
		if from >= 0 && from != m {
			t.ph.moved++
			if from != t.ph.subject {
				t.ph.otherMoved++
			} else if at.After(t.ph.ownedAt) {
				t.ph.ownedAt = at
			}
		}
		if !t.freedAt[p].IsZero() {
			t.ph.unowned = append(t.ph.unowned, ms(at.Sub(t.freedAt[p])))
			t.freedAt[p] = time.Time{}
		}
		t.owner[p], t.lastOwner[p] = m, m
	})
}

func (t *tracker) revoked(m int, parts []int32, at time.Time) {
	t.update(m, parts, at, func(p int32) {
		if t.owner[p] == m {
			t.owner[p], t.lastOwner[p], t.freedAt[p] = -1, m, at
		}
	})
}

// update applies fn to each of parts, partitions member m was assigned
// or had revoked at at, under the tracker's lock, and checks the phase;
// nothing for a member already dead.
func (t *tracker) update(m int, parts []int32, at time.Time, fn func(p int32)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.dead[m] {
		return
	}
	t.last = at
	for _, p := range parts {
		fn(p)
	}
	t.check(at)
}

// check notes at as the time the partitions became balanced, or that
// they are not.
func (t *tracker) check(at time.Time) {
	if !t.balanced() {
		t.ph.balancedAt = time.Time{}
		return
	}
	if t.ph.balancedAt.IsZero() {
		t.ph.balancedAt = at
	}
}

// balanced: every partition is owned by a live member, and the most any
// member owns is at most max(ceil(K/n), 1.05 K/n).
func (t *tracker) balanced() bool {
	n := len(t.live)
	if n == 0 {
		return false
	}
	counts := map[int]int{}
	for _, o := range t.owner {
		if o < 0 || !t.live[o] {
			return false
		}
		counts[o]++
	}
	most := 0
	for _, c := range counts {
		most = max(most, c)
	}
	k := float64(len(t.owner))
	return float64(most) <= max(math.Ceil(k/float64(n)), 1.05*k/float64(n))
}

// snapshot returns the current scenario's figures and the time of the
// last callback.
func (t *tracker) snapshot() (*phaseResult, time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ph := t.ph
	ph.unowned = slices.Clone(t.ph.unowned)
	last := t.last
	return &ph, last
}

// describe says how the partitions are spread now, for an error.
func (t *tracker) describe() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	counts := map[int]int{}
	for _, o := range t.owner {
		counts[o]++
	}
	return fmt.Sprintf("partitions per member (-1: none) %v, live members %d", counts, len(t.live))
}

// round is the scenario's figures from t0, with n members, of k
// partitions.
func (ph *phaseResult) round(t0 time.Time, n, k int) map[string]float64 {
	r := map[string]float64{
		"balanced_ms": ms(ph.balancedAt.Sub(t0)),
		"moved":       float64(ph.moved),
		"overlaps":    float64(ph.overlaps),
		"members":     float64(n),
		"partitions":  float64(k),
	}
	if ph.subject >= 0 {
		r["subject_partitions"] = float64(ph.subjectPartitions)
		r["other_moved"] = float64(ph.otherMoved)
		r["owned_ms"] = ms(ph.ownedAt.Sub(t0))
	}
	return r
}

func ms(d time.Duration) float64 { return chart.Round3(float64(d.Microseconds()) / 1000) }

// writeBalanceTable prints the results for people.
func writeBalanceTable(results []chart.Result) {
	fmt.Printf("%-12s %7s %11s %9s %7s %11s %10s %11s %8s  %s\n", "scenario", "members", "balanced ms", "owned ms",
		"moved", "ceil(K/n)", "departed's", "other moved", "overlaps", "unowned per moved partition p50 / p99 / max ms")
	for _, r := range results {
		rd := r.Rounds[0]
		opt := func(key, format string) string {
			v, ok := rd[key]
			if !ok {
				return "-"
			}
			return fmt.Sprintf(format, v)
		}
		unowned := "-"
		if r.Kind != "group start" && len(r.SamplesMS) > 0 {
			unowned = fmt.Sprintf("%.1f / %.1f / %.1f (n=%d)", r.MedianMS, r.P99MS, r.MaxMS, len(r.SamplesMS))
		}
		fmt.Printf("%-12s %7.0f %11.1f %9s %7.0f %11s %10s %11s %8.0f  %s\n", r.Kind, rd["members"], rd["balanced_ms"],
			opt("owned_ms", "%.1f"), rd["moved"], opt("moved_share", "%.0f"), opt("subject_partitions", "%.0f"),
			opt("other_moved", "%.0f"), rd["overlaps"], unowned)
	}
	s := results[0].Settings
	fmt.Printf("partitions %v, session timeout %v, heartbeat %v, %v\n", s["partitions"], s["session_timeout"], s["heartbeat_interval"], s["protocol"])
	if note, ok := s["kfake_vs_kafka"]; ok {
		fmt.Println("kfake vs Apache Kafka:", note)
	}
}
