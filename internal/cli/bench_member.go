package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/bench"
	"github.com/krabka/krole/internal/chart"
)

// What passes between the benches and package internal/bench: the
// environment as a bench.Cluster, the results printed (or drawn, or
// compared), and the hidden krole bench member, the member process of
// renew and failover-many.

// benchCluster is the internal/bench view of a benchEnv.
func (e *benchEnv) benchCluster() bench.Cluster {
	return bench.Cluster{Exe: e.exe, Env: demoEnv(), Brokers: e.brokers, Topic: e.cfg.Topic, TxnPrefix: e.cfg.TxnPrefix, Pipeline: e.cfg.Pipeline,
		Embedded: e.embedded, Progress: e.progress, Log: e.errOut, View: e.view, Connect: e.connect}
}

// connect opens a transport on the bench's cluster, with e's whole
// configuration (TLS and SASL included); see bench.Cluster.Connect.
func (e *benchEnv) connect(clientID string, txnTimeout time.Duration) (*fencing.BrokerTransport, error) {
	cfg := e.cfg
	cfg.ClientID = clientID
	if txnTimeout > 0 {
		cfg.TxnTimeout = txnTimeout
	}
	bt, err := fencing.NewBrokerTransport(cfg)
	if err != nil {
		return nil, explainRunError(cfg, err)
	}
	return bt, nil
}

func (e *benchEnv) clusterName() string {
	if e.embedded {
		return "embedded (kfake, in the bench process)"
	}
	return e.brokers
}

// startCPUProfile profiles this process into path until the returned
// func is called.
func startCPUProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// writeBench prints res (table or JSON) and draws --chart.
func writeBench(c *ucli.Context, res chart.Result) error {
	if outputFormat(c) == FormatJSON {
		enc := json.NewEncoder(stdout(c))
		if err := enc.Encode(res); err != nil {
			return err
		}
	} else {
		chart.WriteText(stdout(c), res)
	}
	return drawBench(c, res)
}

// writeBenchAs prints full as JSON (-o json), or r's text and more's
// lines, and draws --chart from r (and --peer).
func writeBenchAs(c *ucli.Context, r chart.Result, full any, more func(io.Writer)) error {
	if outputFormat(c) == FormatJSON {
		if err := json.NewEncoder(stdout(c)).Encode(full); err != nil {
			return err
		}
	} else {
		chart.WriteText(stdout(c), r)
		more(stdout(c))
	}
	return drawBench(c, r)
}

// drawBench draws --chart: res, and the --peer results beside it.
func drawBench(c *ucli.Context, res chart.Result) error {
	if path := c.String("chart"); path != "" {
		results := []chart.Result{res}
		for _, p := range c.StringSlice("peer") {
			more, err := readResults(p)
			if err != nil {
				return err
			}
			results = append(results, more...)
		}
		if err := writeChart(path, "krole bench "+res.Kind, results); err != nil {
			return err
		}
	}
	return nil
}

// readResults reads the JSON results in path (one or more objects).
func readResults(path string) ([]chart.Result, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []chart.Result
	dec := json.NewDecoder(f)
	for {
		var r chart.Result
		if err := dec.Decode(&r); err == io.EOF {
			return out, nil
		} else if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		chart.Summarize(r.SamplesMS) // sorts them, whatever wrote them
		out = append(out, r)
	}
}

func writeChart(path, title string, results []chart.Result) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := chart.SVG(f, title, results); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// runBenchCompare runs `krole bench compare`.
func runBenchCompare(c *ucli.Context) error {
	if !c.Args().Present() {
		return Usagef(c, "compare needs RESULT.json files")
	}
	var results []chart.Result
	for _, p := range c.Args().Slice() {
		rs, err := readResults(p)
		if err != nil {
			return err
		}
		results = append(results, rs...)
	}
	out := stdout(c)
	for _, r := range results {
		chart.WriteText(out, r)
	}
	fmt.Fprintln(out)
	chart.WriteRatios(out, results)
	if path := c.String("chart"); path != "" {
		return writeChart(path, chart.Title(results), results)
	}
	return nil
}

// benchMemberCommand is `krole bench member`, hidden: the member process
// of `krole bench renew` and `krole bench failover-many`
// (bench.RunMember).
func benchMemberCommand() *ucli.Command {
	return &ucli.Command{
		Name:   "member",
		Hidden: true,
		Usage:  "the member process of 'krole bench renew' and 'failover-many' (JSON lines on stdout, commands on stdin)",
		Flags: []ucli.Flag{
			memberFlag(),
			&ucli.StringFlag{Name: "role-prefix", Value: "bench-renew-"},
			&ucli.IntFlag{Name: "from", Usage: "the first role's number"},
			&ucli.IntFlag{Name: "roles", Value: 1},
			&ucli.IntFlag{Name: "own", Usage: "the last N roles are its own (0: all)"},
			&ucli.DurationFlag{Name: "lease-duration", Value: benchLease},
			&ucli.DurationFlag{Name: "renew-interval"},
			&ucli.BoolFlag{Name: "events"},
			&ucli.BoolFlag{Name: "view-memory"},
			&ucli.StringFlag{Name: "cpuprofile"},
		},
		Action: runBenchMember,
	}
}

func runBenchMember(c *ucli.Context) error {
	cfg, err := configFrom(c)
	if err != nil {
		return err
	}
	me, err := memberArg(c)
	if err != nil {
		return err
	}
	k := c.Int("roles")
	if k <= 0 {
		return Usagef(c, "--roles %d: must be at least 1", k)
	}
	if c.Int("from") < 0 || c.Int("own") < 0 || c.Int("own") > k {
		return Usagef(c, "--from %d --own %d: must be at least 0, and --own at most --roles", c.Int("from"), c.Int("own"))
	}
	s, err := benchSettings(c)
	if err != nil {
		return err
	}
	roles := make([]codec.Role, k)
	for i := range roles {
		roles[i] = codec.Role(fmt.Sprintf("%s%d", c.String("role-prefix"), c.Int("from")+i))
	}
	return bench.RunMember(c.Context, bench.MemberOptions{Config: cfg, Member: me, Roles: roles, Own: c.Int("own"), Settings: s,
		Events: c.Bool("events"), ViewMemory: c.Bool("view-memory"), CPUProfile: c.String("cpuprofile"),
		In: os.Stdin, Out: stdout(c), Profile: startCPUProfile})
}
