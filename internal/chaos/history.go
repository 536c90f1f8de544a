package chaos

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"time"
)

// Token is a role's token as the auditor sees it: the producer id and
// epoch of the role's transactional id.
type Token struct {
	PID   int64 `json:"pid"`
	Epoch int16 `json:"epoch"`
}

// String renders t as pid/epoch.
func (t Token) String() string { return fmt.Sprintf("%d/%d", t.PID, t.Epoch) }

// Less reports whether t is older than u. Tokens of one producer id
// order by epoch; across producer ids (an exhausted epoch, an expired
// transactional id) only the broker knows, and the auditor orders them by
// producer id, which is what kfake, which never reuses a producer id,
// allocates in increasing order.
func (t Token) Less(u Token) bool {
	if t.PID != u.PID {
		return t.PID < u.PID
	}
	return t.Epoch < u.Epoch
}

// Event is one line of a member's event log, as the member program
// writes it (see internal/chaos/member).
type Event struct {
	// Kind is "start", "minted", "elected", "revoked", "write",
	// "dbwrite" or "commit".
	Kind   string `json:"kind"`
	Role   string `json:"role,omitempty"`
	Member string `json:"member"`
	// PID and Epoch are the token (minted, elected, revoked, commit);
	// PID is the OS process id on "start".
	PID   int64 `json:"pid,omitempty"`
	Epoch int16 `json:"epoch"`
	// At is the member's own clock (offset applied), Wall the system
	// clock, both Unix ms.
	At      int64           `json:"at"`
	Wall    int64           `json:"wall"`
	Reason  string          `json:"reason,omitempty"`
	Err     string          `json:"err,omitempty"`
	Offset  int64           `json:"offset_ms,omitempty"`
	Offsets map[int32]int64 `json:"offsets,omitempty"`
	// Seq, Began and Outcome describe a "write" line: the numbered
	// record's sequence number, the system time (Unix ms) the write call
	// began, and what the call returned: OutcomeOK, OutcomeMayHaveCommitted
	// or another error kind (see the Outcome constants).
	Seq     int64  `json:"seq,omitempty"`
	Began   int64  `json:"began,omitempty"`
	Outcome string `json:"outcome,omitempty"`
	// Fence is the holding's fencing number (elected, revoked, dbwrite).
	// A "dbwrite" line has Seq, Began and the outcome of the row's fenced
	// transaction: "ok", "stale" (sqlfence.ErrStale), "reused",
	// "conflict", "context" or "error".
	Fence int64 `json:"fence,omitempty"`
}

// The outcomes of a "write" line. Every outcome but OutcomeOK and
// OutcomeMayHaveCommitted promises that the record never becomes visible
// (docs/GUARANTEES.md, section 2).
const (
	OutcomeOK = "ok"
	// OutcomeMayHaveCommitted: fencing.ErrUnknownOutcome from an EndTxn
	// commit resent without a success until the call's context ended, the
	// one error after which the write may have committed.
	OutcomeMayHaveCommitted = "may-have-committed"
	OutcomeUnknown          = "unknown-outcome" // any other fencing.ErrUnknownOutcome
	OutcomeFenced           = "fenced"
	OutcomeNotHeld          = "not-held"
	OutcomeProducer         = "producer"
	OutcomeClient           = "client"
	OutcomeAdmin            = "admin"
	OutcomeContext          = "context" // the holding's context ended while no request was out
	OutcomeError            = "error"   // anything else
)

// Token returns the event's token.
func (e Event) Token() Token { return Token{PID: e.PID, Epoch: e.Epoch} }

// FaultKind names a fault the driver injects.
type FaultKind string

// The faults. Member faults name their target member; broker faults name
// the request key or the cluster operation in Detail.
const (
	FaultKill      FaultKind = "kill"      // SIGKILL of a member; restarted later (a "start" fault)
	FaultStop      FaultKind = "stop"      // SIGSTOP of a member, SIGCONT at End
	FaultPartition FaultKind = "partition" // a member cut off the network both ways while it runs on, healed at End
	FaultRestart   FaultKind = "restart"   // SIGTERM of a member (it resigns), started again at End
	FaultStart     FaultKind = "start"     // a member process started, with its clock offset in Detail
	FaultShutdown  FaultKind = "shutdown"  // the end of the run: every member gets SIGTERM
	FaultExit      FaultKind = "exit"      // not injected: a member process ended on its own (Detail: its status and last stderr line); started again 1 s later
	FaultError     FaultKind = "error"     // a request key answered with an error code
	FaultDelay     FaultKind = "delay"     // requests of a key held for a while before the broker answers
	FaultDrop      FaultKind = "drop"      // requests of a key answered by closing the connection
	FaultCluster   FaultKind = "cluster"   // a cluster operation: RehashCoordinators, MoveTopicPartition, ShufflePartitionLeaders, RemoveNode/AddNode
	FaultStall     FaultKind = "stall"     // every Produce of the members held back once, on every broker (faultnet), for Start..End
)

// Fault is one injected fault: what, on whom, and when (system clock,
// Unix ms). End is when it was removed (SIGCONT, restart, the control
// dropped, the node added back); End equals Start for an instant fault.
type Fault struct {
	Kind   FaultKind `json:"kind"`
	Target string    `json:"target,omitempty"` // the member, for member faults
	Detail string    `json:"detail,omitempty"`
	Start  int64     `json:"start"`
	End    int64     `json:"end"`
}

// Member reports whether f is a fault of a member process.
func (f Fault) Member() bool {
	switch f.Kind {
	case FaultKill, FaultStop, FaultPartition, FaultRestart, FaultShutdown, FaultExit:
		return true
	}
	return false
}

// Broker reports whether f is a fault of the brokers.
func (f Fault) Broker() bool {
	switch f.Kind {
	case FaultError, FaultDelay, FaultDrop, FaultCluster, FaultStall:
		return true
	}
	return false
}

// Batch is where a record was committed: its partition and offset, and
// the producer id and epoch of its batch.
type Batch struct {
	Partition     int32
	Offset        int64
	ProducerID    int64
	ProducerEpoch int16
	Timestamp     int64 // Unix ms, the producer's
}

// Token returns the batch's producer id and epoch as a token.
func (b Batch) Token() Token { return Token{PID: b.ProducerID, Epoch: b.ProducerEpoch} }

// Lease is one committed lease record of the role topic.
type Lease struct {
	Role      string
	Member    string
	Token     Token // the token the lease names
	GrantedAt int64
	Deadline  int64
	// Session is the member session the lease names (the session that
	// keeps it alive with its heartbeats), nil for a lease that names
	// none (renewed by lease writes of its own).
	Session *Session `json:",omitempty"`
	Batch
}

// Session is a member session's incarnation as a lease or heartbeat
// names it: the producer id and epoch of the member's session
// transactional id, and the incarnation's nonce.
type Session struct {
	PID   int64  `json:"pid"`
	Epoch int16  `json:"epoch"`
	Nonce string `json:"nonce"`
}

// Token returns the session's producer id and epoch as a token.
func (s Session) Token() Token { return Token{PID: s.PID, Epoch: s.Epoch} }

// String renders s as pid/epoch/nonce.
func (s Session) String() string { return s.Token().String() + "/" + s.Nonce }

// Keeps reports whether a heartbeat of session s keeps alive a lease
// naming session l: the same producer id and nonce (one incarnation), and
// an epoch at least the lease's (the epoch may move within an
// incarnation; package codec, Session.Keeps).
func (s Session) Keeps(l Session) bool {
	return s.PID == l.PID && s.Nonce == l.Nonce && s.Epoch >= l.Epoch
}

// Heartbeat is one committed record of a member session on the role
// topic (key krole/session/<member>): a heartbeat, which keeps alive every
// lease naming its incarnation except those of the roles it excludes, or,
// with End, the session end, which releases every lease naming the
// incarnation at once.
type Heartbeat struct {
	Member    string
	Session   Session
	GrantedAt int64    `json:",omitempty"`
	Deadline  int64    `json:",omitempty"`
	Excluded  []string `json:",omitempty"`
	End       bool     `json:",omitempty"`
	Batch
}

// Excludes reports whether hb does not vouch for role.
func (hb Heartbeat) Excludes(role string) bool {
	for _, r := range hb.Excluded {
		if r == role {
			return true
		}
	}
	return false
}

// Released reports whether l is a release (see codec.ReleaseLease).
func (l Lease) Released() bool { return l.Deadline-l.GrantedAt <= 1 }

// Record is one committed numbered record a holder wrote through
// fencing.Writer: the value the member program writes, and its batch.
type Record struct {
	Role   string `json:"role"`
	Member string `json:"member"`
	PID    int64  `json:"pid"`
	Epoch  int16  `json:"epoch"`
	Seq    int64  `json:"seq"`
	Batch  `json:"-"`
}

// Token returns the token the record names.
func (r Record) Token() Token { return Token{PID: r.PID, Epoch: r.Epoch} }

// Row is one committed row a holder wrote to PostgreSQL through package
// sqlfence, as the auditor reads it back.
type Row struct {
	Role string
	// Pos is the row's place in its role's commit order: 1, 2, 3, ...
	// from a counter row its transaction incremented and held locked
	// until it ended.
	Pos int64
	// Number is the fencing number the row was written under, Member its
	// holder, PID and Epoch the holding's token (as the member knew it).
	Number int64
	Member string
	PID    int64
	Epoch  int16
	// Seq numbers the holding's rows from 0; Began is the system time
	// (Unix ms) the member took before it began the row's transaction,
	// while its holding's context had not ended.
	Seq   int64
	Began int64
}

// Token returns the token the row names.
func (r Row) Token() Token { return Token{PID: r.PID, Epoch: r.Epoch} }

// StreamOut is one committed record of the stream's output.
type StreamOut struct {
	Value string
	Batch
}

// History is everything the auditor judges: what the members said, what
// the driver did, and what the cluster committed.
type History struct {
	// Settings are the run's timings, from which the bounds derive.
	Settings Settings
	// Members is the number of member processes.
	Members int
	// StreamRole is the role that runs the stream.
	StreamRole string
	// FaultsFrom and FaultsUntil bound the fault phase; Shutdown is when
	// the members were told to leave (system clock, Unix ms).
	FaultsFrom, FaultsUntil, Shutdown int64

	Events []Event
	Faults []Fault
	Leases []Lease // in offset order per partition
	// Heartbeats are the member sessions' heartbeats and session ends,
	// in offset order per partition.
	Heartbeats []Heartbeat
	Records    []Record // in offset order per partition
	Inputs     []string // the committed values of the stream's input
	Outputs    []StreamOut
	// Rows are the committed rows of the members' PostgreSQL table, per
	// role in commit order (none when the run had no database).
	Rows []Row `json:",omitempty"`
}

// Settings are the timings a run uses, from which the auditor's bounds
// derive (see docs/CHAOS.md, "The audits").
type Settings struct {
	Lease, Renew, Stagger, RequestTimeout time.Duration
	// HeartbeatDeadline is how long after the start of its last successful
	// lease write a holder may go on believing it holds (processor's
	// Settings.HeartbeatDeadline). Default 4/5 of Lease.
	HeartbeatDeadline time.Duration
	// Tolerance is the slack added to the failover bound for a loaded
	// machine.
	Tolerance time.Duration
	// Takeover is added to the failover and gap bounds: how long one
	// candidate may take to challenge for every role of a member that died
	// holding all of them (the mass-failover scenario; 0 otherwise).
	Takeover time.Duration `json:",omitempty"`
}

// renewDeadline is s.HeartbeatDeadline, or its default.
func (s Settings) renewDeadline() time.Duration {
	if s.HeartbeatDeadline > 0 {
		return s.HeartbeatDeadline
	}
	return s.Lease * 4 / 5
}

// ReadEvents reads a member's event log. A last line cut short (the
// member was killed while writing it) is dropped.
func ReadEvents(path string) ([]Event, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var evs []Event
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			continue
		}
		evs = append(evs, e)
	}
	return evs, sc.Err()
}

// storedHistory is a History as WriteHistory stores it: a Record's own
// JSON is the member's value, without its batch.
type storedHistory struct {
	History
	Records []storedRecord
}

type storedRecord struct {
	Record
	Where Batch `json:"batch"`
}

// WriteHistory writes h to path as JSON ([Run] leaves it in Config.Dir as
// history.json).
func WriteHistory(path string, h *History) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	sh := storedHistory{History: *h}
	for _, r := range h.Records {
		sh.Records = append(sh.Records, storedRecord{Record: r, Where: r.Batch})
	}
	if err := json.NewEncoder(f).Encode(sh); err != nil {
		f.Close()
		return fmt.Errorf("writing the history to %s: %w", path, err)
	}
	return f.Close()
}

// ReadHistory reads a history WriteHistory wrote.
func ReadHistory(path string) (*History, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var sh storedHistory
	if err := json.Unmarshal(b, &sh); err != nil {
		return nil, fmt.Errorf("reading the history in %s: %w", path, err)
	}
	h := sh.History
	h.Records = nil
	for _, r := range sh.Records {
		r.Record.Batch = r.Where
		h.Records = append(h.Records, r.Record)
	}
	return &h, nil
}

// ms is d in milliseconds.
func ms(d time.Duration) int64 { return d.Milliseconds() }
