package cli

import (
	"errors"
	"fmt"

	"github.com/IBM/sarama"
	ucli "github.com/urfave/cli/v2"

	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/check"
	"github.com/krabka/krole/internal/explain"
	"github.com/krabka/krole/processor"
)

func checkCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "check",
		Usage:     "test on this cluster everything krole relies on (safe on production: it writes only to a scratch role)",
		UsageText: "krole check [--as member|operator|viewer] [-o json] [--lease-duration D] [--timeout D]",
		Description: "Runs each check within --timeout and prints one line per check: its name,\n" +
			"PASS, WARN, FAIL or SKIP, what it found, and what to do. The checks:\n" +
			"reachability, versions, role-topic, role-partitions, durability, acl.* (the\n" +
			"permissions of --as), transactions.init, transactions.fence,\n" +
			"transactions.read-committed, timeouts, describe, clock, latency, cleanup (see\n" +
			"docs/CHECK.md).\n\n" +
			"It writes only to a scratch role (krole-check.<random>, transactional id\n" +
			"--txn-prefix + that), checks first that nobody uses it, and tombstones what it\n" +
			"wrote at the end. --as viewer writes nothing and skips the checks that write.\n\n" +
			"Exit 0 when no check failed (warnings included), 1 when one failed, 2 on a\n" +
			"usage error.\n" +
			"JSON: {\"checks\":[{\"name\",\"ok\",\"warn\",\"skipped\",\"detail\",\"fix\"}]}.",
		Flags: []ucli.Flag{
			&ucli.StringFlag{Name: "as", Value: string(check.Member), Usage: "whose permissions to try, `WHO`: member, operator (member + krole init) or viewer (read-only)"},
			&ucli.DurationFlag{Name: "lease-duration", Value: processor.DefaultLeaseDuration, EnvVars: []string{"KROLE_LEASE_DURATION"},
				Usage: "the lease the members run with, `D`: the transaction timeout checked is half of it"},
			&ucli.DurationFlag{Name: "timeout", Value: check.DefaultTimeout, Usage: "the longest one check may take, `D`"},
		},
		Action: runCheck,
	}
}

func runCheck(c *ucli.Context) error {
	if err := noArgs(c); err != nil {
		return err
	}
	as, err := check.ParseAs(c.String("as"))
	if err != nil {
		return Usagef(c, "%v", err)
	}
	if d := c.Duration("lease-duration"); d <= 0 {
		return Usagef(c, "--lease-duration %v: must be positive", d)
	}
	if d := c.Duration("timeout"); d <= 0 {
		return Usagef(c, "--timeout %v: must be positive", d)
	}
	cfg, err := configFrom(c)
	if err != nil {
		return err
	}
	// Text lines go out as each check ends; JSON once, at the end.
	var onResult func(check.Result)
	var werr error
	if outputFormat(c) != FormatJSON {
		onResult = func(r check.Result) {
			if werr == nil {
				werr = check.WriteLine(stdout(c), r)
			}
		}
	}
	rep := check.Run(c.Context, check.Options{
		Config:        cfg,
		As:            as,
		LeaseDuration: c.Duration("lease-duration"),
		Timeout:       c.Duration("timeout"),
		Budget:        max(check.DefaultBudget, 6*c.Duration("timeout")),
		Dial:          func(cfg fencing.Config) (*fencing.BrokerTransport, error) { return explain.Dial(cfg) },
		Explain:       func(err error) string { return explainCheckError(cfg, err) },
		OnResult:      onResult,
	})
	if werr != nil {
		return werr
	}
	if outputFormat(c) == FormatJSON {
		if err := writeJSON(stdout(c), rep); err != nil {
			return err
		}
	} else if err := check.WriteSummary(stdout(c), rep); err != nil {
		return err
	}
	switch {
	case rep.Interrupted != "":
		// Interrupted is no verdict, whatever ran before.
		return ucli.Exit("", ExitFailure)
	case !rep.OK():
		return ucli.Exit("", ExitFailure) // the failures are in the report
	}
	return nil
}

// explainCheckError is the one line a check's result gives for err.
func explainCheckError(cfg fencing.Config, err error) string {
	if errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
		return fmt.Sprintf("topic %s does not exist", cfg.Topic) // the fix says how to create it
	}
	return explain.OneLine(explain.WithoutPackagePrefixes(explain.Describe(err)))
}
