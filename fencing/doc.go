// Package fencing is the seam between krole's succession rules and a Kafka
// cluster: the [Transport] interface, its implementation over sarama
// ([BrokerTransport]), and the error kinds every Transport returns
// ([ErrFenced], [ErrNotHeld], [ErrUnknownOutcome], [ErrProducer],
// [ErrClient], [ErrAdmin], [ErrRecord]). The testify mock lives in package
// fencingtest. The arguments behind this map are in docs/DESIGN.md,
// sections "Fencing: ..." and "Safe without clocks".
//
// The operations: a role's token is minted by AcquireEpoch and written
// under by WriteLease (and by a holder's [Writer] or Transact); Register
// and Deregister append a member's candidacy; ReadRoleRecords and
// Describe read. A member's session is begun by StartSession and kept by
// Heartbeat, DescribeMany asks the coordinators which token holds each of
// many roles, and ReadSession reads a member's session records.
//
// # What a token is
//
// A token ([codec.Token]) is the producer id and epoch the role's
// transaction coordinator returns for InitProducerId on the transactional
// id [Config.TxnPrefix] + role ([Transport.AcquireEpoch]); minting aborts
// any transaction the previous epoch left open. Epochs increase, not
// consecutively. Under the protocol this package speaks (EndTxn below v5)
// the epoch moves only at InitProducerId, so a token names one holding.
// See docs/DESIGN.md, "Fencing: what a token is at the coordinator".
//
// # What the fence guarantees
//
// Once AcquireEpoch has returned token T for a role, the cluster refuses
// every transactional write, offset commit and commit of any older token
// of that role, and aborts the older token's open transaction, so a write
// under T that commits is ordered after every write of an older token that
// ever became visible to read_committed readers. [BrokerTransport]
// reports each refusal as [Fenced] and forgets the token, so the next
// WriteLease with it is [ErrNotHeld] without a request.
//
// # Where it does not hold
//
//   - Non-transactional writes (Register, Deregister, any plain producer)
//     are not fenced; only WriteLease, [BrokerTransport.Transact] and a
//     [Writer] carry the token.
//   - read_uncommitted readers (goka's and sarama's default) see aborted
//     writes of a fenced holder.
//   - A deposed holder that does not write learns of its loss only when it
//     asks ([Transport.DescribeMany], every heartbeat interval in package
//     processor), when its view shows the newer lease, or at its local
//     deadline. Systems outside Kafka must check the token themselves
//     ([Transport.Describe], or the highest token seen).
//   - A transaction left open by a crashed holder stalls read_committed
//     readers of its partitions until the coordinator aborts it, up to
//     [Config.TxnTimeout] plus the broker's abort interval
//     ([BrokerTxnSettings.CheckTimings]). See docs/DESIGN.md, "What the
//     fence does not cover".
//   - Tokens compare only within one producer id ([codec.Token.Newer]).
//     Across a producer-id change only the broker can tell which is
//     current: the old token's next write is refused, and every such
//     refusal is [ErrFenced].
//
// # Member sessions
//
// Each member has a transactional id of its own,
// [Config.SessionTransactionalID]. StartSession is InitProducerId on it,
// fencing the previous incarnation; Heartbeat writes a heartbeat or the
// session end in one transaction. A heartbeat carries no authority over
// any role: each role's fence is its own transactional id's epoch. See
// docs/DESIGN.md, "Why it is safe: member sessions".
//
// # Application writes
//
// A holder writes its own records under its token with a [Writer]
// ([BrokerTransport.Writer]), to any topic, in transactions of the role's
// transactional id, and can commit a consumer group's offsets in the same
// transaction ([Txn.CommitOffsets]; see package processor/stream).
//
// # When a request gets no answer
//
// A request of a transaction that gets no definite answer retires its
// token at once: the call returns [ErrUnknownOutcome], later calls get
// [ErrNotHeld] (wrapping [ErrRetired]), and nothing more is sent under the
// epoch, not even an abort. The open transaction is aborted by the role's
// next AcquireEpoch or its timeout, both of which fence the epoch first.
// The one exception is the commit: an unanswered EndTxn commit is resent
// until answered or ctx ends, and if no success comes, ErrUnknownOutcome
// means "may have committed". A success returns nil, and retires the token
// all the same: the unanswered commit may still arrive, and would commit
// the next transaction's writes so far. Every other error of a
// transactional call means nothing it wrote ever becomes visible to
// read_committed readers.
// Why, and the limits: docs/DESIGN.md, "Fencing: a request without an
// answer".
//
// # Pipelined commits
//
// Where a transaction's coordinator is also its partition's leader, the
// transport may send a one-record transaction's commit right behind its
// produce, two round trips instead of three ([Config].Pipeline). A lost
// commit answer then retires the token instead of resending. Why the
// order holds, and what each pair of answers means: docs/DESIGN.md,
// "Fencing: pipelined commits".
//
// # Requests the caller gave up on
//
// When ctx ends while a request is out, the transport closes its
// connections to that broker at once, so a request the broker has not
// read never takes effect. A late InitProducerId that got out anyway
// bumps the epoch once: harmless to safety, it costs a handover. See
// docs/DESIGN.md, "Fencing: requests the caller gave up on".
//
// # Context
//
// sarama's broker calls take no context: BrokerTransport runs each on a
// goroutine and returns when ctx ends, with an error wrapping ctx.Err().
// Retries of retriable answers are bounded by ctx and by
// [Config.RequestTimeout]. A transaction whose ctx ended while none of its
// requests was out is aborted in the background; the token's next
// transaction waits for that abort.
//
// # Authorization and TLS
//
// A refusal for a missing ACL is never resent; the error (of the call's
// usual kind) wraps an [*AuthorizationError] naming the ACL the call needs
// and matches [ErrNotAuthorized]. DescribeMany joins one per refused id.
// With TLS, a handshake completes within [Config.DialTimeout], a failed
// one is a [*TLSHandshakeError], and [NewBrokerTransport] tries one with
// every bootstrap broker first ([CheckTLS]). [SASLConfig] never prints its
// password.
//
// # Who wrote a lease
//
// ReadRoleRecords keeps a lease or release only when its batch is a
// transaction of the token it names (rolestate.CheckLeaseAuthor) and that
// producer id is the role's own at the coordinator
// ([BrokerTransport.VerifyAuthor], remembered in [BrokerTransport.Authors]).
// Others are skipped and counted (ForgedLeasesSkipped); without DESCRIBE
// on the role's transactional id a lease is kept by the batch rule alone
// (UnverifiedLeasesKept). See docs/DESIGN.md, "Forged records".
package fencing
