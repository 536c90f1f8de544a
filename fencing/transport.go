package fencing

import (
	"context"
	"time"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/rolestate"
)

// RoleRecord is one record of a role's partition: its offset, decoded key
// and decoded value (a tombstone has a zero Record). It is
// [rolestate.Record], so that [rolestate.Fold] takes what ReadRoleRecords
// returns.
type RoleRecord = rolestate.Record

// Transport holds every operation the succession rules need from a Kafka
// cluster, and nothing else. The rules decide who registers, who challenges
// and when; a Transport carries those decisions to the brokers.
//
// # Which calls carry authority
//
// AcquireEpoch and WriteLease are the guarded pair. AcquireEpoch mints the
// epoch of the role and fences the member that held it before. WriteLease
// writes under that epoch, and the broker rejects the write once a later
// member has taken the role. A deposed holder learns that it lost the role
// from an error matching [ErrFenced] on a write under the role's token,
// from DescribeMany showing a newer token (the coordinator's word, asked
// every renew interval), or from an authentic newer lease in its view: a
// member session renews no role by writing under the role's token, so a
// fenced write is no longer the only way (see package processor, "Member
// sessions").
//
// StartSession and Heartbeat keep the member's session: they carry no
// authority over any role.
//
// Register and Deregister carry no authority: a candidate holds no epoch
// when it announces itself, so they are plain appends. ReadRoleRecords and
// Describe only read.
//
// Every method blocks until the cluster answers or ctx ends; an ended ctx
// returns an error wrapping ctx.Err(). Implementations are safe for
// concurrent use by several goroutines.
//
// [BrokerTransport] is the implementation that talks to a cluster;
// fencingtest.MockTransport is the testify mock the succession rules are
// tested with.
type Transport interface {
	// AcquireEpoch mints a new epoch for role and fences the member that
	// held it: InitProducerId on the role's transactional id. The
	// coordinator bumps the epoch and aborts any transaction the previous
	// holder left open. The implementation keeps the writer the token binds,
	// and WriteLease uses it.
	//
	// Errors: [ErrProducer] when the coordinator refuses the call,
	// [ErrClient] when the connection to it fails.
	AcquireEpoch(ctx context.Context, role codec.Role) (codec.Token, error)

	// ReadRoleRecords reads the role's partition from its start to the last
	// stable offset with read_committed isolation, and returns the records
	// of role in offset order (tombstones included). An aborted lease write
	// never shows; records of other roles that share the partition are
	// dropped, and so is a lease record not written in a transaction by
	// its own token's producer id and epoch (a forged one; see
	// rolestate.CheckLeaseAuthor), as the view drops it.
	//
	// Errors: [ErrClient] when a fetch fails, [ErrRecord] when a record of
	// role does not decode.
	ReadRoleRecords(ctx context.Context, role codec.Role) ([]RoleRecord, error)

	// Register appends member's registration to role's partition and
	// returns its offset, the member's join sequence. A member that
	// registers again moves to the back of the queue.
	//
	// Errors: [ErrProducer] when the append fails, [ErrClient] when the
	// connection fails.
	Register(ctx context.Context, role codec.Role, member codec.MemberID) (int64, error)

	// Deregister appends a tombstone on member's registration of role, which
	// removes it from the candidates. It is what a graceful leave and the
	// pruning of a dead candidate write.
	//
	// Errors: as Register.
	Deregister(ctx context.Context, role codec.Role, member codec.MemberID) error

	// WriteLease writes lease for role in one transaction under token: add
	// the partition, produce, commit. It returns the offset of the lease
	// record in the role's partition, which the transaction committed
	// (>= 0); -1 with every error. The offset of a new holder's first
	// lease is its holding's fencing number (see package processor, "The
	// fencing number").
	//
	// Errors: [ErrFenced] when the broker rejects token because a later
	// member has taken role; [ErrNotHeld] when this transport never minted
	// token for role (or has since minted a newer one, or retired it);
	// [ErrUnknownOutcome] when a request of the write got no definite
	// answer, or the lease committed but the broker's answer to its
	// produce gave no offset: the token is retired and the holding is
	// over, as for ErrFenced; [ErrProducer] for every other failure of the
	// write. Except for ErrUnknownOutcome, an error means that the lease
	// never becomes visible.
	WriteLease(ctx context.Context, role codec.Role, token codec.Token, lease codec.Lease) (int64, error)

	// Describe asks the transaction coordinator which token holds role now,
	// by DescribeTransactions. It returns ok=false when no member has ever
	// held role. It joins no group and takes no epoch, so a third party can
	// call it to check a writer's authority.
	//
	// Errors: [ErrAdmin] when the coordinator lookup fails or the
	// coordinator reports a fault other than an unknown transactional id.
	Describe(ctx context.Context, role codec.Role) (token codec.Token, ok bool, err error)

	// StartSession begins an incarnation of member's session (see package
	// processor, "Member sessions"): InitProducerId on the session's own
	// transactional id, <prefix>session/<member>, which fences the
	// previous incarnation's heartbeats. The session carries nonce, drawn
	// by the member for the incarnation. Leases name the session, and
	// Heartbeat writes under it.
	//
	// Errors: as AcquireEpoch.
	StartSession(ctx context.Context, member codec.MemberID, nonce string) (codec.Session, error)

	// Heartbeat writes hb (a heartbeat, or the session end when hb.End)
	// in one transaction under hb.Session, in the member's session
	// partition. A heartbeat carries no authority over any role: it only
	// keeps the leases naming its session alive in the observers' eyes.
	//
	// Errors: as WriteLease. [ErrFenced] means that the session's epoch
	// moved: another StartSession of the member took the session over,
	// or the coordinator aborted a heartbeat that outlived the
	// transaction timeout (which bumps the epoch); [ErrUnknownOutcome] retires
	// the session's token (StartSession again, with the same nonce, to go
	// on).
	Heartbeat(ctx context.Context, hb codec.Heartbeat) error

	// ReadSession is ReadRoleRecords for member's session records: its
	// heartbeats and session ends that were written in a transaction by
	// the session they name, whose producer id is the session's
	// transactional id's own (rolestate.CheckHeartbeatAuthor), in offset
	// order.
	//
	// Errors: as ReadRoleRecords.
	ReadSession(ctx context.Context, member codec.MemberID) ([]RoleRecord, error)

	// DescribeMany is Describe for many roles at once: one
	// DescribeTransactions per coordinator broker with the transactional
	// ids of roles. A role missing from the result was not answered, and
	// err says why. It is how a holder learns, within a renew interval,
	// that another member took a role it holds (the token moved) without
	// writing under each role.
	//
	// Errors: [ErrAdmin], joined for each coordinator or role that failed.
	DescribeMany(ctx context.Context, roles []codec.Role) (map[codec.Role]Described, error)
}

// Optional capabilities of a [Transport]. Code that holds a Transport
// checks for them with a type assertion on these named interfaces, never
// on an undeclared method set; a Transport that lacks one (the testify
// mock, fencingtest.MockTransport, lacks all of them) simply does not offer
// it, and the caller says what it does instead.

// TxnTimeouter is a [Transport] whose transactions are aborted by the
// coordinator after a known timeout: a transaction left open by a holder
// that crashed mid-write holds back read_committed readers of its
// partition for that long (see [Config].TxnTimeout). processor.New checks
// it against the lease settings when the transport offers it;
// [BrokerTransport] does.
type TxnTimeouter interface {
	// TxnTimeout returns the transaction timeout the transport sends with
	// InitProducerId. It does not block.
	TxnTimeout() time.Duration
}

// FencedWriter is a [Transport] that can write application records under
// a token it minted, in transactions of the role's transactional id, so
// that the broker refuses them once a later member holds the role.
// [BrokerTransport] does; only the transport that minted a token can
// write under it.
type FencedWriter interface {
	// Writer returns the fenced writer of role under token; see
	// [BrokerTransport.Writer].
	Writer(role codec.Role, token codec.Token) *Writer
	// Transact runs fn in one transaction under token; see
	// [BrokerTransport.Transact].
	Transact(ctx context.Context, role codec.Role, token codec.Token, fn func(tx *Txn) error) error
}

// TokenChecker is a [Transport] that can say, without a round trip,
// whether a token it minted can still write: a member whose renewals no
// longer write per role (the member session's heartbeats renew every
// role) asks it at each check-in, so that a holding whose token the
// transport forgot (a write under it was fenced) or retired (a write under
// it got no definite answer: work's, through a [Writer] or a stream) ends
// as soon as it would have at the next lease write. [BrokerTransport]
// does.
type TokenChecker interface {
	// CheckToken returns nil while tok is the newest token the transport
	// minted for role and can still write; else the ErrNotHeld error a
	// write under it would get, wrapping ErrRetired after an unknown
	// outcome. It does not block.
	CheckToken(role codec.Role, tok codec.Token) error
}

// SkipCounter is a [Transport] that counts the records its reads skipped:
// those of a newer value format (see [codec.UnknownVersionError]; a
// non-zero count means a newer krole writes to the role topic) and
// forged leases (see rolestate.CheckLeaseAuthor). [BrokerTransport]
// does.
type SkipCounter interface {
	// NewerRecordsSkipped returns the count of newer-format records so
	// far. It does not block.
	NewerRecordsSkipped() uint64
	// ForgedLeasesSkipped returns the count of forged lease records so
	// far. It does not block.
	ForgedLeasesSkipped() uint64
}

var (
	_ TxnTimeouter = (*BrokerTransport)(nil)
	_ FencedWriter = (*BrokerTransport)(nil)
	_ SkipCounter  = (*BrokerTransport)(nil)
)
