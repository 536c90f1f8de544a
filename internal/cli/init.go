package cli

import (
	"fmt"
	"strings"

	"github.com/IBM/sarama"
	ucli "github.com/urfave/cli/v2"

	"github.com/krabka/krole/internal/devcluster"
)

func initCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "init",
		Usage:     "create the compacted role topic on a cluster (running it again is fine)",
		UsageText: "krole init [--partitions N] [--replication-factor N]",
		Description: "Creates --topic with cleanup.policy=compact. When the topic exists already,\n" +
			"init leaves it as it is and checks that it is compacted: a topic that deletes\n" +
			"old records would lose registrations, so init fails on one.",
		Flags: []ucli.Flag{
			&ucli.IntFlag{Name: "partitions", Value: 3, Usage: "partitions of the role topic, `N` (all of a role's records share one)"},
			&ucli.IntFlag{Name: "replication-factor", Aliases: []string{"rf"}, Value: 0,
				Usage: "replicas of each partition, `N`; 0: 3, or the number of brokers when fewer"},
		},
		Action: runInit,
	}
}

// initResult is the JSON output of `krole init`.
type initResult struct {
	Topic             string `json:"topic"`
	Partitions        int    `json:"partitions"`
	ReplicationFactor int    `json:"replication_factor"`
	CleanupPolicy     string `json:"cleanup_policy"`
}

func runInit(c *ucli.Context) error {
	if err := noArgs(c); err != nil {
		return err
	}
	parts, rf := c.Int("partitions"), c.Int("replication-factor")
	switch {
	case parts < 1 || parts > 100000:
		return Usagef(c, "--partitions %d: must be 1 to 100000", parts)
	case rf < 0 || rf > 32767:
		return Usagef(c, "--replication-factor %d: must be 1 to 32767 (or 0 for the default)", rf)
	}
	cfg, err := configFrom(c)
	if err != nil {
		return err
	}
	sc, err := cfg.Sarama()
	if err != nil {
		return err
	}
	admin, err := sarama.NewClusterAdmin(cfg.Brokers, sc)
	if err != nil {
		return &noBroker{Brokers: cfg.Brokers, SASL: cfg.SASL.Mechanism != "", Err: err}
	}
	defer admin.Close()

	if rf == 0 {
		brokers, _, err := admin.DescribeCluster()
		if err != nil {
			return fmt.Errorf("describing the cluster: %w", err)
		}
		rf = min(3, max(1, len(brokers)))
	}
	if err := devcluster.CreateTopic(c.Context, cfg, int32(parts), int16(rf)); err != nil {
		return err
	}

	res := initResult{Topic: cfg.Topic}
	md, err := admin.DescribeTopics([]string{cfg.Topic})
	if err != nil {
		return fmt.Errorf("describing topic %s: %w", cfg.Topic, err)
	}
	if len(md) != 1 || md[0].Err != sarama.ErrNoError {
		e := sarama.ErrUnknownTopicOrPartition
		if len(md) == 1 {
			e = md[0].Err
		}
		return fmt.Errorf("describing topic %s: %w", cfg.Topic, e)
	}
	res.Partitions = len(md[0].Partitions)
	if len(md[0].Partitions) > 0 {
		res.ReplicationFactor = len(md[0].Partitions[0].Replicas)
	}
	conf, err := devcluster.TopicConfigs(admin, cfg.Topic, "cleanup.policy")
	if err != nil {
		return fmt.Errorf("reading the configuration of topic %s: %w", cfg.Topic, err)
	}
	res.CleanupPolicy = conf["cleanup.policy"]
	policies := strings.Split(res.CleanupPolicy, ",")
	compact, del := false, false
	for _, p := range policies {
		compact = compact || strings.TrimSpace(p) == "compact"
		del = del || strings.TrimSpace(p) == "delete"
	}
	if !compact {
		return fmt.Errorf("topic %s exists with cleanup.policy=%s; krole needs cleanup.policy=compact (alter the topic, or choose another with --topic)",
			cfg.Topic, res.CleanupPolicy)
	}
	if del {
		fmt.Fprintf(stderr(c), "krole: warning: topic %s has cleanup.policy=%s: retention will delete the registrations of long-lived members; use compact alone\n",
			cfg.Topic, res.CleanupPolicy)
	}

	if outputFormat(c) == FormatJSON {
		return writeJSON(stdout(c), res)
	}
	_, err = fmt.Fprintf(stdout(c), "topic %s ready: cleanup.policy=%s, %d partitions, replication factor %d\n",
		res.Topic, res.CleanupPolicy, res.Partitions, res.ReplicationFactor)
	return err
}
