package cli

import (
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/krabka/krole/internal/demo"
	"github.com/krabka/krole/internal/runner"
	"github.com/krabka/krole/processor"
)

// The demo's flag defaults: a lease short enough for the failover to take
// a few seconds, and the pause between its steps.
const (
	demoLease    = 3 * time.Second
	demoMinLease = time.Second
	demoPause    = time.Second
	demoKeepAddr = DefaultBrokers // with --keep: where the printed commands look without -b
)

func demoCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "demo",
		Usage:     "watch a failover and a handover: an embedded cluster and three members of a role, as processes",
		UsageText: "krole demo [--lease-duration D] [--listen HOST:PORT] [--pause D] [--keep]",
		Description: "Starts an embedded Kafka-protocol cluster (as 'krole dev' does) and three\n" +
			"'krole run' processes, node-1, node-2 and node-3, campaigning for the role\n" +
			"controller, and says what happens at each step: the table; SIGKILL of the\n" +
			"holder and the failover, with its time and the new fencing token; SIGTERM of\n" +
			"the next holder, which resigns, and the handover, with its time. Then it stops\n" +
			"everything it started and exits 0; with the default lease it takes about ten\n" +
			"seconds. Times are measured from the signal to the new holder's lease showing\n" +
			"in the demo's own view of the role topic.\n\n" +
			"--keep leaves the cluster (on 127.0.0.1:9092, or a free port when that is taken,\n" +
			"unless --listen says otherwise) and three members running, and prints commands\n" +
			"to try in another terminal; Ctrl-C then stops everything. The members die with\n" +
			"the demo in any case.",
		Flags: []ucli.Flag{
			&ucli.DurationFlag{Name: "lease-duration", Value: demoLease,
				Usage: "the members' lease, `D`: a killed holder is replaced about this long after it dies"},
			&ucli.StringFlag{Name: "listen", DefaultText: demo.FreeListen + ", or " + demoKeepAddr + " with --keep",
				Usage: "`HOST:PORT` of the embedded cluster; port 0 picks a free port"},
			&ucli.DurationFlag{Name: "pause", Value: demoPause,
				Usage: "pause `D` between the steps, to read along"},
			&ucli.BoolFlag{Name: "keep",
				Usage: "leave the cluster and the members running until Ctrl-C, and print what to try next"},
		},
		Action: runDemo,
	}
}

// runDemo checks the flags and runs package demo, with what it takes from
// krole's other commands.
func runDemo(c *ucli.Context) error {
	if err := noArgs(c); err != nil {
		return err
	}
	lease, pause, keep := c.Duration("lease-duration"), c.Duration("pause"), c.Bool("keep")
	settings := processor.Settings{LeaseDuration: lease}.WithDefaults()
	switch {
	case lease < demoMinLease:
		return Usagef(c, "--lease-duration %v: the demo needs at least %v", lease, demoMinLease)
	case pause < 0:
		return Usagef(c, "--pause %v: must not be negative", pause)
	}
	if err := settings.Validate(); err != nil {
		return Usagef(c, "--lease-duration %v: %v", lease, err)
	}
	listen, fallback := c.String("listen"), false
	if listen == "" {
		listen = demo.FreeListen
		if keep {
			listen, fallback = demoKeepAddr, true
		}
	}
	if _, err := validateListen(c, listen, true); err != nil {
		return err
	}
	topic, err := clusterTopic(c, listen)
	if err != nil {
		return err
	}
	return demo.Run(c.Context, demo.Options{
		Out:            stdout(c),
		Env:            runner.ClearedEnv(),
		LeaseDuration:  settings.LeaseDuration,
		Pause:          pause,
		Listen:         listen,
		Fallback:       fallback,
		Keep:           keep,
		Topic:          topic,
		TxnPrefix:      c.String("txn-prefix"),
		DefaultBrokers: DefaultBrokers,
	})
}
