// Package roletopic creates the compacted role topic on a cluster, or
// finds it there, and reports its settings as the cluster has them: what
// `krole init` does. It sets on a topic it creates the settings `krole
// dev` sets on its own (devcluster.RoleTopicConfigs); it changes nothing
// on a topic that exists.
package roletopic

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/IBM/sarama"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/devcluster"
	"github.com/krabka/krole/internal/explain"
)

// ConfigNames are the settings a [Result] reports, in order.
var ConfigNames = []string{"cleanup.policy", "segment.ms", "min.compaction.lag.ms", "delete.retention.ms"}

// Spec is the topic to create when there is none.
type Spec struct {
	Partitions int32
	// Replication 0 is 3, or the number of brokers when fewer.
	Replication int16
	// DeleteRetain is its delete.retention.ms.
	DeleteRetain time.Duration
}

// Result is the role topic as the cluster has it (the JSON output of
// `krole init`).
type Result struct {
	Topic             string            `json:"topic"`
	Created           bool              `json:"created"`
	Partitions        int               `json:"partitions"`
	ReplicationFactor int               `json:"replication_factor"`
	CleanupPolicy     string            `json:"cleanup_policy"`
	Configs           map[string]string `json:"configs"` // ConfigNames as the cluster reports them
	Set               []string          `json:"set"`     // the settings this run set ("name=value"); empty for an existing topic
}

// Ensure creates cfg's topic as spec says when it does not exist (with
// cleanup.policy=compact and the role topic's settings, each set on its
// own: warn gets a line for each the cluster refuses), then describes it.
// The admin calls take no context: ctx bounds only the creation.
func Ensure(ctx context.Context, cfg fencing.Config, spec Spec, warn func(string)) (Result, error) {
	sc, err := cfg.Sarama()
	if err != nil {
		return Result{}, err
	}
	admin, err := sarama.NewClusterAdmin(cfg.Brokers, sc)
	if err != nil {
		return Result{}, &explain.NoBroker{Brokers: cfg.Brokers, SASL: cfg.SASL.Mechanism != "", Err: err}
	}
	defer admin.Close()

	rf := spec.Replication
	if rf == 0 {
		brokers, _, err := admin.DescribeCluster()
		if err != nil {
			return Result{}, fmt.Errorf("describing the cluster: %w", err)
		}
		rf = int16(min(3, max(1, len(brokers))))
	}
	res := Result{Topic: cfg.Topic, Set: []string{}}
	err = devcluster.CreateNewTopic(ctx, cfg, devcluster.TopicSpec{Name: cfg.Topic, Partitions: spec.Partitions, Replication: rf, CleanupPolicy: "compact"})
	var te *sarama.TopicError
	switch {
	case errors.As(err, &te) && te.Err == sarama.ErrTopicAlreadyExists:
	case err != nil:
		return Result{}, err
	default:
		res.Created = true
		res.Set = append(res.Set, "cleanup.policy=compact")
		for _, kv := range devcluster.RoleTopicConfigs(spec.DeleteRetain) {
			// One request per setting: a cluster that refuses one (a
			// setting it does not know, or its policy forbids) refuses
			// only that one. The embedded cluster takes all of them.
			v := kv[1]
			err := admin.IncrementalAlterConfig(sarama.TopicResource, cfg.Topic,
				map[string]sarama.IncrementalAlterConfigsEntry{kv[0]: {Operation: sarama.IncrementalAlterConfigsOperationSet, Value: &v}}, false)
			if err != nil {
				warn(fmt.Sprintf("topic %s: the cluster refused %s=%s: %v", cfg.Topic, kv[0], v, err))
				continue
			}
			res.Set = append(res.Set, kv[0]+"="+v)
		}
	}
	md, err := admin.DescribeTopics([]string{cfg.Topic})
	if err != nil {
		return Result{}, fmt.Errorf("describing topic %s: %w", cfg.Topic, err)
	}
	if len(md) != 1 || md[0].Err != sarama.ErrNoError {
		e := sarama.ErrUnknownTopicOrPartition
		if len(md) == 1 {
			e = md[0].Err
		}
		return Result{}, fmt.Errorf("describing topic %s: %w", cfg.Topic, e)
	}
	res.Partitions = len(md[0].Partitions)
	if len(md[0].Partitions) > 0 {
		res.ReplicationFactor = len(md[0].Partitions[0].Replicas)
	}
	conf, err := devcluster.TopicConfigs(admin, cfg.Topic, ConfigNames...)
	if err != nil {
		return Result{}, fmt.Errorf("reading the configuration of topic %s: %w", cfg.Topic, err)
	}
	res.CleanupPolicy = conf["cleanup.policy"]
	res.Configs = map[string]string{}
	for _, name := range ConfigNames {
		if v, ok := conf[name]; ok {
			res.Configs[name] = v
		}
	}
	return res, nil
}

// Policies says whether r's cleanup.policy compacts, and whether it
// deletes.
func (r Result) Policies() (compact, del bool) {
	for _, p := range strings.Split(r.CleanupPolicy, ",") {
		compact = compact || strings.TrimSpace(p) == "compact"
		del = del || strings.TrimSpace(p) == "delete"
	}
	return compact, del
}

// settingWhy says what a role topic's setting is for, in the warning
// about an existing topic whose setting differs.
var settingWhy = map[string]string{
	"segment.ms":            "the log cleaner compacts closed segments only, so a longer segment keeps that long of renewals uncompacted",
	"min.compaction.lag.ms": "every record stays readable that long, for krole records to show a role's recent history",
	"delete.retention.ms":   "a view with a state dir offline for longer may miss a deregistration",
}

// Differences returns a line for each setting of r, an existing topic,
// that differs from those Ensure sets on a topic it creates with
// deleteRetain (and `krole dev` on its own), with the command, on
// broker, that changes it; delete.retention.ms only with checkDelete.
func (r Result) Differences(broker string, deleteRetain time.Duration, checkDelete bool) []string {
	var out []string
	for _, kv := range devcluster.RoleTopicConfigs(deleteRetain) {
		name, want := kv[0], kv[1]
		if name == "delete.retention.ms" && !checkDelete {
			continue
		}
		got, ok := r.Configs[name]
		if !ok || got == want {
			continue
		}
		out = append(out, fmt.Sprintf("topic %s has %s=%s, not %s (%s); to change it: "+
			"kafka-configs.sh --bootstrap-server %s --alter --entity-type topics --entity-name %s --add-config %s=%s",
			r.Topic, name, got, want, settingWhy[name], broker, r.Topic, name, want))
	}
	return out
}
