package fencing

import (
	"context"
	"time"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/rolestate"
)

// RoleRecord is one record of a role's partition ([rolestate.Record]), so
// that [rolestate.Fold] takes what ReadRoleRecords returns.
type RoleRecord = rolestate.Record

// Transport holds every operation the succession rules need from a Kafka
// cluster, and nothing else; only AcquireEpoch and WriteLease carry
// authority over a role. Every method blocks until the cluster answers or
// ctx ends (then wrapping ctx.Err()); implementations are safe for
// concurrent use. fencingtest.MockTransport mocks it.
type Transport interface {
	// AcquireEpoch mints a new token for role (InitProducerId on its
	// transactional id), fencing the previous holder and aborting its open
	// transaction. Errors: [ErrProducer] (refused), [ErrClient].
	AcquireEpoch(ctx context.Context, role codec.Role) (codec.Token, error)

	// ReadRoleRecords reads role's partition up to the last stable offset,
	// read_committed, and returns role's records in offset order
	// (tombstones included, forged leases dropped as the view drops them).
	// Errors: [ErrClient], [ErrRecord].
	ReadRoleRecords(ctx context.Context, role codec.Role) ([]RoleRecord, error)

	// Register appends member's registration to role's partition and
	// returns its offset, the member's rank order. Errors: [ErrProducer],
	// [ErrClient].
	Register(ctx context.Context, role codec.Role, member codec.MemberID) (int64, error)

	// Deregister appends a tombstone on member's registration of role (a
	// leave, or the pruning of a dead candidate). Errors: as Register.
	Deregister(ctx context.Context, role codec.Role, member codec.MemberID) error

	// WriteLease writes lease in one transaction under token and returns
	// its offset (a new holding's fencing number); -1 with every error:
	// [ErrFenced], [ErrNotHeld], [ErrUnknownOutcome] (also for an answer
	// without an offset), [ErrProducer]. But for ErrUnknownOutcome, the
	// lease never shows.
	WriteLease(ctx context.Context, role codec.Role, token codec.Token, lease codec.Lease) (int64, error)

	// Describe asks the coordinator (DescribeTransactions) which token holds
	// role now; ok=false when none ever did. It takes no epoch, so a third
	// party can check a writer's authority. Errors: [ErrAdmin].
	Describe(ctx context.Context, role codec.Role) (token codec.Token, ok bool, err error)

	// StartSession begins an incarnation of member's session, carrying
	// nonce: InitProducerId on its transactional id, fencing the previous
	// incarnation's heartbeats. Errors: as AcquireEpoch.
	StartSession(ctx context.Context, member codec.MemberID, nonce string) (codec.Session, error)

	// Heartbeat writes hb (a heartbeat, or the session end) in one
	// transaction under hb.Session in the member's session partition.
	// Errors: as WriteLease; [ErrFenced] means the session's epoch moved
	// (another StartSession, or a coordinator abort on timeout);
	// after [ErrUnknownOutcome], StartSession again with the same nonce.
	Heartbeat(ctx context.Context, hb codec.Heartbeat) error

	// ReadSession is ReadRoleRecords for member's authentic session records
	// (rolestate.CheckHeartbeatAuthor). Errors: as ReadRoleRecords.
	ReadSession(ctx context.Context, member codec.MemberID) ([]RoleRecord, error)

	// DescribeMany is Describe for many roles: one DescribeTransactions per
	// coordinator broker. A role missing from the result was not answered;
	// err ([ErrAdmin], joined) says why.
	DescribeMany(ctx context.Context, roles []codec.Role) (map[codec.Role]Described, error)
}

// Optional capabilities of a [Transport], checked by type assertion on
// these named interfaces; fencingtest.MockTransport offers none.

// TxnTimeouter is a [Transport] whose transactions the coordinator aborts
// after a known timeout ([Config].TxnTimeout), which processor.New checks
// against the lease settings.
type TxnTimeouter interface {
	// TxnTimeout returns the timeout sent with InitProducerId.
	TxnTimeout() time.Duration
}

// FencedWriter is a [Transport] that can write application records under
// a token it minted, fenced as leases are.
type FencedWriter interface {
	// Writer returns the fenced writer of role under token; see
	// [BrokerTransport.Writer].
	Writer(role codec.Role, token codec.Token) *Writer
	// Transact runs fn in one transaction under token; see
	// [BrokerTransport.Transact].
	Transact(ctx context.Context, role codec.Role, token codec.Token, fn func(tx *Txn) error) error
}

// TokenChecker is a [Transport] that can say, without a round trip,
// whether a token it minted can still write.
type TokenChecker interface {
	// CheckToken returns nil while tok is role's newest token and can
	// write; else the ErrNotHeld error a write would get. It does not block.
	CheckToken(role codec.Role, tok codec.Token) error
}

// SkipCounter is a [Transport] that counts the records its reads skipped:
// newer-format ones ([codec.UnknownVersionError]) and forged leases.
type SkipCounter interface {
	// NewerRecordsSkipped returns the count of newer-format records.
	NewerRecordsSkipped() uint64
	// ForgedLeasesSkipped returns the count of forged lease records.
	ForgedLeasesSkipped() uint64
}

var (
	_ TxnTimeouter = (*BrokerTransport)(nil)
	_ FencedWriter = (*BrokerTransport)(nil)
	_ SkipCounter  = (*BrokerTransport)(nil)
)
