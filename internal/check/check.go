package check

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/IBM/sarama"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/ctxcall"
	"github.com/krabka/krole/processor"
)

// As is the principal whose permissions a run checks.
type As string

// The principals of [Options].As.
const (
	// Member: a principal that runs `krole run` or a processor.Member.
	// Every check runs.
	Member As = "member"
	// Operator: a member that also creates and configures the role
	// topic (`krole init`). Every check runs, and the ACLs of init are
	// tried too.
	Operator As = "operator"
	// Viewer: a read-only principal (`krole table`, `serve`, `records`,
	// `describe`). Only the checks that write nothing run; the others are
	// reported as skipped.
	Viewer As = "viewer"
)

// ParseAs returns the principal s names, or an error naming the choices.
func ParseAs(s string) (As, error) {
	switch a := As(strings.ToLower(strings.TrimSpace(s))); a {
	case Member, Operator, Viewer:
		return a, nil
	case "":
		return Member, nil
	}
	return "", fmt.Errorf("--as %q: must be member, operator or viewer", s)
}

// Defaults of [Options].
const (
	DefaultTimeout   = 15 * time.Second
	DefaultBudget    = 90 * time.Second
	DefaultBurst     = 20
	DefaultClockWarn = time.Second
)

// Options say what to check and how long each check may take.
type Options struct {
	// Config reaches the cluster (brokers, topic, transactional-id
	// prefix, TLS, SASL), as every other command connects.
	Config fencing.Config
	// As is the principal whose permissions are tried. Default Member.
	As As
	// LeaseDuration is the lease the members will run with; the
	// transaction timeout krole sends is derived from it as
	// processor.Settings derives it (half of it). Default
	// processor.DefaultLeaseDuration.
	LeaseDuration time.Duration
	// Timeout bounds each check. Default [DefaultTimeout].
	Timeout time.Duration
	// Budget bounds the whole run but the clean-up, which always gets
	// its own Timeout. Default [DefaultBudget].
	Budget time.Duration
	// Burst is the number of lease transactions the latency check
	// times. Default [DefaultBurst].
	Burst int
	// ClockWarn is the clock offset above which the clock check warns.
	// Default [DefaultClockWarn].
	ClockWarn time.Duration
	// Dial connects a transport; default fencing.NewBrokerTransport. The
	// command line passes its own, whose errors say what to fix.
	Dial func(fencing.Config) (*fencing.BrokerTransport, error)
	// Explain turns an error into the one line a result shows; default
	// err.Error().
	Explain func(error) string

	// OnResult, when set, is called with each result as soon as its
	// check has run, in order (the command line prints them as they
	// come). It must not block for long.
	OnResult func(Result)

	// scratch, when set, is the scratch role instead of a random one
	// (tests of the guard against touching a role in use).
	scratch codec.Role
	// now, when set, is the local clock the clock check reads instead of
	// time.Now (tests of its warning: a local clock off by d is a broker
	// clock off by -d).
	now func() time.Time
}

func (o Options) withDefaults() Options {
	o.Config = o.Config.WithDefaults()
	if o.As == "" {
		o.As = Member
	}
	if o.LeaseDuration <= 0 {
		o.LeaseDuration = processor.DefaultLeaseDuration
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Budget <= 0 {
		o.Budget = DefaultBudget
	}
	if o.Burst <= 0 {
		o.Burst = DefaultBurst
	}
	if o.ClockWarn <= 0 {
		o.ClockWarn = DefaultClockWarn
	}
	if o.Dial == nil {
		o.Dial = fencing.NewBrokerTransport
	}
	if o.now == nil {
		o.now = time.Now
	}
	if o.Explain == nil {
		o.Explain = func(err error) string { return err.Error() }
	}
	return o
}

// Result is the outcome of one check.
type Result struct {
	// Name names the check (see the package documentation).
	Name string `json:"name"`
	// OK is false when the check failed: krole cannot rely on what it
	// checks. A warning or a skipped check is OK.
	OK bool `json:"ok"`
	// Warn is true when the check passed with a caveat the detail states.
	Warn bool `json:"warn,omitempty"`
	// Skipped is true when the check did not run (--as viewer, or
	// nothing to check); Detail says why.
	Skipped bool `json:"skipped,omitempty"`
	// Detail says what the check found, in one line.
	Detail string `json:"detail"`
	// Fix says what to do, in one line; empty when there is nothing to
	// do.
	Fix string `json:"fix"`
}

// Status is PASS, WARN, FAIL or SKIP.
func (r Result) Status() string {
	switch {
	case !r.OK:
		return "FAIL"
	case r.Skipped:
		return "SKIP"
	case r.Warn:
		return "WARN"
	}
	return "PASS"
}

func pass(name, format string, args ...any) Result {
	return Result{Name: name, OK: true, Detail: fmt.Sprintf(format, args...)}
}

func warn(name, fix, format string, args ...any) Result {
	return Result{Name: name, OK: true, Warn: true, Detail: fmt.Sprintf(format, args...), Fix: fix}
}

func fail(name, fix, format string, args ...any) Result {
	return Result{Name: name, Detail: fmt.Sprintf(format, args...), Fix: fix}
}

func skip(name, format string, args ...any) Result {
	return Result{Name: name, OK: true, Skipped: true, Detail: fmt.Sprintf(format, args...)}
}

// Report is the outcome of a run: every check in the order it ran.
type Report struct {
	Checks []Result `json:"checks"`
	// Interrupted says what stopped the run when the caller's context
	// ended before every check ran ("interrupted by SIGTERM": its cause);
	// the checks not run are skipped, and say so.
	Interrupted string `json:"interrupted,omitempty"`
}

// OK reports whether no check failed.
func (r Report) OK() bool {
	for _, c := range r.Checks {
		if !c.OK {
			return false
		}
	}
	return true
}

// Check names, in the order a run reports them.
const (
	NameReachability   = "reachability"
	NameVersions       = "versions"
	NameRoleTopic      = "role-topic"
	NameRolePartitions = "role-partitions"
	NameDurability     = "durability"
	NameACLTopicRead   = "acl.topic.read"
	NameACLTopicWrite  = "acl.topic.write"
	NameACLTxnWrite    = "acl.txn.write"
	NameACLTxnDescribe = "acl.txn.describe"
	NameACLTxnSession  = "acl.txn.session"
	NameACLTopicCreate = "acl.topic.create"
	NameACLTopicAlter  = "acl.topic.alter-configs"
	NameTxnInit        = "transactions.init"
	NameTxnFence       = "transactions.fence"
	NameTxnReadCommit  = "transactions.read-committed"
	NameTimeouts       = "timeouts"
	NameDescribe       = "describe"
	NameClock          = "clock"
	NameLatency        = "latency"
	NameCleanup        = "cleanup"
)

// ScratchPrefix begins the name of the scratch role of every run: the
// role is ScratchPrefix followed by random hex, and its transactional id
// is the configured prefix followed by the role.
const ScratchPrefix = "krole-check."

// runner holds what the checks of one run share.
type runner struct {
	caller  context.Context // Run's: when it ends, the run was interrupted
	opts    Options
	cfg     fencing.Config
	client  sarama.Client // raw requests: ApiVersions, configs, fetches
	main    *fencing.BrokerTransport
	extra   []*fencing.BrokerTransport
	role    codec.Role
	member  codec.MemberID
	txnID   string
	brokers int

	// Filled in as the checks run.
	freshOK    bool          // the scratch role was found unknown to the cluster
	freshErr   error         // why the scratch role is not fresh
	registered bool          // the scratch registration may exist
	usedTxn    bool          // an InitProducerId on the scratch id was sent
	initOK     bool          // InitProducerId worked
	current    *holding      // the newest token of the scratch role, when known
	clock      *clockReading // from the open transaction of the fence scenario
}

// holding is a token and the transport that minted it.
type holding struct {
	t   *fencing.BrokerTransport
	tok codec.Token
}

// Run runs every check opts asks for, each within opts.Timeout, and
// returns the report. It writes only to a scratch role of its own (see
// the package documentation) and tombstones what it wrote before it
// returns. When no broker answers, the report holds the reachability
// check alone.
func Run(ctx context.Context, opts Options) Report {
	opts = opts.withDefaults()
	r := &runner{caller: ctx, opts: opts, cfg: opts.Config}
	var rep Report
	add := func(res Result) {
		rep.Checks = append(rep.Checks, res)
		if opts.OnResult != nil {
			opts.OnResult(res)
		}
	}

	res := r.reach(ctx)
	if ctx.Err() != nil {
		res = skip(NameReachability, "cut short: %s", stopped(ctx))
	}
	add(res)
	if !res.OK || ctx.Err() != nil {
		if ctx.Err() != nil {
			rep.Interrupted = stopped(ctx)
		}
		return rep
	}
	defer r.close()

	budget, cancel := context.WithTimeout(ctx, opts.Budget)
	defer cancel()
	writes := opts.As != Viewer
	// A step runs one check, or several (names) that share what they
	// observe.
	type step struct {
		names  []string
		writes bool
		fn     func(context.Context) []Result
	}
	one := func(name string, writes bool, fn func(context.Context) Result) step {
		return step{[]string{name}, writes, func(ctx context.Context) []Result { return []Result{fn(ctx)} }}
	}
	steps := []step{
		one(NameVersions, false, r.versions),
		one(NameRoleTopic, false, r.roleTopic),
		one(NameRolePartitions, false, r.rolePartitions),
		one(NameDurability, false, r.durability),
		one(NameACLTopicRead, false, r.aclTopicRead),
		one(NameACLTopicWrite, true, r.aclTopicWrite),
		one(NameACLTxnWrite, true, r.aclTxnWrite),
		one(NameACLTxnDescribe, false, r.aclTxnDescribe),
		one(NameACLTxnSession, true, r.aclTxnSession),
	}
	if opts.As == Operator {
		steps = append(steps,
			one(NameACLTopicDescribeConfigs, false, r.aclTopicDescribeConfigs),
			one(NameACLTopicCreate, false, r.aclTopicCreate),
			one(NameACLTopicAlter, false, r.aclTopicAlter))
	}
	steps = append(steps,
		one(NameTxnInit, true, r.txnInit),
		step{[]string{NameTxnFence, NameTxnReadCommit}, true, r.fenceScenario},
		one(NameTimeouts, false, r.timeouts),
		one(NameDescribe, false, r.describe),
		one(NameClock, true, r.clockCheck),
		one(NameLatency, true, r.latency),
	)
	for _, s := range steps {
		if s.writes && !writes {
			for _, n := range s.names {
				add(skip(n, "not run with --as viewer: it writes (to a scratch role)"))
			}
			continue
		}
		for _, res := range r.bounded(budget, s.names, s.fn) {
			add(res)
		}
	}
	// The clean-up runs whatever happened before, even when ctx or the
	// budget ended, within a timeout of its own.
	cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), opts.Timeout)
	defer ccancel()
	add(r.cleanup(cctx))
	if ctx.Err() != nil {
		rep.Interrupted = stopped(ctx)
	}
	return rep
}

// stopped says what ended ctx, the caller's: its cause ("interrupted by
// SIGTERM"), or "interrupted" when it has none of its own.
func stopped(ctx context.Context) string {
	if c := context.Cause(ctx); c != nil && c != context.Canceled {
		return c.Error()
	}
	return "interrupted"
}

// bounded runs fn, the step of the checks names, within the run's
// timeout per check (and the budget), and turns a check that ran out of
// time into a failure that says so.
func (r *runner) bounded(budget context.Context, names []string, fn func(context.Context) []Result) []Result {
	all := func(fix, format string, args ...any) []Result {
		var out []Result
		for _, n := range names {
			out = append(out, fail(n, fix, format, args...))
		}
		return out
	}
	if r.caller.Err() != nil {
		var out []Result
		for _, n := range names {
			out = append(out, skip(n, "not run: %s", stopped(r.caller)))
		}
		return out
	}
	if budget.Err() != nil {
		return all("run krole check again; if it recurs, check the network to the brokers",
			"not run: the run's budget (%v) ran out before it", r.opts.Budget)
	}
	ctx, cancel := context.WithTimeout(budget, r.opts.Timeout)
	defer cancel()
	out := func() (out []Result) {
		defer func() {
			if p := recover(); p != nil {
				out = all("please report it", "internal error: %v", p)
			}
		}()
		return fn(ctx)
	}()
	for i := range out {
		switch {
		case out[i].OK || ctx.Err() == nil:
		case r.caller.Err() != nil:
			// Stopped by the caller, not by the cluster: it proves nothing.
			out[i] = skip(out[i].Name, "cut short: %s", stopped(r.caller))
		case strings.Contains(out[i].Detail, "no answer within") || strings.Contains(out[i].Detail, "budget"):
		case budget.Err() != nil:
			out[i].Detail = fmt.Sprintf("the run's budget (%v) ran out during it: %s", r.opts.Budget, out[i].Detail)
		default:
			out[i].Detail = fmt.Sprintf("no answer within %v: %s", r.opts.Timeout, out[i].Detail)
		}
		out[i].Detail = oneLine(out[i].Detail)
		out[i].Fix = oneLine(out[i].Fix)
	}
	return out
}

// reach connects the transport every check uses, and the raw client.
func (r *runner) reach(ctx context.Context) Result {
	ctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	fix := "check --brokers, and --tls/--sasl-* against the listener's protocol"
	// This transport's InitProducerIds (acl.txn.write, the cleanup's
	// bump) open no transaction: a short timeout keeps the brokers'
	// transaction.max.timeout.ms a matter of transactions.init and
	// timeouts, not of reachability.
	t, err := r.dial(ctx, r.cfg, min(time.Second, r.txnTimeout()))
	if err != nil {
		return fail(NameReachability, fix, "%s", oneLine(r.explain(err)))
	}
	r.main = t
	sc, err := r.cfg.Sarama()
	if err != nil {
		return fail(NameReachability, fix, "%s", oneLine(r.explain(err)))
	}
	sc.Version = sarama.V3_0_0_0 // DescribeTransactions; requests are clamped to each broker's versions
	sc.Net.ReadTimeout = r.opts.Timeout
	client, err := ctxcall.Do(ctx, nil, func() (sarama.Client, error) { return sarama.NewClient(r.cfg.Brokers, sc) })
	if err != nil {
		return fail(NameReachability, fix, "no broker answered at %s: %s", strings.Join(r.cfg.Brokers, ","), oneLine(r.explain(err)))
	}
	r.client = client
	r.brokers = len(client.Brokers())
	role, member := scratchNames()
	if r.opts.scratch != "" {
		role = r.opts.scratch
	}
	r.role, r.member, r.txnID = role, member, r.cfg.TransactionalID(string(role))
	how := "plaintext"
	// A CA or a client certificate implies TLS (fencing.Config.Sarama).
	tls := r.cfg.TLS.Enable || r.cfg.TLS.CAFile != "" || r.cfg.TLS.CertFile != ""
	switch {
	case tls && r.cfg.SASL.Mechanism != "":
		how = "TLS with SASL " + r.cfg.SASL.Mechanism
	case tls:
		how = "TLS"
	case r.cfg.SASL.Mechanism != "":
		how = "SASL " + r.cfg.SASL.Mechanism
	}
	ctrl := ""
	if b, err := ctxcall.Do(ctx, nil, client.Controller); err == nil && b != nil {
		ctrl = fmt.Sprintf(", controller %d", b.ID())
	}
	return pass(NameReachability, "%d broker(s) answered at %s over %s%s", r.brokers, strings.Join(r.cfg.Brokers, ","), how, ctrl)
}

// dial opens a transport within ctx, with transaction timeout txn. Its
// request timeout is at most the check timeout, so that a call and Close
// end within it.
func (r *runner) dial(ctx context.Context, cfg fencing.Config, txn time.Duration) (*fencing.BrokerTransport, error) {
	if cfg.RequestTimeout > r.opts.Timeout {
		cfg.RequestTimeout = r.opts.Timeout
	}
	cfg.TxnTimeout = txn
	type res struct {
		t   *fencing.BrokerTransport
		err error
	}
	ch := make(chan res, 1)
	go func() {
		t, err := r.opts.Dial(cfg)
		ch <- res{t, err}
	}()
	select {
	case v := <-ch:
		return v.t, v.err
	case <-ctx.Done():
		go func() {
			if v := <-ch; v.t != nil {
				_ = v.t.Close()
			}
		}()
		return nil, fmt.Errorf("no broker answered at %s within %v", strings.Join(cfg.Brokers, ","), r.opts.Timeout)
	}
}

// transport returns one more transport for the scratch role, with the
// transaction timeout of the configured lease; the run closes it at the
// end.
func (r *runner) transport(ctx context.Context) (*fencing.BrokerTransport, error) {
	t, err := r.dial(ctx, r.cfg, r.txnTimeout())
	if err != nil {
		return nil, err
	}
	r.extra = append(r.extra, t)
	return t, nil
}

// txnTimeout is the transaction timeout a member with the configured
// lease sends.
func (r *runner) txnTimeout() time.Duration {
	return processor.Settings{LeaseDuration: r.opts.LeaseDuration}.WithDefaults().TransactionTimeout
}

func (r *runner) explain(err error) string {
	if err == nil {
		return "no error"
	}
	return r.opts.Explain(err)
}

func (r *runner) close() {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, t := range append(r.extra, r.main) {
			if t != nil {
				_ = t.Close()
			}
		}
		if r.client != nil {
			_ = r.client.Close()
		}
	}()
	select {
	case <-done:
	case <-time.After(3 * r.opts.Timeout):
	}
}

// scratchNames returns a fresh scratch role and member.
func scratchNames() (codec.Role, codec.MemberID) {
	var b [6]byte
	_, _ = rand.Read(b[:])
	s := hex.EncodeToString(b[:])
	return codec.Role(ScratchPrefix + s), codec.MemberID("krole-check-" + s)
}

// oneLine joins the lines of s.
func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " ")), " ")
}

// codeNames names the broker codes the checks report.
var codeNames = map[sarama.KError]string{
	0:   "NONE",
	3:   "UNKNOWN_TOPIC_OR_PARTITION",
	29:  "TOPIC_AUTHORIZATION_FAILED",
	31:  "CLUSTER_AUTHORIZATION_FAILED",
	35:  "UNSUPPORTED_VERSION",
	36:  "TOPIC_ALREADY_EXISTS",
	47:  "INVALID_PRODUCER_EPOCH",
	48:  "INVALID_TXN_STATE",
	49:  "INVALID_PRODUCER_ID_MAPPING",
	50:  "INVALID_TRANSACTION_TIMEOUT",
	51:  "CONCURRENT_TRANSACTIONS",
	53:  "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
	59:  "UNKNOWN_PRODUCER_ID",
	90:  "PRODUCER_FENCED",
	105: "TRANSACTIONAL_ID_NOT_FOUND",
}

// codeName is "NAME (n)".
func codeName(k sarama.KError) string {
	if n, ok := codeNames[k]; ok {
		return fmt.Sprintf("%s (%d)", n, int16(k))
	}
	return fmt.Sprintf("code %d", int16(k))
}

// codeOf returns the broker code err carries, and whether it carries one.
// fencing wraps a code as a sarama.KError, or as an error that matches
// one with errors.Is (the codes sarama's table lacks).
func codeOf(err error) (sarama.KError, bool) {
	if err == nil {
		return 0, false
	}
	if ks := codesIn(err); len(ks) > 0 {
		return ks[0], true
	}
	var k sarama.KError
	if errors.As(err, &k) {
		return k, true
	}
	return 0, false
}

// codesIn returns the named broker codes err carries (an error of krole's
// can carry two: a refusal and the answer to the abort that followed), in
// the order of their numbers.
func codesIn(err error) []sarama.KError {
	var out []sarama.KError
	for k := range codeNames {
		if k != 0 && errors.Is(err, k) {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}
