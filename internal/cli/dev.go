package cli

import (
	"fmt"
	"strings"

	ucli "github.com/urfave/cli/v2"

	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/devcluster"
)

func devCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "dev",
		Usage:     "run an embedded Kafka-protocol cluster (kfake) with the role topic, until interrupted",
		UsageText: "krole dev [--listen HOST:PORT] [--nodes N] [--data-dir DIR] [--partitions N]",
		Description: "Starts kfake, an embedded Kafka-protocol cluster, as real TCP servers, creates\n" +
			"the compacted role topic (--topic) with the settings 'krole init' sets\n" +
			"(segment.ms=3600000, min.compaction.lag.ms=600000, delete.retention.ms=604800000),\n" +
			"and prints one line when it is ready:\n\n" +
			"   brokers: HOST:PORT[,HOST:PORT...]\n\n" +
			"then runs until SIGINT or SIGTERM. Without --listen it listens where\n" +
			"--brokers (or KROLE_BROKERS) points, its first HOST:PORT, so that the other\n" +
			"commands, given the same flag or variable, find it. --nodes N starts N brokers on consecutive\n" +
			"ports; port 0 picks free ports (the line shows the real ones). --data-dir keeps\n" +
			"the cluster's state across restarts. Without it the state is in memory: a\n" +
			"restart forgets every role, and tokens start again at epoch 0 under the same\n" +
			"producer ids, so a token from before a restart is not older than one after it.\n" +
			"For development and tests only: one process, no replication.",
		Flags: []ucli.Flag{
			&ucli.StringFlag{Name: "listen", Value: DefaultBrokers, Usage: "`HOST:PORT` of the first broker; broker i listens on PORT+i (default: the first of --brokers)"},
			&ucli.IntFlag{Name: "nodes", Value: 1, Usage: "number of brokers, `N`"},
			&ucli.StringFlag{Name: "data-dir", TakesFile: true, Usage: "keep the cluster's state in `DIR` across restarts (default: in memory)"},
			&ucli.IntFlag{Name: "partitions", Value: 3, Usage: "partitions of the role topic, `N`, when it is created"},
		},
		Action: runDev,
	}
}

// devListen is where dev listens: --listen when given, else the first
// address of --brokers (its default is --listen's), so that `krole dev -b
// ADDR` and a KROLE_BROKERS shared with the other commands both work.
func devListen(c *ucli.Context) string {
	if c.IsSet("listen") {
		return c.String("listen")
	}
	first, _, _ := strings.Cut(c.String("brokers"), ",")
	if first = strings.TrimSpace(first); first != "" {
		return first
	}
	return c.String("listen")
}

func runDev(c *ucli.Context) error {
	if err := noArgs(c); err != nil {
		return err
	}
	listen, nodes, parts := devListen(c), c.Int("nodes"), c.Int("partitions")
	port, err := validateListen(c, listen, true)
	switch {
	case err != nil:
		return err
	case nodes < 1 || nodes > 64:
		return Usagef(c, "--nodes %d: must be 1 to 64", nodes)
	case port != 0 && port+nodes-1 > 65535:
		return Usagef(c, "--listen %s with --nodes %d: the ports run past 65535", listen, nodes)
	case parts < 1 || parts > 1000:
		return Usagef(c, "--partitions %d: must be 1 to 1000", parts)
	}
	topic, err := clusterTopic(c, listen)
	if err != nil {
		return err
	}

	ctx := c.Context
	cluster, err := devcluster.Start(ctx, devcluster.Options{
		Listen:     listen,
		Nodes:      nodes,
		DataDir:    c.String("data-dir"),
		Topic:      topic,
		Partitions: int32(parts),
		// The settings `krole init` sets, so that dev's topic is what
		// init would make of it (init reports no difference).
		TopicConfigs: devcluster.RoleTopicConfigMap(devcluster.DefaultRoleTopicDeleteRetain),
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil // interrupted while starting: not a failure
		}
		if addrInUse(err) {
			return fmt.Errorf("cannot listen on %s: address already in use (another krole dev or Kafka?); choose another with --listen", listen)
		}
		return err
	}
	defer cluster.Close()

	addrs := strings.Join(cluster.ListenAddrs(), ",")
	if _, err := fmt.Fprintf(stdout(c), "brokers: %s\n", addrs); err != nil {
		return err
	}
	note := fmt.Sprintf("krole dev: %d broker(s) up, topic %s ready; Ctrl-C stops the cluster", nodes, topic)
	if dir := c.String("data-dir"); dir != "" {
		note += "; state kept in " + dir
	}
	fmt.Fprintln(stderr(c), note)
	if c.String("data-dir") == "" {
		// kfake derives a role's producer id from its transactional id:
		// after a restart in memory the same producer id starts again
		// at epoch 0, so tokens go back.
		fmt.Fprintln(stderr(c), "krole dev: state in memory: a restart forgets every role, and tokens start again at epoch 0 under the same producer ids (keep state with --data-dir DIR)")
	}
	var env []string
	if addrs != DefaultBrokers {
		env = append(env, "KROLE_BROKERS="+addrs)
	}
	if topic != fencing.DefaultTopic {
		env = append(env, "KROLE_TOPIC="+topic)
	}
	if len(env) > 0 {
		fmt.Fprintf(stderr(c), "krole dev: for the other commands: export %s\n", strings.Join(env, " "))
	}

	<-ctx.Done()
	cluster.Close()
	fmt.Fprintln(stderr(c), "krole dev: stopped")
	return nil
}
