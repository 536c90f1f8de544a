package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	ucli "github.com/urfave/cli/v2"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/election"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/server"
	"github.com/krabka/krole/processor"
)

// Exit codes of `krole run` when CMD cannot be run, as shells, env and
// timeout use them.
const (
	exitCannotExecute = 126 // CMD exists but cannot be executed
	exitNotFound      = 127 // CMD does not exist
)

// Exit codes of `krole run` when it gives up before holding the role.
const (
	// ExitRunTimeout: --timeout passed before this member held the role
	// (as GNU timeout's 124).
	ExitRunTimeout = 124
	// ExitRunBusy: --try found the role held by another member (sysexits'
	// EX_TEMPFAIL: try again later).
	ExitRunBusy = 75
	// ExitRunMemberInUse: another live process runs under --member
	// (processor.ErrMemberInUse); this one left without writing anything.
	ExitRunMemberInUse = 73
)

// runExamples ends the help of `krole run`, before the global flags.
const runExamples = `
EXAMPLES:
   # one scheduler at a time; the other nodes queue and take over
   krole run scheduler --member node-1 -- ./scheduler --config prod.yaml

   # the holder's address, for clients to find: krole leader db
   krole run db --value 10.0.0.1:5432 -- ./db-primary

   # a nightly job, only when nobody else runs it (exit 75 otherwise)
   krole run nightly --try -- ./job.sh

   # a migration under a lock, giving up when not holding it within a minute (exit 124)
   krole run db-migrations --timeout 1m -- ./migrate.sh
`

func runCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "run",
		Usage: "campaign for a role and run a command while holding it, or hold it until interrupted",
		UsageText: "krole run ROLE [--member M] [--value V] [--timeout D] [--try] [--lease-duration D]\n" +
			"      [--renew-interval D] [--stagger D] [--kill-timeout D] [-- CMD [ARGS...]]",
		Description: "Joins the candidates of ROLE as member M and campaigns for it. While M holds ROLE,\n" +
			"krole runs CMD in a process group of its own, with the token M holds it under in\n" +
			"KROLE_PRODUCER_ID and KROLE_EPOCH, the holding's fencing number in KROLE_FENCE\n" +
			"(and KROLE_ROLE, KROLE_MEMBER). Without CMD, it prints the token\n" +
			"(PRODUCER_ID/EPOCH) on stdout each time it is elected.\n\n" +
			"KROLE_FENCE, the offset of the holding's first lease, exceeds every earlier\n" +
			"holding's: a target that refuses numbers below the highest it has seen refuses\n" +
			"every earlier holder (docs/CLI.md says what starts the numbers again).\n\n" +
			"Role lost (fenced, or not renewed in time): krole stops CMD's process tree\n" +
			"(SIGTERM, then SIGKILL after --kill-timeout) and campaigns again. CMD exits by\n" +
			"itself: krole resigns and exits with CMD's code. SIGINT or SIGTERM: krole stops\n" +
			"CMD, resigns (the next candidate takes over at once) and exits 0, within 10s of\n" +
			"the signal plus the time CMD's tree takes to stop. A SIGTERM within 2s of the\n" +
			"first signal is the same request (GNU timeout sends two); a second Ctrl-C, or a\n" +
			"SIGTERM later, exits at once without resigning (130, 143): the role passes on\n" +
			"when the lease ends. If krole is killed, a watchdog process stops CMD's tree.\n\n" +
			"Exit codes: CMD's own; 0 after SIGINT or SIGTERM; 124 --timeout passed; 75 --try\n" +
			"found the role held; 73 another live process runs as member M; 126, 127 CMD\n" +
			"cannot be executed, not found; 2 usage; 1 anything else (an ACL refused, say).\n" +
			"See docs/CLI.md for the details.",
		CustomHelpTemplate: ucli.CommandHelpTemplate + runExamples + globalFlagsNote,
		ArgsUsage:          "ROLE [-- CMD [ARGS...]]",
		Flags: []ucli.Flag{
			&ucli.StringFlag{Name: "member", Aliases: []string{"m"}, EnvVars: []string{"KROLE_MEMBER"}, DefaultText: "HOSTNAME:PID",
				Usage: "the member id, `M`: 1-128 characters of [A-Za-z0-9._:@-]"},
			valueFlag(),
			&ucli.DurationFlag{Name: "timeout", DefaultText: "none",
				Usage: "give up (exit 124) when this member does not hold the role within `D`"},
			&ucli.BoolFlag{Name: "try",
				Usage: "give up at once (exit 75) when another member holds the role"},
			&ucli.DurationFlag{Name: "lease-duration", Value: processor.DefaultLeaseDuration, EnvVars: []string{"KROLE_LEASE_DURATION"},
				Usage: "how long a lease lasts, `D`: a holder that dies without resigning keeps the role this long"},
			&ucli.DurationFlag{Name: "renew-interval", EnvVars: []string{"KROLE_RENEW_INTERVAL"}, DefaultText: "lease duration / 5",
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
			return commandError(path, err)
		}
	}

	lw := &lineWriter{w: stderr(c)}
	level := slog.LevelWarn
	if c.Bool("verbose") {
		level = slog.LevelInfo
	}
	// An authorization failure stops the member (see authzStop): denied
	// is its error, said as the command's.
	var (
		deniedMu sync.Mutex
		denied   error
		leave    = func() {}
	)
	// While the cluster is unreachable: one line when that begins and one
	// when it ends, not a warning at every retry (see outage).
	out := newOutage(lw, fmt.Sprintf("%s can be neither renewed nor taken until it answers", role))
	out.verbose = c.Bool("verbose")
	logger := slog.New(newAuthzStop(out.handler(&lineHandler{lw: lw, level: level}), cfg.Topic, func(err error) {
		deniedMu.Lock()
		denied = err
		deniedMu.Unlock()
		leave()
	}))
	if margin := settings.LeaseDuration - settings.RenewDeadline; killTimeout > margin {
		lw.printf("note: --kill-timeout %v is longer than the %v between this member's own renewal deadline "+
			"and the end of its lease: a CMD slow to stop may still run when another member takes the role", killTimeout, margin)
	}

	s := &runSession{
		role: role, me: member, path: path, args: cmdArgs, kill: killTimeout,
		stdout: lockedWriter(stdout(c), new(sync.Mutex)), stderr: lockedWriter(stderr(c), &lw.mu), lines: lw, verbose: c.Bool("verbose"),
		report: openReport(),
	}
	if s.report != nil {
		defer s.report.Close()
	}
	reg, metricsAddr, stopMetrics, err := serveMetrics(c.String("metrics-listen"))
	if err != nil {
		return err
	}
	defer stopMetrics()

	// The session's context ends on SIGINT or SIGTERM (c.Context), after
	// the line that says so, or when CMD exits by itself. Until the member
	// starts, an interrupt ends it quietly.
	sctx, stopSession := context.WithCancel(context.WithoutCancel(c.Context))
	defer stopSession()
	s.stopMember = stopSession
	leave = stopSession
	quiet := context.AfterFunc(c.Context, stopSession)
	interrupted := func() bool { return false }
	started := false  // the member started (OnReady said so)
	var failure error // why the member left, when not asked to (OnFatal)
	if timeout > 0 {
		// Given up only while not holding: the check and the election
		// take s.mu, so a member elected first keeps the role.
		t := time.AfterFunc(timeout, func() {
			s.mu.Lock()
			giveUp := s.held == nil && s.gaveUp == nil
			if giveUp {
				s.gaveUp = ucli.Exit("", ExitRunTimeout)
			}
			s.mu.Unlock()
			if giveUp {
				lw.printf("not holding %s within --timeout %v; giving up", role, timeout)
				stopSession()
			}
		})
		defer t.Stop()
	}
	var sess *election.Session
	sess, err = newSessionUntil(c.Context)(election.Config{
		Cluster:    cfg,
		Member:     member,
		Roles:      []codec.Role{role},
		Value:      value,
		Settings:   settings,
		Logger:     logger,
		ViewLogger: logger,
		Registerer: reg,
		OnEvent:    s.onEvent,
		OnReady: func() {
			if !quiet() {
				return // interrupted while starting: the member leaves at once
			}
			if c.Bool("try") {
				if h := heldByOther(c.Context, sess, role, member); h != "" {
					s.mu.Lock()
					s.gaveUp = ucli.Exit("", ExitRunBusy)
					s.mu.Unlock()
					lw.printf("%s is held by %s; giving up (--try)", role, h)
					stopSession()
					return
				}
			}
			started = true
			if metricsAddr != "" {
				lw.printf("metrics at http://%s/metrics", metricsAddr)
			}
			lw.printf("campaigning for %s as %s (lease %v, renew every %v, stagger %v)",
				role, member, settings.LeaseDuration, settings.RenewInterval, settings.Stagger)
			interrupted = context.AfterFunc(c.Context, func() {
				lw.printf("interrupted; leaving %s", role)
				// CMD's tree is stopped while the member still holds
				// the role and its session's heartbeats go on renewing
				// it; the member leaves (its session's end releases the
				// role) only once the tree is gone.
				s.stopForInterrupt()
				stopSession()
			})
		},
		OnFatal: func(ve *election.ViewError) {
			if !ve.CaughtUp {
				return // said once Run has returned, without a member to leave
			}
			// A fatal error of the view (the topic was deleted, the state
			// cannot be read): the member cannot follow the role any
			// more, and leaves now.
			failure = explainRunError(cfg, fmt.Errorf("following the role topic: %w", ve.Err))
			lw.printf("%s; leaving %s", oneLine(describeError(failure)), role)
		},
	})
	if err != nil {
		if c.Context.Err() != nil {
			return nil // interrupted while connecting
		}
		return explainRunError(cfg, err)
	}
	defer sess.Close()
	go out.follow(sctx, sess.View().Health, outageCheckEvery)
	// A member that may not read the role topic would register, and then
	// wait for a view that never sees it: say so now.
	if err := sess.Transport().CheckRead(c.Context, role); fencing.IsNotAuthorized(err) {
		return err
	}
	// The role's transaction coordinator, looked up now, in the
	// background, is one round trip less in this member's first
	// challenge: the next handover, when it counts. A failure is for the
	// challenge to meet (and retry) as before.
	fctx, stopFind := context.WithTimeout(sctx, settings.TransactionTimeout)
	found := make(chan struct{})
	go func() {
		defer close(found)
		_ = sess.Transport().FindCoordinator(fctx, role)
	}()
	defer func() { stopFind(); <-found }()

	// Run returns once the member has left and the view has stopped;
	// when leaving outlasts runLeaveBudget, krole run leaves without it.
	s.leaving = sctx
	err, abandoned := leaveWithin(sctx, runLeaveBudget, s.cmdStopped, func() error { return sess.Run(sctx, s.work) })
	quiet()
	interrupted()
	s.mu.Lock()
	gaveUp := s.gaveUp
	s.mu.Unlock()
	var ve *election.ViewError
	var inUse *processor.MemberInUseError
	switch {
	case gaveUp != nil && !started:
		return gaveUp
	case errors.As(err, &inUse):
		// Refused: the running process keeps the id, untouched.
		return ucli.Exit(memberInUseLine(inUse), ExitRunMemberInUse)
	case errors.As(err, &ve) && ve.CaughtUp:
		// failure is set, and said, by OnFatal.
	case errors.As(err, &ve): // the view never caught up
		if c.Context.Err() != nil {
			return nil // interrupted while starting
		}
		return explainRunError(cfg, ve.Err)
	case err != nil:
		return err
	case !started:
		return nil // interrupted while starting
	}

	s.mu.Lock()
	resigned, exit, startErr, held, unconfirmed := s.resigned, s.exit, s.startErr, s.held, s.unconfirmed
	s.mu.Unlock()
	deniedMu.Lock()
	authErr := denied
	deniedMu.Unlock()
	switch {
	case abandoned:
		if held == nil {
			// Revoked on the way out, but the member had not returned:
			// its session's end, which releases the role, is written
			// last, so it is not confirmed either.
			held = resigned
		}
		lw.printf("%s", unconfirmedLine(role, member, held, settings.LeaseDuration, true))
	case resigned != nil:
		lw.printf("resigned %s (token %s)", role, *resigned)
	case unconfirmed != nil:
		lw.printf("%s", unconfirmedLine(role, member, unconfirmed, settings.LeaseDuration, false))
	default:
		lw.printf("left %s", role)
	}
	switch {
	case failure != nil:
		return failure
	case authErr != nil:
		return authErr
	case gaveUp != nil:
		return gaveUp
	case startErr != nil:
		return commandError(path, startErr)
	case exit != nil && *exit != 0:
		return ucli.Exit("", *exit)
	}
	return nil
}

// memberInUseLine says what to do first when another live process runs
// as this member, then what showed it.
func memberInUseLine(e *processor.MemberInUseError) string {
	other := "it"
	if e.Other != "" {
		other = "it is instance " + e.Other
	}
	return fmt.Sprintf("another process runs as member %s on role %s; stop it or choose another --member "+
		"(%s: %s; this one, instance %s, left without writing anything)", e.Member, e.Role, other, e.Evidence, e.Instance)
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
	for _, name := range []string{"lease-duration", "renew-interval", "stagger"} {
		if c.IsSet(name) && c.Duration(name) <= 0 {
			return processor.Settings{}, 0, Usagef(c, "--%s %v: must be positive", name, c.Duration(name))
		}
	}
	if c.Duration("kill-timeout") < 0 {
		return processor.Settings{}, 0, Usagef(c, "--kill-timeout %v: must not be negative", c.Duration("kill-timeout"))
	}
	s := processor.Settings{
		LeaseDuration: c.Duration("lease-duration"),
		RenewInterval: c.Duration("renew-interval"),
		Stagger:       c.Duration("stagger"),
	}.WithDefaults()
	if err := s.Validate(); err != nil {
		return s, 0, &UsageError{Err: err,
			Hint: "the renew deadline is 4/5 and the transaction timeout 1/2 of --lease-duration; see 'krole run --help'"}
	}
	kill := s.LeaseDuration - s.RenewDeadline
	if c.IsSet("kill-timeout") {
		kill = c.Duration("kill-timeout")
	}
	return s, kill, nil
}

// heldByOther returns the member that holds role live, as the session's
// view judges the lease, when it is not me; "" otherwise.
func heldByOther(ctx context.Context, sess *election.Session, role codec.Role, me codec.MemberID) codec.MemberID {
	st, err := sess.View().Role(ctx, role)
	if err != nil {
		return ""
	}
	h := server.NewRow(st, time.Now()).Holder
	if h == nil || h.Expired || h.Member == me {
		return ""
	}
	return h.Member
}

// explainRunError turns the errors of a view or transport into what the
// one-shot commands say for them.
func explainRunError(cfg fencing.Config, err error) error {
	if ae := refusal(err, cfg.Topic); ae != nil {
		return ae
	}
	switch {
	case errors.Is(err, sarama.ErrUnknownTopicOrPartition):
		return &missingTopic{Topic: cfg.Topic, Brokers: cfg.Brokers, Err: err}
	case errors.Is(err, fencing.ErrClient), errors.Is(err, sarama.ErrOutOfBrokers):
		return &noBroker{Brokers: cfg.Brokers, SASL: cfg.SASL.Mechanism != "", Plaintext: plaintext(cfg), Err: err}
	}
	return err
}

// serveMetrics serves a registry of its own at http://addr/metrics, for the
// member to register its metrics in, and returns the address it listens
// on. An empty addr serves nothing and returns a nil registerer (no
// metrics) and an empty address.
func serveMetrics(addr string) (prometheus.Registerer, string, func(), error) {
	if addr == "" {
		return nil, "", func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", nil, fmt.Errorf("--metrics-listen: cannot listen on %s: %w", addr, err)
	}
	reg := prometheus.NewRegistry()
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln) // returns when srv is closed
	}()
	return reg, ln.Addr().String(), func() { _ = srv.Close(); <-done }, nil
}
