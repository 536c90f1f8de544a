package cli

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/runner"
	"github.com/krabka/krole/processor"
)

// Exit codes of `krole run` when it gives up before holding the role.
const (
	// ExitRunTimeout: --timeout passed before this member held the role
	// (as GNU timeout's 124).
	ExitRunTimeout = runner.ExitTimeout
	// ExitRunBusy: --try found the role held by another member (sysexits'
	// EX_TEMPFAIL: try again later).
	ExitRunBusy = runner.ExitBusy
	// ExitRunMemberInUse: another live process runs under --member
	// (processor.ErrMemberInUse); this one left without writing anything.
	ExitRunMemberInUse = runner.ExitMemberInUse
)

// ExitWithin is how long `krole run`, serve, observe and table --watch
// take at most to return after SIGINT or SIGTERM, whatever the cluster
// does (a cluster that stopped answering, say); `krole run` adds the time
// CMD takes to stop, at most --kill-timeout. The readers' views shut
// their connections when they stop (see package view, "Stopping"), and
// `krole run` gives its member [runner.LeaveBudget] to resign.
const ExitWithin = 10 * time.Second

// runExamples ends the help of `krole run`, before the global flags.
const runExamples = `
EXAMPLES:
   # one scheduler at a time; the other nodes queue and take over
   krole run scheduler --member node-1 -- ./scheduler --config prod.yaml

   # the holder's address, for clients to find: krole leader db
   krole run db --value 10.0.0.1:5432 -- ./db-primary

   # a nightly job, only when nobody else runs it (exit 75 otherwise)
   krole run nightly --try -- ./job.sh

   # a shard manager: this member's share of 16 shards, one worker per shard held
   krole run shards --roles 'shard-{0..15}' -- ./worker.sh
`

func runCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "run",
		Usage: "campaign for a role and run a command while holding it, or hold it until interrupted",
		UsageText: "krole run ROLE [--member M] [--value V] [--slots N | --roles PATTERN [--weight W]] [--timeout D]\n" +
			"      [--try] [--lease-duration D] [--heartbeat-interval D] [--stagger D] [--kill-timeout D] [-- CMD [ARGS...]]",
		Description: "Joins the candidates of ROLE as member M and campaigns for it. While M holds ROLE,\n" +
			"krole runs CMD in a process group of its own, with KROLE_ROLE, KROLE_MEMBER, the\n" +
			"token in KROLE_PRODUCER_ID and KROLE_EPOCH, and in KROLE_FENCE the holding's fencing\n" +
			"number, above every earlier holding's. Without CMD, it prints the token on stdout.\n\n" +
			"Role lost (fenced, or not renewed in time): krole stops CMD's process tree (SIGTERM,\n" +
			"then SIGKILL after --kill-timeout) and campaigns again. CMD exits by itself: krole\n" +
			"resigns and exits with CMD's code. SIGINT or SIGTERM: krole stops CMD, resigns (the\n" +
			"next one takes over at once) and exits 0, within 10s plus the time CMD's tree takes\n" +
			"to stop. A second Ctrl-C, or a SIGTERM 2s or more after the first, exits at once\n" +
			"without resigning (130, 143). If krole is killed, a watchdog stops CMD's tree.\n\n" +
			"--roles: a member of the group ROLE over the roles named, holding its share, one CMD\n" +
			"per role held, each stopped before its role is handed over. Leaving (SIGINT, SIGTERM,\n" +
			"a CMD exited by itself), it hands every role over first (--drain-on-term).\n\n" +
			"Exit codes: CMD's own; 0 after SIGINT or SIGTERM; 124 --timeout passed; 75 --try\n" +
			"found the role held; 73 another live process runs as member M; 126, 127 CMD\n" +
			"cannot be executed, not found; 2 usage; 1 anything else. See docs/CLI.md.",
		CustomHelpTemplate: ucli.CommandHelpTemplate + runExamples + globalFlagsNote,
		ArgsUsage:          "ROLE [-- CMD [ARGS...]]",
		Flags: []ucli.Flag{
			&ucli.StringFlag{Name: "member", Aliases: []string{"m"}, EnvVars: []string{"KROLE_MEMBER"}, DefaultText: "HOSTNAME:PID",
				Usage: "the member id, `M`: 1-128 characters of [A-Za-z0-9._:@-]"},
			valueFlag(),
			&ucli.IntFlag{Name: "slots", DefaultText: "none",
				Usage: "a semaphore: campaign for `N` (1-1024) slots, ROLE-slot-0 to ROLE-slot-(N-1), holding one at a time; CMD gets KROLE_SLOT"},
			&ucli.StringSliceFlag{Name: "roles", DefaultText: "none",
				Usage: "a group named ROLE over the roles `PATTERN` names (shard-{0..15}; repeat it, or separate patterns with commas; at most 1024 roles): hold a share, one CMD per role held"},
			&ucli.IntFlag{Name: "weight", DefaultText: "1",
				Usage: "with --roles, this member's weight `W` (1-1000): its share of the roles is in proportion to it"},
			&ucli.BoolFlag{Name: "drain-on-term", DefaultText: "on with --roles, off with --slots",
				Usage: "when leaving (SIGINT, SIGTERM, a CMD that exited by itself), hand every role over to the group's other members first"},
			&ucli.DurationFlag{Name: "timeout", DefaultText: "none",
				Usage: "give up (exit 124) when this member does not hold the role within `D`"},
			&ucli.BoolFlag{Name: "try",
				Usage: "give up at once (exit 75) when another member holds the role"},
			&ucli.DurationFlag{Name: "lease-duration", Value: processor.DefaultLeaseDuration, EnvVars: []string{"KROLE_LEASE_DURATION"},
				Usage: "how long a lease lasts, `D`: a holder that dies without resigning keeps the role this long"},
			&ucli.DurationFlag{Name: "heartbeat-interval", EnvVars: []string{"KROLE_RENEW_INTERVAL"}, DefaultText: "lease duration / 5",
				Usage: "how often the member renews the roles it holds, `D`"},
			&ucli.DurationFlag{Name: "stagger", EnvVars: []string{"KROLE_STAGGER"}, DefaultText: "lease duration / 10",
				Usage: "how long each rank waits after the one ahead before taking a vacant role, `D`"},
			&ucli.DurationFlag{Name: "kill-timeout", EnvVars: []string{"KROLE_KILL_TIMEOUT"}, DefaultText: "lease duration / 5",
				Usage: "how long CMD's process tree has to exit after SIGTERM before SIGKILL, `D`"},
			&ucli.StringFlag{Name: "metrics-listen", EnvVars: []string{"KROLE_METRICS_LISTEN"}, DefaultText: "off",
				Usage: "serve the member's Prometheus metrics at http://`HOST:PORT`/metrics (port 0: a free one)"},
			&ucli.BoolFlag{Name: "verbose", EnvVars: []string{"KROLE_VERBOSE"},
				Usage: "log all the member's activity on stderr, not only transitions and warnings"},
		},
		Action: runRun,
	}
}

func runRun(c *ucli.Context) error {
	before, after, dash := splitDash(c.Args().Slice())
	if len(before) == 0 {
		if dash && len(after) > 0 {
			return Usagef(c, "run needs a ROLE before --: krole run ROLE [-- CMD [ARGS...]] (%q follows --, so it is the command, not the role)", after[0])
		}
		return &UsageError{Err: errors.New("run needs a ROLE: krole run ROLE [-- CMD [ARGS...]]")}
	}
	args := append(before, after...)
	role, err := codec.NewRole(args[0])
	if err != nil {
		return InvalidName(err)
	}
	grp, err := groupFlags(c, role)
	if err != nil {
		return err
	}
	timeout := c.Duration("timeout")
	if timeout < 0 {
		return Usagef(c, "--timeout %v: must not be negative", timeout)
	}
	member, err := runMember(c)
	if err != nil {
		return err
	}
	value, err := valueArg(c)
	if err != nil {
		return err
	}
	settings, killTimeout, err := runSettings(c)
	if err != nil {
		return err
	}
	cfg, err := configFrom(c)
	if err != nil {
		return err
	}
	// No flag names a client id: the session's default, "krole-" + the
	// member, tells this member's connections apart at the brokers.
	cfg.ClientID = ""
	var path string // "": hold the role until interrupted
	var cmdArgs []string
	if len(args) > 1 {
		path, cmdArgs = args[1], args[2:]
		if _, err := exec.LookPath(path); err != nil {
			return runner.CommandError(path, err)
		}
	}

	return runner.Run(c.Context, runner.Options{
		Config: cfg, Role: role, Slots: grp.slots, Roles: grp.roles, Patterns: grp.patterns, Weight: grp.weight, Drain: grp.drain, Member: member, Value: value, Settings: settings, Kill: killTimeout,
		Path: path, Args: cmdArgs, Timeout: timeout, Try: c.Bool("try"), Verbose: c.Bool("verbose"),
		MetricsListen: c.String("metrics-listen"), Stdout: stdout(c), Stderr: stderr(c),
	})
}

// runMember returns the --member of `krole run`, by default HOSTNAME:PID.
func runMember(c *ucli.Context) (codec.MemberID, error) {
	s := c.String("member")
	if s == "" {
		if v, inEnv := os.LookupEnv("KROLE_MEMBER"); c.IsSet("member") && !(inEnv && v == "") {
			// --member '' (an empty KROLE_MEMBER counts as unset).
			return "", Usagef(c, "--member is empty: name the member (1-128 characters of [A-Za-z0-9._:@-]), or leave the flag out for HOSTNAME:PID")
		}
		return defaultMember(), nil
	}
	m, err := codec.NewMemberID(s)
	if err != nil {
		return "", InvalidName(err)
	}
	return m, nil
}

// defaultMember is HOSTNAME:PID, with the characters a member id does not
// allow in the host name replaced by '-'.
func defaultMember() codec.MemberID {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	suffix := ":" + strconv.Itoa(os.Getpid())
	b := []byte(host)
	for i, ch := range b {
		if _, err := codec.NewMemberID(string(ch)); err != nil {
			b[i] = '-'
		}
	}
	if n := codec.MaxNameLen - len(suffix); len(b) > n {
		b = b[:n]
	}
	return codec.MemberID(string(b) + suffix)
}

// runSettings returns the processor settings and the kill timeout that the
// flags ask for; impossible values are usage errors.
func runSettings(c *ucli.Context) (processor.Settings, time.Duration, error) {
	for _, name := range []string{"lease-duration", "heartbeat-interval", "stagger"} {
		if c.IsSet(name) && c.Duration(name) <= 0 {
			return processor.Settings{}, 0, Usagef(c, "--%s %v: must be positive", name, c.Duration(name))
		}
	}
	if c.Duration("kill-timeout") < 0 {
		return processor.Settings{}, 0, Usagef(c, "--kill-timeout %v: must not be negative", c.Duration("kill-timeout"))
	}
	s := processor.Settings{
		LeaseDuration:     c.Duration("lease-duration"),
		HeartbeatInterval: c.Duration("heartbeat-interval"),
		Stagger:           c.Duration("stagger"),
	}.WithDefaults()
	if err := s.Validate(); err != nil {
		return s, 0, &UsageError{Err: err,
			Hint: "the heartbeat deadline is 4/5 and the transaction timeout 1/2 of --lease-duration; see 'krole run --help'"}
	}
	kill := s.LeaseDuration - s.HeartbeatDeadline
	if c.IsSet("kill-timeout") {
		kill = c.Duration("kill-timeout")
	}
	return s, kill, nil
}
