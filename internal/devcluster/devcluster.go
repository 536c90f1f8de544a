// Package devcluster starts kfake, an embedded Kafka-protocol cluster, as
// real TCP servers. `krole dev` and the integration tests run against it.
//
// kfake speaks the Kafka protocol (transactions, read_committed fetches,
// DescribeTransactions, compaction settings) but it is a development
// cluster: one process, no replication to other machines, and no state
// kept across restarts unless Options.DataDir is set.
//
// Its timing differs from Apache Kafka's in one way that krole's settings
// depend on: kfake aborts a transaction when its timeout passes, while
// Apache Kafka aborts it only at its next periodic check
// (transaction.abort.timed.out.transaction.cleanup.interval.ms, default
// 10 s). Settings that pass against kfake may therefore be too tight for
// Apache Kafka (see package processor).
package devcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/krabka/krole/fencing"
)

// Options of [Start].
type Options struct {
	// Listen is host:port of the first broker; broker i listens on port+i.
	// Port 0 picks free ports. Default "127.0.0.1:0".
	Listen string
	// Nodes is the number of brokers. Default 1.
	Nodes int
	// DataDir, when set, keeps the cluster's state there across restarts.
	// Default "": in memory, lost on Close.
	DataDir string
	// Topic, when set, is created compacted (as a role topic) with
	// Partitions partitions and replication factor 1. Default "": none.
	Topic string
	// Partitions of Topic. Default 3.
	Partitions int32
	// TopicConfigs are further settings of Topic when it is created
	// ([RoleTopicConfigs] for a role topic, as `krole dev` and `krole
	// init` set them). Default none: kfake's defaults.
	TopicConfigs map[string]string
	// BrokerConfigs are broker settings passed to kfake (for example
	// "transaction.max.timeout.ms"). Default none.
	BrokerConfigs map[string]string
	// WrapListener, when set, wraps the listener of each broker kfake
	// opens (faultnet.Net.Wrap fits): node is the broker's node id for
	// the brokers Start creates (kfake opens them in node order); a
	// broker added later (AddNode) gets the next number. Default nil.
	WrapListener func(node int32, ln net.Listener) net.Listener
	// Extra are further kfake options, for tests that inject faults;
	// they come after the options above and override them. Default none.
	Extra []kfake.Opt
}

// Cluster is a running embedded cluster. It embeds *kfake.Cluster, whose
// methods reach it: ListenAddrs for the broker addresses, Close to stop
// it (call it once done; it closes the listeners and drops the state
// unless DataDir is set), and the control hooks (ControlKey and the like)
// that tests use to inject faults.
type Cluster struct {
	*kfake.Cluster
}

// Start starts the cluster and, when opts.Topic is set, creates the topic.
// It blocks until every broker accepts connections and the topic (if any)
// shows in the metadata; ctx bounds only the wait for the topic, and when
// it ends first Start closes the cluster and returns the error.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.Listen == "" {
		opts.Listen = "127.0.0.1:0"
	}
	if opts.Nodes <= 0 {
		opts.Nodes = 1
	}
	if opts.Partitions <= 0 {
		opts.Partitions = 3
	}
	host, portStr, err := net.SplitHostPort(opts.Listen)
	if err != nil {
		return nil, fmt.Errorf("--listen %q is not host:port: %w", opts.Listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 0 || port+opts.Nodes-1 > 65535 {
		return nil, fmt.Errorf("--listen %q: port must be 0-65535 (and leave room for %d nodes)", opts.Listen, opts.Nodes)
	}
	var opened atomic.Int32 // listeners opened so far: the next node id
	kopts := []kfake.Opt{
		kfake.NumBrokers(opts.Nodes),
		kfake.ClusterID("krole-dev"),
		kfake.ListenFn(func(network, addr string) (net.Listener, error) {
			_, p, _ := net.SplitHostPort(addr)
			ln, err := net.Listen(network, net.JoinHostPort(host, p))
			if err != nil || opts.WrapListener == nil {
				return ln, err
			}
			return opts.WrapListener(opened.Add(1)-1, ln), nil
		}),
	}
	if port != 0 {
		ports := make([]int, opts.Nodes)
		for i := range ports {
			ports[i] = port + i
		}
		kopts = append(kopts, kfake.Ports(ports...))
	}
	if opts.DataDir != "" {
		kopts = append(kopts, kfake.DataDir(opts.DataDir))
	}
	if len(opts.BrokerConfigs) > 0 {
		kopts = append(kopts, kfake.BrokerConfigs(opts.BrokerConfigs))
	}
	kopts = append(kopts, opts.Extra...)
	kc, err := kfake.NewCluster(kopts...)
	if err != nil {
		return nil, fmt.Errorf("starting the embedded cluster on %s: %w", opts.Listen, err)
	}
	c := &Cluster{Cluster: kc}
	if opts.Topic != "" {
		cfg := fencing.Config{Brokers: c.ListenAddrs(), Topic: opts.Topic}
		err := CreateNewTopic(ctx, cfg, TopicSpec{Name: opts.Topic, Partitions: opts.Partitions, Replication: 1,
			CleanupPolicy: "compact", Configs: opts.TopicConfigs})
		var te *sarama.TopicError
		if errors.As(err, &te) && te.Err == sarama.ErrTopicAlreadyExists {
			err = nil // kept in DataDir from an earlier run
		}
		if err != nil {
			kc.Close()
			return nil, err
		}
	}
	return c, nil
}

// CreateTopic creates cfg.Topic as a compacted topic with partitions
// partitions, on any Kafka-protocol cluster cfg reaches. A topic that
// exists already is fine: CreateTopic is idempotent, and does not check
// that the existing topic is compacted or has that many partitions.
//
// It blocks until the new topic shows in the metadata with every
// partition, up to 10 s (an error after that), or until ctx ends (an
// error wrapping ctx.Err()). ctx is checked between metadata requests;
// the requests themselves are bounded by cfg's timeouts.
func CreateTopic(ctx context.Context, cfg fencing.Config, partitions int32, replication int16) error {
	cfg = cfg.WithDefaults()
	err := CreateNewTopic(ctx, cfg, TopicSpec{Name: cfg.Topic, Partitions: partitions, Replication: replication, CleanupPolicy: "compact"})
	var te *sarama.TopicError
	if errors.As(err, &te) && te.Err == sarama.ErrTopicAlreadyExists {
		return nil
	}
	return err
}

// The settings of a role topic besides cleanup.policy=compact, which
// `krole init` sets on a cluster and `krole dev` on its own:
//
//   - segment.ms 1h: the log cleaner compacts closed segments only, and the
//     default (7 days) would keep a week of renewals uncompacted;
//   - min.compaction.lag.ms 10min (rolestate.MaxLeaseSpan): every record,
//     superseded or not, stays readable at least that long, so
//     `krole records` shows the recent history of a role;
//   - delete.retention.ms (default 7 days, `krole init --delete-retention`):
//     how long a tombstone (a deregistration) and the transaction markers
//     stay after compaction. A view with a state dir (`krole serve
//     --state-dir`, election.Config.StateDir) that is offline for longer
//     may never see a tombstone: the removed candidate then stays in its
//     table. Delete the state dir of a view that was offline that long.
const (
	RoleTopicSegmentMS           = "3600000"
	RoleTopicMinCompactionLagMS  = "600000"
	DefaultRoleTopicDeleteRetain = 7 * 24 * time.Hour
)

// RoleTopicConfigs returns the settings of a role topic besides
// cleanup.policy, in the order `krole init` reports them, with
// deleteRetention as delete.retention.ms.
func RoleTopicConfigs(deleteRetention time.Duration) [][2]string {
	return [][2]string{
		{"segment.ms", RoleTopicSegmentMS},
		{"min.compaction.lag.ms", RoleTopicMinCompactionLagMS},
		{"delete.retention.ms", strconv.FormatInt(deleteRetention.Milliseconds(), 10)},
	}
}

// RoleTopicConfigMap is [RoleTopicConfigs] as a map, for [Options].
func RoleTopicConfigMap(deleteRetention time.Duration) map[string]string {
	m := map[string]string{}
	for _, kv := range RoleTopicConfigs(deleteRetention) {
		m[kv[0]] = kv[1]
	}
	return m
}

// TopicSpec is a topic for [CreateNewTopic] to create.
type TopicSpec struct {
	// Name of the topic.
	Name string
	// Partitions is the number of partitions.
	Partitions int32
	// Replication is the replication factor.
	Replication int16
	// CleanupPolicy is the topic's cleanup.policy: "compact" for a role
	// topic, "delete" for an application topic.
	CleanupPolicy string
	// Configs are further settings of the topic (cleanup.policy is
	// CleanupPolicy's). Default none.
	Configs map[string]string
	// Visible bounds the wait for the new topic to show in the metadata
	// with every partition. Default 10 s.
	Visible time.Duration
}

// CreateNewTopic creates the topic spec describes, on any Kafka-protocol
// cluster cfg reaches (cfg.Topic plays no part). Unlike [CreateTopic] it
// is not idempotent: a topic that exists already is an error, a
// *sarama.TopicError with sarama.ErrTopicAlreadyExists (wrapped), so that
// a caller that means a fresh topic learns of a clash of names.
//
// It blocks until the new topic shows in the metadata with every
// partition, up to spec.Visible (an error after that), or until ctx ends
// (ctx.Err()). ctx is checked between metadata requests; the requests
// themselves are bounded by cfg's timeouts.
func CreateNewTopic(ctx context.Context, cfg fencing.Config, spec TopicSpec) error {
	if spec.Visible <= 0 {
		spec.Visible = 10 * time.Second
	}
	cfg = cfg.WithDefaults()
	sc, err := cfg.Sarama()
	if err != nil {
		return err
	}
	admin, err := sarama.NewClusterAdmin(cfg.Brokers, sc)
	if err != nil {
		return fmt.Errorf("no broker answered at %v: %w", cfg.Brokers, err)
	}
	defer admin.Close()
	policy := spec.CleanupPolicy
	entries := map[string]*string{"cleanup.policy": &policy}
	for k, v := range spec.Configs {
		entries[k] = &v
	}
	err = admin.CreateTopic(spec.Name, &sarama.TopicDetail{
		NumPartitions:     spec.Partitions,
		ReplicationFactor: spec.Replication,
		ConfigEntries:     entries,
	}, false)
	if err != nil {
		return fmt.Errorf("creating topic %s: %w", spec.Name, err)
	}
	// Wait until metadata shows the topic, so the caller can use it at once.
	deadline := time.Now().Add(spec.Visible)
	for {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		md, err := admin.DescribeTopics([]string{spec.Name})
		if err == nil && len(md) == 1 && md[0].Err == sarama.ErrNoError && len(md[0].Partitions) == int(spec.Partitions) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("topic %s not visible after creation", spec.Name)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TopicConfigs returns the configuration entries of topic, by name, as
// admin's DescribeConfigs reports them; names, when given, limit the
// entries asked for. A topic the cluster does not know is an error.
func TopicConfigs(admin sarama.ClusterAdmin, topic string, names ...string) (map[string]string, error) {
	res, err := admin.DescribeConfigs([]*sarama.ConfigResource{{Type: sarama.TopicResource, Name: topic, ConfigNames: names}}, sarama.DescribeConfigsOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, r := range res {
		if r.Name != topic {
			continue
		}
		if r.ErrorCode != sarama.ErrNoError {
			return nil, &sarama.DescribeConfigError{Err: r.ErrorCode, ErrMsg: r.ErrorMsg}
		}
		for _, e := range r.Configs {
			out[e.Name] = e.Value
		}
	}
	return out, nil
}
