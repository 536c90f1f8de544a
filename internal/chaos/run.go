package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/devcluster"
	"github.com/krabka/krole/internal/faultnet"
	"github.com/krabka/krole/internal/testcluster"
	"github.com/krabka/krole/processor"
)

// Config of [Run]. Zero fields take the defaults given.
type Config struct {
	// Duration of the fault phase. Default 30s.
	Duration time.Duration
	// Seed of every random choice of the driver. Default 0 (a fixed seed).
	Seed uint64
	// Member is the path of the member program (see BuildMember).
	// Required.
	Member string
	// Dir receives the event logs, the fault log and the members' stderr.
	// Required.
	Dir string
	// Log receives progress lines (each fault as it is injected). Default
	// none.
	Log io.Writer
	// Members is the number of member processes. Default 5.
	Members int
	// Roles is the number of roles, each with every member as a
	// candidate, so that each member holds Roles/Members of them on
	// average (more while others are down), all renewed by its one member
	// session. Default 40.
	Roles int
	// Lease is the lease duration; the other timings are derived from it
	// as processor.Settings does. Default 2s.
	Lease time.Duration
	// RequestTimeout is the members' transport request timeout. Default 1s.
	RequestTimeout time.Duration
	// WriteEvery is each holder's pause between numbered records.
	// Default Roles * 12.5ms (500ms for 40 roles): about 80 numbered
	// records a second from all the members together, whatever the
	// number of roles.
	WriteEvery time.Duration
	// FaultEvery is the mean pause between faults. Default 1s.
	FaultEvery time.Duration
	// MaxClockOffset bounds each member's clock offset, drawn uniformly
	// from [-MaxClockOffset, MaxClockOffset] at every start. Default 0.
	MaxClockOffset time.Duration
	// Tolerance is added to the failover bound; see the package
	// documentation. Default Lease/2.
	Tolerance time.Duration
	// Only, when "member", "request" or "cluster", injects faults of that
	// class only (to look into a finding). Default "": all.
	Only string
	// Settle bounds the wait, after the fault phase, for the stream to
	// consume the whole input. Default 30s.
	Settle time.Duration
	// Scenario is "" (faults at random for Duration) or
	// ScenarioMassFailover (no random faults: one member holding every
	// role is SIGKILLed; Duration bounds each of its waits, and the
	// failover and gap bounds allow 10 ms a role for one candidate to
	// take them all). Default "".
	Scenario string
	// Pipeline is the members' fencing.Config.Pipeline ("on" sends a
	// one-record transaction's commit behind its produce where the
	// coordinator is the partition's leader; kfake orders a connection's
	// requests as Apache Kafka does). Default "": auto, which is off on
	// kfake.
	Pipeline string
	// Postgres is a PostgreSQL server (a URL DSN, superuser) on which Run
	// creates a database of the run's own; the members write rows to it
	// through package sqlfence while they hold a role, and the auditor
	// reads them back. Default "": no database, no rows.
	Postgres string
	// Group, when set, makes the members one group of that name over the
	// roles (package processor, "Groups"): they spread the roles by the
	// group's plan instead of registering for each. Default "": none.
	Group string
}

func (c Config) withDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.Duration, 30*time.Second)
	def(&c.Lease, 2*time.Second)
	def(&c.RequestTimeout, time.Second)
	def(&c.FaultEvery, time.Second)
	def(&c.Tolerance, c.Lease/2)
	def(&c.Settle, 30*time.Second)
	if c.Members == 0 {
		c.Members = 5
	}
	if c.Roles == 0 {
		c.Roles = 40
	}
	def(&c.WriteEvery, time.Duration(c.Roles)*12500*time.Microsecond)
	if c.Log == nil {
		c.Log = io.Discard
	}
	return c
}

// takeover is the Settings.Takeover of the run: in the mass-failover
// scenario 10 ms a role, a few times the pace at which one candidate
// takes them on the embedded cluster (MaxInFlight challenges at a time).
func (c Config) takeover() time.Duration {
	if c.Scenario != ScenarioMassFailover {
		return 0
	}
	return time.Duration(c.Roles) * 10 * time.Millisecond
}

// The topics of a run.
const (
	roleTopic  = "chaos.roles"
	outTopic   = "chaos.out"
	inTopic    = "chaos.in"
	streamOut  = "chaos.stream"
	streamRole = "stream"
	group      = "chaos.stream"
	txnPrefix  = "chaos." // the members' transactional-id prefix
)

var topicParts = map[string]int32{roleTopic: 4, outTopic: 4, inTopic: 2, streamOut: 2}

// BuildMember builds the member program into dir and returns its path.
func BuildMember(ctx context.Context, dir string) (string, error) {
	out := filepath.Join(dir, "member")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "github.com/krabka/krole/internal/chaos/member")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the member program: %w\n%s", err, b)
	}
	return out, nil
}

// Run runs the suite: it starts a 3-broker embedded cluster in this
// process and cfg.Members member processes, fills the stream's input and
// injects faults at random for cfg.Duration, lets the stream catch up,
// stops the members, reads everything back and audits it. It blocks until
// then; ctx ends it early (with an error). The returned history is what
// the report judged.
func Run(ctx context.Context, cfg Config) (*Report, *History, error) {
	cfg = cfg.withDefaults()
	s := processor.Settings{LeaseDuration: cfg.Lease}.WithDefaults()
	dopts, err := testcluster.CapFromEnv(devcluster.Options{Nodes: 3, Topic: roleTopic, Partitions: topicParts[roleTopic]})
	if err != nil {
		return nil, nil, err
	}
	// Every client reaches the brokers through faultnet, so that a member
	// can be cut off the network while it runs on (the partition fault).
	fnet := faultnet.New()
	dopts.WrapListener = fnet.Wrap
	cl, err := devcluster.Start(ctx, dopts)
	if err != nil {
		return nil, nil, err
	}
	defer cl.Close()
	defer func() { _ = fnet.Close() }() // first: held requests dropped, connections ended, then the brokers stop
	brokers := cl.ListenAddrs()
	fc := fencing.Config{Brokers: brokers, Topic: roleTopic}
	for _, t := range []string{outTopic, inTopic, streamOut} {
		if err := devcluster.CreateNewTopic(ctx, fc, devcluster.TopicSpec{Name: t, Partitions: topicParts[t], Replication: 1, CleanupPolicy: "delete"}); err != nil {
			return nil, nil, err
		}
	}
	var dsn string
	if cfg.Postgres != "" {
		if dsn, err = createDatabase(ctx, cfg.Postgres); err != nil {
			return nil, nil, err
		}
	}
	d := &driver{
		dsn:     dsn,
		cfg:     cfg,
		rnd:     rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		cl:      cl,
		net:     fnet,
		brokers: brokers,
		away:    map[int32]bool{},
	}
	for i := range brokers {
		d.nodes = append(d.nodes, int32(i))
	}
	// kfake's controller stays the node it was at the start even when that
	// node is removed, and then no client finds a controller again (a real
	// cluster elects another): never remove it.
	if d.ctrl, err = controller(ctx, brokers); err != nil {
		return nil, nil, err
	}
	if d.faultLog, err = os.Create(filepath.Join(cfg.Dir, "faults.jsonl")); err != nil {
		return nil, nil, err
	}
	defer d.faultLog.Close()
	for i := range cfg.Roles - 1 {
		d.roles = append(d.roles, fmt.Sprintf("r%02d", i))
	}
	d.roles = append(d.roles, streamRole)
	for i := range cfg.Members {
		m := &proc{name: fmt.Sprintf("m%d", i), events: filepath.Join(cfg.Dir, fmt.Sprintf("m%d.events", i))}
		// A fresh log: a directory of an earlier run must not mix in.
		for _, p := range []string{m.events, filepath.Join(cfg.Dir, m.name+".stderr")} {
			if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
				return nil, nil, err
			}
		}
		d.members = append(d.members, m)
	}
	defer d.killAll()
	switch cfg.Scenario {
	case "":
		for _, m := range d.members {
			if err := d.start(m, d.offset()); err != nil {
				return nil, nil, err
			}
		}
	case ScenarioMassFailover:
		if cfg.Members < 2 {
			return nil, nil, fmt.Errorf("scenario %s: %d members, want a holder and at least one candidate", cfg.Scenario, cfg.Members)
		}
	default:
		return nil, nil, fmt.Errorf("unknown scenario %q", cfg.Scenario)
	}

	h := &History{
		Settings: Settings{Lease: s.LeaseDuration, Renew: s.HeartbeatInterval, HeartbeatDeadline: s.HeartbeatDeadline, Stagger: s.Stagger, RequestTimeout: cfg.RequestTimeout, Tolerance: cfg.Tolerance, Takeover: cfg.takeover()},
		Members:  cfg.Members, StreamRole: streamRole,
	}
	fillCtx, stopFill := context.WithCancel(ctx)
	ends := make(chan struct{})
	go func() { d.fill(fillCtx); close(ends) }()

	h.FaultsFrom = now()
	fmt.Fprintf(cfg.Log, "faults from %s for %s\n", stamp(h.FaultsFrom), cfg.Duration)
	deadline := time.Now().Add(cfg.Duration)
	var pending sync.WaitGroup
	if cfg.Scenario == ScenarioMassFailover {
		deadline = time.Now() // no random faults
		if err := d.massFailover(ctx); err != nil {
			stopFill()
			return nil, nil, err
		}
	}
	for time.Now().Before(deadline) {
		wait := time.Duration(d.rnd.ExpFloat64() * float64(cfg.FaultEvery))
		wait = min(wait, time.Until(deadline))
		select {
		case <-ctx.Done():
			stopFill()
			pending.Wait()
			return nil, nil, ctx.Err()
		case <-time.After(wait):
		}
		if time.Now().Before(deadline) {
			d.inject(&pending)
		}
	}
	stopFill()
	h.FaultsUntil = now()
	d.logf("fault phase over; undoing the faults still on")
	pending.Wait() // every fault removed, every member running again
	d.logf("waiting for the input's last appends")
	<-ends
	// An append the filler gave up on may still be held by a delay
	// control (up to 1.5 request timeouts): let it land, then take the
	// input's end from the brokers, not from the filler.
	time.Sleep(2 * cfg.RequestTimeout)
	brokers = cl.ListenAddrs() // the nodes now: some may have been replaced
	inputEnds, err := endOffsets(ctx, brokers, inTopic, topicParts[inTopic])
	if err != nil {
		return nil, nil, err
	}
	fmt.Fprintf(cfg.Log, "faults until %s; waiting for the stream to consume %v\n", stamp(h.FaultsUntil), inputEnds)
	if !d.waitStream(ctx, inputEnds, cfg.Settle) {
		fmt.Fprintf(cfg.Log, "the stream did not consume its input within %s\n", cfg.Settle)
	}

	h.Shutdown = now()
	d.ending.Store(true)
	d.record(Fault{Kind: FaultShutdown, Start: h.Shutdown, End: h.Shutdown})
	d.stopAll(5 * time.Second)
	d.sup.Wait()
	// Transactions a killed member left open are aborted after the
	// transaction timeout; the sentinels' reader waits for that anyway.
	if err := writeSentinels(ctx, brokers, topicParts); err != nil {
		return nil, nil, fmt.Errorf("writing the sentinels: %w", err)
	}
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	recs, err := readAll(rctx, brokers, topicParts)
	if err != nil {
		return nil, nil, err
	}
	if err := d.fillHistory(h, recs); err != nil {
		return nil, nil, err
	}
	if d.dsn != "" {
		if h.Rows, err = readRows(rctx, d.dsn); err != nil {
			return nil, nil, err
		}
	}
	// The whole history, for judging again (ReadHistory) after a change
	// of the auditor.
	if err := WriteHistory(filepath.Join(cfg.Dir, "history.json"), h); err != nil {
		return nil, nil, err
	}
	return Audit(*h), h, nil
}

func now() int64 { return time.Now().UnixMilli() }

type driver struct {
	cfg      Config
	rnd      *rand.Rand // used on the fault loop's goroutine only
	cl       *devcluster.Cluster
	net      *faultnet.Net // in front of every broker: partitions of members
	brokers  []string
	nodes    []int32 // the nodes started, removed ones included (see away)
	roles    []string
	members  []*proc
	faultMu  sync.Mutex
	faultLog *os.File
	faults   []Fault
	away     map[int32]bool // nodes removed and not yet added back
	sup      sync.WaitGroup // the goroutines that wait for member processes
	ending   atomic.Bool    // the members are being stopped for good
	ctrl     int32          // the controller node, never removed
	dsn      string         // the run's PostgreSQL database, "" for none
}

// proc is a member process.
type proc struct {
	name   string
	events string
	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
	busy   bool          // a fault holds it (killed, stopped, restarting)
	off    time.Duration // its clock offset
}

func (d *driver) record(f Fault) {
	d.faultMu.Lock()
	defer d.faultMu.Unlock()
	d.faults = append(d.faults, f)
	b, _ := json.Marshal(f)
	_, _ = d.faultLog.Write(append(b, '\n'))
}

// offset draws a clock offset; on the fault loop's goroutine only.
func (d *driver) offset() time.Duration {
	if d.cfg.MaxClockOffset <= 0 {
		return 0
	}
	return time.Duration(d.rnd.Int64N(int64(2*d.cfg.MaxClockOffset)+1)) - d.cfg.MaxClockOffset
}

// start starts m with clock offset off, and records it.
func (d *driver) start(m *proc, off time.Duration) error {
	stderr, err := os.OpenFile(filepath.Join(d.cfg.Dir, m.name+".stderr"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(d.cfg.Member,
		"-brokers", strings.Join(d.cl.ListenAddrs(), ","),
		"-role-topic", roleTopic, "-out", outTopic, "-in", inTopic, "-stream-out", streamOut, "-group", group,
		"-txn-prefix", txnPrefix, "-member", m.name, "-client-id", clientIDOf(m.name), "-roles", strings.Join(d.roles, ","), "-stream-role", streamRole,
		"-events", m.events, "-clock-offset", off.String(), "-lease", d.cfg.Lease.String(),
		"-request-timeout", d.cfg.RequestTimeout.String(), "-write-every", d.cfg.WriteEvery.String(), "-pipeline", d.cfg.Pipeline,
		"-dsn", d.dsn, "-role-group", d.cfg.Group)
	cmd.Stdout, cmd.Stderr = stderr, stderr
	if err := cmd.Start(); err != nil {
		stderr.Close()
		return err
	}
	done := make(chan struct{})
	m.mu.Lock()
	m.cmd, m.done, m.off = cmd, done, off
	m.mu.Unlock()
	d.sup.Add(1)
	go func() {
		defer d.sup.Done()
		err := cmd.Wait()
		stderr.Close()
		close(done)
		m.mu.Lock()
		expected := m.busy || d.ending.Load()
		if !expected {
			m.busy = true // until started again
		}
		m.mu.Unlock()
		if expected {
			return
		}
		// The member ended on its own: say so, and start it again.
		t := now()
		d.record(Fault{Kind: FaultExit, Target: m.name, Detail: fmt.Sprintf("%v: %s", err, lastLine(filepath.Join(d.cfg.Dir, m.name+".stderr"))), Start: t, End: t})
		d.logf("%s exited on its own (%v); starting it again", m.name, err)
		time.Sleep(time.Second)
		if !d.ending.Load() {
			d.restart(m, off)
		}
	}()
	t := now()
	d.record(Fault{Kind: FaultStart, Target: m.name, Detail: "clock offset " + off.String(), Start: t, End: t})
	fmt.Fprintf(d.cfg.Log, "%s start %s (pid %d, clock offset %s)\n", stamp(t), m.name, cmd.Process.Pid, off)
	return nil
}

func (m *proc) signal(sig syscall.Signal) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd != nil {
		_ = m.cmd.Process.Signal(sig)
	}
}

// stop ends m: SIGTERM, then SIGKILL after grace.
func (m *proc) stop(grace time.Duration) {
	m.mu.Lock()
	done := m.done
	m.mu.Unlock()
	if done == nil {
		return
	}
	m.signal(syscall.SIGCONT)
	m.signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(grace):
		m.signal(syscall.SIGKILL)
		<-done
	}
}

func (d *driver) stopAll(grace time.Duration) {
	var wg sync.WaitGroup
	for _, m := range d.members {
		wg.Go(func() { m.stop(grace) })
	}
	wg.Wait()
}

func (d *driver) killAll() {
	d.ending.Store(true)
	defer d.sup.Wait()
	for _, m := range d.members {
		m.signal(syscall.SIGCONT)
		m.signal(syscall.SIGKILL)
		m.mu.Lock()
		done := m.done
		m.mu.Unlock()
		if done != nil {
			<-done
		}
	}
}

// fill appends numbered values to the stream's input until ctx ends, and
// until its last appends have been answered (or given up on, 15 s after
// ctx ended).
func (d *driver) fill(ctx context.Context) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(d.brokers...), kgo.RecordDeliveryTimeout(10*time.Second))
	if err != nil {
		d.logf("the input's client: %v", err)
		return
	}
	defer cl.Close()
	pctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(15*time.Second, cancel) })
	defer stop()
	var wg sync.WaitGroup
	for i := 0; ctx.Err() == nil; i++ {
		v := []byte(strconv.Itoa(i))
		wg.Add(1)
		cl.Produce(pctx, &kgo.Record{Topic: inTopic, Key: v, Value: v}, func(*kgo.Record, error) { wg.Done() })
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
	wg.Wait()
}

// waitStream waits until the stream's commits, as the members' event logs
// tell them, reach ends in every partition, or within passes.
func (d *driver) waitStream(ctx context.Context, ends map[int32]int64, within time.Duration) bool {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		reached := map[int32]int64{}
		for _, m := range d.members {
			evs, _ := ReadEvents(m.events)
			for _, e := range evs {
				if e.Kind == "commit" {
					for p, o := range e.Offsets {
						reached[p] = max(reached[p], o)
					}
				}
			}
		}
		ok := true
		for p, o := range ends {
			if reached[p] < o {
				ok = false
			}
		}
		if ok {
			return true
		}
		time.Sleep(200 * time.Millisecond)
	}
	return false
}

// fillHistory decodes what was read and the event logs into h.
func (d *driver) fillHistory(h *History, recs map[string][]*kgo.Record) error {
	for _, m := range d.members {
		evs, err := ReadEvents(m.events)
		if err != nil {
			return err
		}
		h.Events = append(h.Events, evs...)
	}
	d.faultMu.Lock()
	h.Faults = append([]Fault(nil), d.faults...)
	d.faultMu.Unlock()
	batch := func(r *kgo.Record) Batch {
		return Batch{Partition: r.Partition, Offset: r.Offset, ProducerID: r.ProducerID, ProducerEpoch: r.ProducerEpoch, Timestamp: r.Timestamp.UnixMilli()}
	}
	for _, r := range recs[roleTopic] {
		if member, ok := strings.CutPrefix(string(r.Key), "krole/session/"); ok && r.Value != nil {
			hb, err := decodeHeartbeat(r.Value)
			if err != nil {
				return fmt.Errorf("session record at %s/%d@%d: %w", roleTopic, r.Partition, r.Offset, err)
			}
			if hb.Member != member {
				return fmt.Errorf("session record at %s/%d@%d: key names member %q, value %q", roleTopic, r.Partition, r.Offset, member, hb.Member)
			}
			hb.Batch = batch(r)
			h.Heartbeats = append(h.Heartbeats, hb)
			continue
		}
		role, ok := strings.CutPrefix(string(r.Key), "krole/lease/")
		if !ok || r.Value == nil {
			continue // registrations and tombstones
		}
		l, err := decodeLease(r.Value)
		if err != nil {
			return fmt.Errorf("lease at %s/%d@%d: %w", roleTopic, r.Partition, r.Offset, err)
		}
		l.Role, l.Batch = role, batch(r)
		h.Leases = append(h.Leases, l)
	}
	for _, r := range recs[outTopic] {
		var rec Record
		if err := json.Unmarshal(r.Value, &rec); err != nil {
			return fmt.Errorf("record at %s/%d@%d: %w", outTopic, r.Partition, r.Offset, err)
		}
		rec.Batch = batch(r)
		h.Records = append(h.Records, rec)
	}
	for _, r := range recs[inTopic] {
		h.Inputs = append(h.Inputs, string(r.Value))
	}
	for _, r := range recs[streamOut] {
		h.Outputs = append(h.Outputs, StreamOut{Value: string(r.Value), Batch: batch(r)})
	}
	return nil
}

// wireValue is a value of the role topic in krole's JSON value format,
// read here on its own rather than through package codec.
type wireValue struct {
	V          int          `json:"v"`
	Kind       string       `json:"kind"`
	Member     string       `json:"member"`
	ProducerID *int64       `json:"producer_id"`
	Epoch      *int16       `json:"epoch"`
	GrantedAt  *int64       `json:"granted_at"`
	Deadline   *int64       `json:"deadline"`
	Session    *wireSession `json:"session"`
	Excluded   []string     `json:"excluded"`
}

type wireSession struct {
	ProducerID *int64 `json:"producer_id"`
	Epoch      *int16 `json:"epoch"`
	Nonce      string `json:"nonce"`
}

func (w *wireSession) session() (*Session, error) {
	if w == nil {
		return nil, nil
	}
	if w.ProducerID == nil || w.Epoch == nil || w.Nonce == "" {
		return nil, errors.New("a session without its producer id, epoch or nonce")
	}
	return &Session{PID: *w.ProducerID, Epoch: *w.Epoch, Nonce: w.Nonce}, nil
}

// decodeLease reads a lease value of the role topic (with the member
// session it names, if any).
func decodeLease(b []byte) (Lease, error) {
	var w wireValue
	if err := json.Unmarshal(b, &w); err != nil {
		return Lease{}, err
	}
	if w.Kind != "lease" || w.ProducerID == nil || w.Epoch == nil || w.GrantedAt == nil || w.Deadline == nil {
		return Lease{}, errors.New("not a lease value: " + string(b))
	}
	s, err := w.Session.session()
	if err != nil {
		return Lease{}, fmt.Errorf("lease value %s: %w", b, err)
	}
	return Lease{Member: w.Member, Token: Token{PID: *w.ProducerID, Epoch: *w.Epoch}, GrantedAt: *w.GrantedAt, Deadline: *w.Deadline, Session: s}, nil
}

// decodeHeartbeat reads a member session's record of the role topic: a
// heartbeat ("heartbeat", with its times and excluded roles) or a session
// end ("session_end").
func decodeHeartbeat(b []byte) (Heartbeat, error) {
	var w wireValue
	if err := json.Unmarshal(b, &w); err != nil {
		return Heartbeat{}, err
	}
	s, err := w.Session.session()
	switch {
	case err != nil:
		return Heartbeat{}, fmt.Errorf("session value %s: %w", b, err)
	case s == nil:
		return Heartbeat{}, errors.New("a session value without its session: " + string(b))
	}
	hb := Heartbeat{Member: w.Member, Session: *s, Excluded: w.Excluded}
	switch w.Kind {
	case "session_end":
		hb.End = true
	case "heartbeat":
		if w.GrantedAt == nil || w.Deadline == nil {
			return Heartbeat{}, errors.New("a heartbeat without its times: " + string(b))
		}
		hb.GrantedAt, hb.Deadline = *w.GrantedAt, *w.Deadline
	default:
		return Heartbeat{}, errors.New("not a heartbeat or session end: " + string(b))
	}
	return hb, nil
}

// lastLine is the last non-empty line of the file at path, clipped.
func lastLine(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	l := lines[len(lines)-1]
	if len(l) > 300 {
		l = l[:300]
	}
	return l
}
