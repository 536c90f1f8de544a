package cli

import (
	"fmt"
	"net"

	ucli "github.com/urfave/cli/v2"

	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/explain"
	"github.com/krabka/krole/internal/runner"
	"github.com/krabka/krole/internal/server"
)

// DefaultServeListen is where `krole serve` listens by default: this
// machine only.
const DefaultServeListen = "127.0.0.1:8080"

func serveCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "serve",
		Usage:     "serve an HTTP lookup API, Prometheus metrics and a live page from a view of the role topic",
		UsageText: "krole serve [--listen HOST:PORT] [--state-dir DIR] [--history D]",
		Description: "Follows the role topic in a local view and answers from it, until SIGINT or\n" +
			"SIGTERM (it stops within 10s of the signal, whatever the cluster does). It\n" +
			"prints one line when it listens (port 0 picks a free port; the line\n" +
			"shows the real one):\n\n" +
			"   listening: http://HOST:PORT\n\n" +
			"Endpoints (GET):\n" +
			"   /                       a page of the table, updated live: a timeline per role\n" +
			"                           (1 min, 15 min or 1 h), the members, the groups and each\n" +
			"                           role's history\n" +
			"   /v1/roles               every role, as 'krole table -o json' prints them\n" +
			"   /v1/roles/ROLE          one role; 404 {\"error\":...} when the table has no record of it\n" +
			"   /v1/roles/ROLE/watch    server-sent events: the role's row, then one per change\n" +
			"   /v1/watch[?role=R,...]  server-sent events of every role (or those named)\n" +
			"   /v1/roles/ROLE/history  the role's changes of holder over the last --history:\n" +
			"                           {\"role\",\"since\",\"now\",\"transitions\":[{\"at\",\"kind\",\"cause\",\"holder\",\"from\",...},...],\"outages\":[...]}\n" +
			"   /v1/history             every role's, as an array\n" +
			"   /v1/groups              each group's live members, the roles each holds and its\n" +
			"                           balance, as 'krole table --members -o json' prints them\n" +
			"   /v1/source              what the server reads: {\"brokers\",\"topic\",\"history_window_ms\"}\n" +
			"   /v1/stats               the view's counters\n" +
			"   /healthz                200 while the view is current; 503 with {\"reason\":...} before it\n" +
			"                           has caught up, when no broker has answered it (or its data\n" +
			"                           has not been confirmed current) for 5s, or while it rebuilds\n" +
			"                           its table after the topic's offsets went backwards\n" +
			"   /metrics                Prometheus text format, names prefixed krole_\n\n" +
			"The history is kept in memory from when the server started, at most 256 changes\n" +
			"per role; its kinds are initial, elected, handover, failover, takeover, resumed,\n" +
			"released, expired and vacant, its causes failover, handover, step-down, fenced,\n" +
			"elected, resumed and vacant, and its outages the spans when no broker answered\n" +
			"the server. Times are Unix milliseconds.\n\n" +
			"A lookup made before the view has caught up waits up to 5s, then answers 503.\n" +
			"/v1/roles and /v1/roles/ROLE judge a lease as 'krole leader' does: a holder\n" +
			"whose lease ran out more than 1s ago by its own clock shows \"expired\" once no\n" +
			"renewal came within half a lease of the view's read (the answer waits for it).\n" +
			"Answers are what the topic says, not the broker's fence. There is no\n" +
			"authentication: the default address is reachable from this machine only.",
		Flags: []ucli.Flag{
			&ucli.StringFlag{Name: "listen", Value: DefaultServeListen,
				Usage: "`HOST:PORT` to serve on; port 0 picks a free port"},
			&ucli.StringFlag{Name: "state-dir", TakesFile: true,
				Usage: "keep the view's table in `DIR` (LevelDB), so that a restart reads only newer records (default: in memory)"},
			&ucli.DurationFlag{Name: "history", Value: server.DefaultHistoryWindow,
				Usage: "keep each role's changes of holder for the last `D` in memory, for the page's timeline and /v1/roles/{role}/history"},
		},
		Action: runServe,
	}
}

func runServe(c *ucli.Context) error {
	if err := noArgs(c); err != nil {
		return err
	}
	listen := c.String("listen")
	if _, err := validateListen(c, listen, false); err != nil {
		return err
	}
	if c.Duration("history") <= 0 {
		return Usagef(c, "--history %v: must be positive", c.Duration("history"))
	}
	cfg, err := configFrom(c)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		if addrInUse(err) {
			return fmt.Errorf("cannot listen on %s: address already in use; choose another with --listen", listen)
		}
		return fmt.Errorf("cannot listen on %s: %w", listen, err)
	}
	defer ln.Close()
	// A cluster that does not answer at the start is an error before
	// "listening:", not after it; once serving, the page and /healthz
	// say when the cluster goes away.
	probe, err := runner.StartInterruptible(c.Context, func() (*fencing.BrokerTransport, error) { return explain.Dial(cfg) })
	if err != nil {
		if c.Context.Err() != nil {
			return nil // interrupted while connecting
		}
		return err
	}
	_ = probe.Close()

	lv, err := startView(c, c.String("state-dir"))
	if err != nil {
		return err
	}
	defer lv.Stop()
	return server.Serve(c.Context, ln, lv.View, lv, server.ServeOptions{
		Source:  server.Source{Brokers: lv.Config().Brokers, Topic: lv.Config().Topic},
		History: c.Duration("history"),
		Stdout:  stdout(c),
		Stderr:  stderr(c),
	})
}
