// Command member is one member process of the chaos suite (package
// internal/chaos): it campaigns for every role it is given through an
// election.Session whose Config.Clock runs Offset ahead of (or behind) the
// system clock, for the member and its view alike. While it holds a role
// it writes numbered records under the holding's token through a
// fencing.Writer, and, given -dsn, rows to PostgreSQL through package
// sqlfence under the holding's fencing number; while it holds the stream
// role it runs an exactly-once processor/stream pipeline instead.
//
// It appends one JSON object per line (chaos.Event) to the file -events
// names, each line one write(2) to a file opened O_APPEND, so a SIGKILL
// loses no line already written; docs/CHAOS.md lists the events.
//
// SIGTERM or SIGINT end the member gracefully: a member of a group
// (-role-group) drains first; then it resigns its roles and deregisters.
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/election"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/processor"
	"github.com/krabka/krole/processor/stream"
	"github.com/krabka/krole/sqlfence"
)

func main() {
	var (
		brokers    = flag.String("brokers", "", "comma-separated broker addresses")
		roleTopic  = flag.String("role-topic", "", "the role topic")
		txnPrefix  = flag.String("txn-prefix", "chaos.", "the transactional-id prefix")
		out        = flag.String("out", "", "the topic of the numbered records")
		in         = flag.String("in", "", "the stream's input topic")
		streamOut  = flag.String("stream-out", "", "the stream's output topic")
		group      = flag.String("group", "", "the stream's consumer group")
		member     = flag.String("member", "", "this member's id")
		clientID   = flag.String("client-id", "", "the client id its connections send (its view's add to it); the driver partitions the member by it")
		roles      = flag.String("roles", "", "comma-separated roles")
		streamRole = flag.String("stream-role", "", "the role that runs the stream")
		events     = flag.String("events", "", "the event log (JSON lines, appended)")
		offset     = flag.Duration("clock-offset", 0, "how far this member's clock runs ahead of the system clock")
		lease      = flag.Duration("lease", 2*time.Second, "the lease duration")
		reqTimeout = flag.Duration("request-timeout", time.Second, "the transport's request timeout")
		every      = flag.Duration("write-every", 250*time.Millisecond, "the pause between numbered records")
		verbose    = flag.Bool("v", false, "log the member's transitions to stderr")
		pipeline   = flag.String("pipeline", "", "the transport's Pipeline setting: auto (\"\"), on or off")
		roleGroup  = flag.String("role-group", "", "the group of roles the member is in (none: a candidate of each role)")
		dsn        = flag.String("dsn", "", "the PostgreSQL database to write rows to through the fence (none: no rows)")
	)
	flag.Parse()
	f, err := os.OpenFile(*events, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "member:", err)
		os.Exit(2)
	}
	m := &memberProc{
		log:       &eventLog{f: f, member: *member, clk: offsetClock{*offset}},
		out:       *out,
		in:        *in,
		streamOut: *streamOut,
		group:     *group,
		stream:    codec.Role(*streamRole),
		every:     *every,
	}
	if *dsn != "" {
		// A few connections: a member taking hundreds of roles at once
		// must not exhaust the server's. The fence prepares its
		// statements on the pool, outside the transaction that needs
		// them, so the transactions leave one connection free.
		db, err := sql.Open("pgx", *dsn)
		if err == nil {
			db.SetMaxOpenConns(dbConns + 1)
			m.fence, err = sqlfence.New(db)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "member:", err)
			os.Exit(2)
		}
		m.dbSlots = make(chan struct{}, dbConns)
		defer db.Close()
		defer m.fence.Close()
	}
	var rs []codec.Role
	for _, r := range strings.Split(*roles, ",") {
		rs = append(rs, codec.Role(r))
	}
	cluster := fencing.Config{
		Brokers:        strings.Split(*brokers, ","),
		Topic:          *roleTopic,
		TxnPrefix:      *txnPrefix,
		ClientID:       *clientID,
		DialTimeout:    *reqTimeout,
		RequestTimeout: *reqTimeout,
		Pipeline:       *pipeline,
	}
	// Warnings go to stderr (the driver keeps it as <member>.stderr): the
	// member's failed calls and the stream's retried transactions and
	// consumer errors. -v adds every transition.
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	m.logger = logger
	// SIGTERM or SIGINT: a member of a group drains first (its roles go
	// to the others by handovers), then every member leaves.
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sigs
		m.drain()
		stop()
	}()
	m.log.write(Event{Kind: "start", Offset: offset.Milliseconds(), PID: int64(os.Getpid())})
	if *roleGroup != "" {
		m.roleGroup = &processor.Group{Name: *roleGroup}
	}
	if err := m.run(ctx, cluster, codec.MemberID(*member), rs, *lease, offsetClock{*offset}, logger); err != nil {
		fmt.Fprintln(os.Stderr, "member:", err)
		os.Exit(1)
	}
}

// Event is one line of the event log; chaos.Event reads it.
type Event struct {
	Kind    string          `json:"kind"`
	Role    string          `json:"role,omitempty"`
	Member  string          `json:"member"`
	PID     int64           `json:"pid,omitempty"` // the token's producer id; the OS pid on "start"
	Epoch   int16           `json:"epoch"`
	At      int64           `json:"at"`   // the member's own clock, Unix ms
	Wall    int64           `json:"wall"` // the system clock, Unix ms
	Reason  string          `json:"reason,omitempty"`
	Err     string          `json:"err,omitempty"`
	Offset  int64           `json:"offset_ms,omitempty"`
	Offsets map[int32]int64 `json:"offsets,omitempty"`
	Seq     int64           `json:"seq,omitempty"`     // "write": the record's sequence number
	Began   int64           `json:"began,omitempty"`   // "write": the system time the call began, Unix ms
	Outcome string          `json:"outcome,omitempty"` // "write": what the call returned
	Fence   int64           `json:"fence,omitempty"`   // the holding's fencing number (elected, revoked, dbwrite)
}

type eventLog struct {
	mu     sync.Mutex
	f      *os.File
	member string
	clk    offsetClock
}

func (l *eventLog) write(e Event) {
	e.Member = l.member
	if e.At == 0 {
		e.At = l.clk.Now().UnixMilli()
	}
	e.Wall = time.Now().UnixMilli()
	b, _ := json.Marshal(e)
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = l.f.Write(append(b, '\n'))
}

// offsetClock is the system clock shifted by d: wall readings and
// monotonic readings move together, as on a machine whose clock is set d
// ahead.
type offsetClock struct{ d time.Duration }

func (c offsetClock) Now() time.Time { return time.Now().Add(c.d) }
func (c offsetClock) NewTimer(d time.Duration) processor.Timer {
	return processor.SystemClock().NewTimer(d)
}
func (c offsetClock) AfterFunc(d time.Duration, f func()) processor.Timer {
	return processor.SystemClock().AfterFunc(d, f)
}

type memberProc struct {
	log                       *eventLog
	tr                        *fencing.BrokerTransport
	out, in, streamOut, group string
	stream                    codec.Role
	every, lease              time.Duration
	logger                    *slog.Logger
	fence                     *sqlfence.Fence  // nil: no rows
	dbSlots                   chan struct{}    // one per transaction in flight
	roleGroup                 *processor.Group // nil: no group

	mu      sync.Mutex
	session *election.Session // once running
}

// drain drains a group member's session, bounded by two leases; nothing
// for a member of no group or not running yet.
func (m *memberProc) drain() {
	m.mu.Lock()
	s := m.session
	m.mu.Unlock()
	if s == nil || m.roleGroup == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*m.lease)
	defer cancel()
	if err := s.Drain(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "member: drain:", err)
	}
}

// dbConns bounds a member's transactions in flight.
const dbConns = 4

func (m *memberProc) run(ctx context.Context, cluster fencing.Config, me codec.MemberID, roles []codec.Role, lease time.Duration, clk offsetClock, logger *slog.Logger) error {
	cfg := election.Config{
		Cluster:  cluster,
		Member:   me,
		Roles:    roles,
		Settings: processor.Settings{LeaseDuration: lease},
		Group:    m.roleGroup,
		Clock:    clk,
		Logger:   logger,
		OnEvent:  m.onEvent,
		OnMinted: func(role codec.Role, tok codec.Token) {
			m.log.write(Event{Kind: "minted", Role: string(role), PID: tok.ProducerID, Epoch: tok.Epoch})
		},
	}
	// A broker may be away (a fault): keep trying until ctx ends.
	var (
		s   *election.Session
		err error
	)
	for {
		s, err = election.New(cfg)
		if err == nil {
			break
		}
		if !errors.Is(err, fencing.ErrClient) {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(200 * time.Millisecond):
		}
	}
	m.tr = s.Transport()
	m.mu.Lock()
	m.session, m.lease = s, lease
	m.mu.Unlock()
	// A view that fails ends the member (Run returns a *election.ViewError).
	return s.Run(ctx, m.work)
}

func (m *memberProc) onEvent(e processor.Event) {
	switch e.Kind {
	case processor.Elected:
		m.log.write(Event{Kind: "elected", Role: string(e.Role), PID: e.Token.ProducerID, Epoch: e.Token.Epoch, At: e.At.UnixMilli(), Fence: e.Fence})
	case processor.Revoked:
		ev := Event{Kind: "revoked", Role: string(e.Role), PID: e.Token.ProducerID, Epoch: e.Token.Epoch, At: e.At.UnixMilli(), Reason: string(e.Reason), Fence: e.Fence}
		if e.Err != nil {
			ev.Err = e.Err.Error()
		}
		m.log.write(ev)
	}
}

// Record is the value of a numbered record; chaos.Record reads it.
type Record struct {
	Role   string `json:"role"`
	Member string `json:"member"`
	PID    int64  `json:"pid"`
	Epoch  int16  `json:"epoch"`
	Seq    int64  `json:"seq"`
}

func (m *memberProc) work(ctx context.Context, held processor.Held) error {
	if held.Role == m.stream {
		err := stream.Run(ctx, stream.Config{
			Transport: m.tr,
			Group:     m.group,
			Input:     m.in,
			Output:    m.streamOut,
			BatchSize: 20,
			Logger:    m.logger.With("member", string(held.Member)),
			OnCommit: func(c stream.Commit) {
				m.log.write(Event{Kind: "commit", Role: string(held.Role), PID: held.Token.ProducerID, Epoch: held.Token.Epoch, Offsets: c.Offsets})
			},
		}, held.Role, held.Token)
		if err != nil && ctx.Err() == nil && !errors.Is(err, fencing.ErrFenced) {
			return err // the member resigns and campaigns again
		}
		return nil
	}
	if m.fence != nil {
		rows := make(chan struct{})
		go func() { defer close(rows); m.writeRows(ctx, held) }()
		defer func() { <-rows }()
	}
	w := m.tr.Writer(held.Role, held.Token)
	key := []byte(held.Role)
	for seq := int64(0); ; seq++ {
		v, _ := json.Marshal(Record{Role: string(held.Role), Member: string(held.Member), PID: held.Token.ProducerID, Epoch: held.Token.Epoch, Seq: seq})
		began := time.Now().UnixMilli()
		err := w.Write(ctx, fencing.Message{Topic: m.out, Partition: fencing.PartitionByKey, Key: key, Value: v})
		ev := Event{Kind: "write", Role: string(held.Role), PID: held.Token.ProducerID, Epoch: held.Token.Epoch, Seq: seq, Began: began, Outcome: outcome(err)}
		if err != nil {
			ev.Err = err.Error()
		}
		m.log.write(ev)
		if errors.Is(err, fencing.ErrFenced) || ctx.Err() != nil {
			return nil // the role is lost; the member notices on its own
		}
		// Any other error: the record is not committed
		// (docs/GUARANTEES.md, section 2); the next one goes on under
		// the same token.
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(m.every):
		}
	}
}

// The tables of the rows (the driver creates them): a counter row per
// role, and the rows, each numbered (pos) by the counter in the
// transaction that writes it. The counter row's lock is held to commit,
// so a role's rows commit in the order of their pos.
const (
	nextSQL = `INSERT INTO chaos_next (role, pos) VALUES ($1, 1)
		ON CONFLICT (role) DO UPDATE SET pos = chaos_next.pos + 1 RETURNING pos`
	rowSQL = `INSERT INTO chaos_rows (role, pos, number, member, pid, epoch, seq, began)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`
)

// writeRows writes a row to PostgreSQL every m.every through the fence,
// under the holding's fencing number, until ctx ends or the fence refuses
// the holding. Each write's begin time is taken before ctx is checked,
// so the holding was live then: its ctx ends before its revoked line is
// written. A write once begun is not cut short when ctx ends (at most
// 10 s): whether it commits is the fence's decision.
func (m *memberProc) writeRows(ctx context.Context, held processor.Held) {
	h := sqlfence.Holding{Role: string(held.Role), Number: held.Fence, Holder: string(held.Member)}
	for seq := int64(0); ; seq++ {
		began := time.Now().UnixMilli()
		if ctx.Err() != nil {
			return
		}
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		m.dbSlots <- struct{}{}
		err := m.fence.Do(wctx, h, func(tx *sql.Tx) error {
			var pos int64
			if err := tx.QueryRowContext(wctx, nextSQL, h.Role).Scan(&pos); err != nil {
				return err
			}
			_, err := tx.ExecContext(wctx, rowSQL, h.Role, pos, h.Number, h.Holder, held.Token.ProducerID, held.Token.Epoch, seq, began)
			return err
		})
		<-m.dbSlots
		cancel()
		ev := Event{Kind: "dbwrite", Role: h.Role, PID: held.Token.ProducerID, Epoch: held.Token.Epoch, Fence: h.Number, Seq: seq, Began: began, Outcome: dbOutcome(err)}
		if err != nil {
			ev.Err = err.Error()
		}
		m.log.write(ev)
		if errors.Is(err, sqlfence.ErrStale) || errors.Is(err, sqlfence.ErrNumberReused) {
			return // a newer holding has written: this one is over
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(m.every):
		}
	}
}

// dbOutcome names what a fenced transaction returned (chaos.DBOutcome*).
func dbOutcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, sqlfence.ErrStale):
		return "stale"
	case errors.Is(err, sqlfence.ErrNumberReused):
		return "reused"
	case errors.Is(err, sqlfence.ErrConflict):
		return "conflict"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "context"
	}
	return "error"
}

// outcome names what a write call returned (chaos.Outcome*). Only "ok"
// and "may-have-committed" allow the record to become visible.
func outcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, fencing.ErrUnknownOutcome) && strings.Contains(err.Error(), "may have committed"):
		// The EndTxn commit went unanswered and no success came before
		// ctx ended (fencing's documentation names this one exception;
		// the error says so in its text, and nothing else tells it
		// apart).
		return "may-have-committed"
	case errors.Is(err, fencing.ErrUnknownOutcome):
		return "unknown-outcome"
	case errors.Is(err, fencing.ErrFenced):
		return "fenced"
	case errors.Is(err, fencing.ErrNotHeld):
		return "not-held"
	case errors.Is(err, fencing.ErrProducer):
		return "producer"
	case errors.Is(err, fencing.ErrClient):
		return "client"
	case errors.Is(err, fencing.ErrAdmin):
		return "admin"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "context"
	}
	return "error"
}
