package cli

import (
	"fmt"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/krabka/krole/internal/devcluster"
	"github.com/krabka/krole/internal/roletopic"
)

// The role topic's settings that init sets on a topic it creates, besides
// cleanup.policy=compact, are devcluster.RoleTopicConfigs (`krole dev`
// sets the same): see there why.
const defaultRoleTopicDeleteRetain = devcluster.DefaultRoleTopicDeleteRetain

func initCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "init",
		Usage:     "create the compacted role topic on a cluster (running it again is fine)",
		UsageText: "krole init [--partitions N] [--replication-factor N] [--delete-retention D] [--timeout D]",
		Description: "Creates --topic with cleanup.policy=compact, segment.ms=3600000 (1h),\n" +
			"min.compaction.lag.ms=600000 (10m) and delete.retention.ms=--delete-retention,\n" +
			"and says what it set (a setting the cluster refuses is a warning). When the\n" +
			"topic exists already, init leaves it as it is, reports those settings, and\n" +
			"checks that it is compacted: a topic that deletes old records would lose\n" +
			"registrations, so init fails on one.\n\n" +
			"A view that keeps its table in a state dir (krole serve --state-dir) and is\n" +
			"offline for longer than delete.retention.ms may miss a deregistration: the\n" +
			"removed candidate stays in its table. Delete the state dir of such a view.",
		Flags: []ucli.Flag{
			&ucli.IntFlag{Name: "partitions", Value: 3, Usage: "partitions of the role topic, `N` (all of a role's records share one)"},
			&ucli.IntFlag{Name: "replication-factor", Aliases: []string{"rf"}, Value: 0,
				Usage: "replicas of each partition, `N`; 0: 3, or the number of brokers when fewer"},
			&ucli.DurationFlag{Name: "delete-retention", Value: defaultRoleTopicDeleteRetain,
				Usage: "delete.retention.ms of a new topic, `D`: the longest a view with a state dir may be offline and still see every deregistration"},
			timeoutFlag(),
		},
		Action: withTimeout(runInit, true),
	}
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
	case c.Duration("delete-retention") < time.Millisecond:
		return Usagef(c, "--delete-retention %v: must be at least 1ms", c.Duration("delete-retention"))
	}
	cfg, err := configFrom(c)
	if err != nil {
		return err
	}
	res, err := roletopic.Ensure(c.Context, cfg, roletopic.Spec{Partitions: int32(parts), Replication: int16(rf),
		DeleteRetain: c.Duration("delete-retention")}, func(line string) { fmt.Fprintf(stderr(c), "krole: warning: %s\n", line) })
	if err != nil {
		return err
	}
	compact, del := res.Policies()
	if !compact {
		return fmt.Errorf("topic %s exists with cleanup.policy=%s; krole needs cleanup.policy=compact (alter the topic, or choose another with --topic)",
			cfg.Topic, res.CleanupPolicy)
	}
	if !res.Created && c.IsSet("partitions") && parts != res.Partitions {
		// The partition of a role is its name's hash modulo the count:
		// changing the count would move roles, and krole never does.
		fmt.Fprintf(stderr(c), "krole: warning: topic %s exists with %d partitions; --partitions %d is ignored: "+
			"a role's partition is its name's hash modulo the count, so adding partitions would move roles away from their records "+
			"(to change it, create a new topic with --topic and move the members to it)\n", cfg.Topic, res.Partitions, parts)
	}
	if del {
		fmt.Fprintf(stderr(c), "krole: warning: topic %s has cleanup.policy=%s: retention will delete the registrations of long-lived members; use compact alone\n",
			cfg.Topic, res.CleanupPolicy)
	}
	if !res.Created {
		// delete.retention.ms is a choice (--delete-retention): checked
		// only when the flag is given.
		for _, line := range res.Differences(cfg.Brokers[0], c.Duration("delete-retention"), c.IsSet("delete-retention")) {
			fmt.Fprintf(stderr(c), "krole: warning: %s\n", line)
		}
	}

	if outputFormat(c) == FormatJSON {
		return writeJSON(stdout(c), res)
	}
	var found []string
	for _, name := range roletopic.ConfigNames {
		if v, ok := res.Configs[name]; ok && name != "cleanup.policy" {
			found = append(found, name+"="+v)
		}
	}
	what := "existed; left as it is"
	if res.Created {
		what = "created; set " + strings.Join(res.Set, ", ")
	}
	_, err = fmt.Fprintf(stdout(c), "topic %s ready: cleanup.policy=%s, %d partitions, replication factor %d (%s)\n  settings: %s\n",
		res.Topic, res.CleanupPolicy, res.Partitions, res.ReplicationFactor, what, strings.Join(found, ", "))
	return err
}
