// Package fencing is the seam between krole's succession rules and a Kafka
// cluster: the [Transport] interface, its implementation over sarama
// ([BrokerTransport]), and the error kinds every Transport returns
// ([ErrFenced], [ErrNotHeld], [ErrUnknownOutcome], [ErrProducer],
// [ErrClient], [ErrAdmin], [ErrRecord]). The testify mock lives in package fencingtest.
//
// The operations: a role's token is minted by AcquireEpoch and written
// under by WriteLease (and by a holder's [Writer] or Transact); Register
// and Deregister append a member's candidacy; ReadRoleRecords and
// Describe read. A member's session (see "Member sessions" below) is
// begun by StartSession and kept by Heartbeat, DescribeMany asks the
// coordinators which token holds each of many roles, and ReadSession
// reads a member's session records.
//
// # What a token is
//
// The transactional id of a role is [Config.TxnPrefix] + role. A token
// ([codec.Token]) is the producer id and epoch that the role's transaction
// coordinator returns for InitProducerId on that id ([Transport.AcquireEpoch]).
// The cluster mints it, never a client. Each InitProducerId raises the epoch
// (or, when the epoch is exhausted, moves to a new producer id at epoch 0)
// and aborts any transaction the previous epoch left open. Epochs of
// successive holdings are increasing, not consecutive: on Apache Kafka a
// takeover of a holder with a transaction open costs two increments (the
// coordinator fences and aborts with one, answers CONCURRENT_TRANSACTIONS,
// and the retried InitProducerId raises again; three with transaction
// version 2), and a coordinator-side abort on timeout raises it too.
// AcquireEpoch retries CONCURRENT_TRANSACTIONS within
// [Config.RequestTimeout]. Apache Kafka's coordinator also answers it to
// an InitProducerId or AddPartitionsToTxn that comes while the previous
// commit's markers are being written, after its answer to that EndTxn:
// the usual case of a handover, whose successor acquires right after the
// holder's release. Such an answer changes nothing at the coordinator and
// ends on its own within milliseconds, so the first ten are retried a
// millisecond apart, and only later ones with the usual backoff (10 ms,
// doubling; see concurrent.go).
//
// With the transaction protocol this package speaks (EndTxn below version 5,
// what sarama sends, and what Kafka before 4.0 uses by default), the epoch
// moves only at InitProducerId. A token therefore names one holding of the
// role: it stays the same across every lease the holder writes, and the
// token written in a lease is the token the lease was written under.
//
// Newer protocols change that. Under KIP-890 (transaction version 2, the
// default from Apache Kafka 4.0 for clients that ask for it, EndTxn v5+)
// the coordinator bumps the epoch at every commit and abort, and under
// KIP-588 a coordinator-side transaction timeout bumps it too. This package
// never sends EndTxn v5, so a commit does not move its epoch. A coordinator
// timeout still can (an open transaction older than [Config.TxnTimeout] is
// aborted by the coordinator, with an epoch bump on brokers with KIP-588):
// the holder's next write is then refused as fenced, and it must acquire
// again, as if another member had taken the role. If krole ever moves to
// transaction version 2, a token must be read as "the holding that began at
// this epoch", and a holder must carry the epoch each commit returns; the
// lease would then record the epoch the holding began with.
//
// # What the fence guarantees
//
// Once AcquireEpoch has returned token T for a role, the cluster refuses
// every transactional write, offset commit and commit of any token of that
// role older than T: AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit
// and EndTxn answer PRODUCER_FENCED (INVALID_PRODUCER_EPOCH on older
// brokers and on Redpanda), and a partition leader that has seen the newer
// epoch refuses a produce of the older one with INVALID_PRODUCER_EPOCH (a
// produce that slips through still needs an EndTxn commit, which the
// coordinator refuses). kfake answers a stale produce to a partition that
// left the aborted transaction with INVALID_TXN_STATE instead (an
// [ErrProducer]; the abort that follows is fenced), where Apache Kafka and
// Redpanda answer INVALID_PRODUCER_EPOCH: the abort markers carry the
// bumped epoch (ProducerAppendInfo.java, checkProducerEpoch). The older token's open transaction is
// aborted, so nothing it wrote in it becomes visible to read_committed
// readers. A write under T that commits is therefore ordered after every
// write of an older token that ever became visible. [BrokerTransport]
// reports each of these refusals as [Fenced] and forgets the token, so the
// next WriteLease with it is [ErrNotHeld] without a request.
//
// # Where it does not hold
//
//   - Non-transactional writes are not fenced. Register and Deregister are
//     plain appends that anyone may make; so is any write a deposed holder
//     makes outside a transaction of its token (with a plain producer, to
//     any topic). Only writes through WriteLease, [BrokerTransport.Transact]
//     or a [Writer] carry the token.
//   - Readers must read with read_committed isolation: a read_uncommitted
//     reader (goka's default, sarama's default) sees aborted writes of a
//     fenced holder.
//   - The fence is the broker's, not the clock's: a deposed holder that
//     does not write under its token learns it only when it asks (package
//     processor's member session asks the coordinators every renew
//     interval, [Transport.DescribeMany]) or when its view shows the newer
//     lease, and may act on its own (outside Kafka) until then, at the
//     latest until its local deadline passes. Systems outside Kafka that want the
//     same guarantee must check the token themselves, for example with
//     [Transport.Describe], or by keeping the highest token they have seen
//     and refusing older ones.
//   - A transaction left open by a crashed holder holds read_committed
//     readers of its partitions at the last stable offset until the
//     coordinator aborts it (or until the next AcquireEpoch of the role
//     aborts it at once). kfake aborts it when [Config.TxnTimeout] has
//     passed. Apache Kafka aborts timed-out transactions only when its
//     periodic check runs, every
//     transaction.abort.timed.out.transaction.cleanup.interval.ms (default
//     10 s), so there the stall lasts up to TxnTimeout + that interval,
//     hiding the lease records and member-session heartbeats in those
//     partitions from read_committed readers (Redpanda likewise, every
//     abort_timed_out_transactions_interval_ms, 10 s). Package processor
//     says what its members do about it and why its defaults stay;
//     [BrokerTxnSettings.CheckTimings] checks timings against a broker's
//     interval, and [NewBrokerTransport] refuses a TxnTimeout above the
//     broker's transaction.max.timeout.ms.
//   - Tokens of one role compare only within one producer id
//     ([codec.Token.Newer]); across a producer-id change (epoch exhaustion,
//     or the transactional id expiring after transactional.id.expiration.ms
//     without use, 7 days by default) only the broker can tell which is
//     current: Newer says neither is newer, so a holder does not step down
//     because its view shows a lease of another producer id, and the
//     succession rules rank that lease by its offset like any other. The
//     broker's fence decides: the old token's next write is refused, with
//     PRODUCER_FENCED, INVALID_PRODUCER_EPOCH or INVALID_PRODUCER_ID_MAPPING
//     (Apache Kafka), or TRANSACTIONAL_ID_NOT_FOUND (105) or
//     UNKNOWN_PRODUCER_ID (59) (Redpanda, src/v/kafka/server/errors.h,
//     map_tx_errc), and each of these is [ErrFenced]: the token is
//     forgotten and its holding ends at that write, or at the member
//     session's next round, whose DescribeMany shows another producer id
//     or none, not at the holder's renew deadline. A holder writes under
//     its role's transactional id at least every
//     processor.LeaseRewriteInterval (an hour: its lease rewrite), and
//     under its member session's every renew interval, so neither expires
//     while it holds.
//
// # Member sessions
//
// Besides the roles' transactional ids, each member has one of its own,
// [Config.SessionTransactionalID]: TxnPrefix + "session/" + member, which
// no role's equals (a role name never contains '/'). StartSession is
// InitProducerId on it: the coordinator mints the session's producer id
// and epoch, fencing the previous incarnation's heartbeats and aborting a
// heartbeat it left open, and the session carries the nonce the member
// drew for the incarnation. Heartbeat writes a heartbeat, or the session
// end, in one transaction under the session's producer id and epoch, in
// the member's session partition (codec.SessionPartition); its errors are
// WriteLease's: [ErrFenced] when the session's epoch moved (another
// StartSession under the member id, or the coordinator's abort of a
// heartbeat that outlived the transaction timeout), [ErrUnknownOutcome]
// when a request got no definite answer (the session's token is retired:
// StartSession again, with the same nonce, to go on). A heartbeat carries
// no authority over any role: each role's fence is still its own
// transactional id's epoch, and every lease and every write of work stays
// under the role's token. Because a holder does not write under each
// role's token every renew interval, a fenced write does not tell it in
// time that it lost a role; DescribeMany does (one DescribeTransactions
// per coordinator broker for all the roles it holds, each round). A
// heartbeat or session end counts only when its batch is a transaction of
// the session it names and that producer id is the one the session's
// transactional id has at its coordinator (rolestate.CheckHeartbeatAuthor;
// ReadSession, and the view, skip the others as forged).
//
// # Application writes
//
// A holder writes its own records under its token with a [Writer]
// ([BrokerTransport.Writer]): to any topic, in transactions of the role's
// transactional id, so the fence covers them as it covers leases, and a
// consumer group's offsets can commit in the same transaction
// ([Txn.CommitOffsets]) for exactly-once processing (see package
// processor/stream).
//
// # When a request gets no answer
//
// A request of a transaction under a token that gets no definite answer
// (a lost connection, a read timeout, or the caller's ctx ending while it
// is out) may still reach the broker later: a stalled broker or a slow
// network can deliver it long after the client gave up. BrokerTransport
// then retires the token at once: the call returns an [*Error] of kind
// [ErrUnknownOutcome], the transport forgets the token (later calls with
// it get [ErrNotHeld], saying that it was retired after an unknown
// outcome), and it sends no further request under that epoch, in
// particular no EndTxn abort. The holding is over; the member must
// acquire again, which mints a new token, as for any new holding (a
// token still names one holding and never changes during it).
//
// Why no abort: with the transaction protocol this package speaks, EndTxn
// does not move the epoch, so an abort under epoch e writes abort markers
// of epoch e. A produce of epoch e that reaches its partition's leader
// after that marker is not older than anything the partition has seen:
// it is appended, and begins a new transaction of the producer at that
// partition, which the next commit of epoch e (its transaction adds the
// partition again) makes visible: a write that returned an error would
// become visible.
//
// Why leaving the transaction open is sound: an open transaction of epoch
// e ends only when the coordinator aborts it, and Apache Kafka's
// coordinator fences the epoch before it aborts. The role's next
// InitProducerId (TransactionCoordinator.handleInitProducerId, state
// Ongoing) bumps the epoch to e+1 (prepareFenceProducerEpoch), writes
// abort markers carrying e+1 to every partition of the transaction, and
// answers CONCURRENT_TRANSACTIONS, so the retried InitProducerId bumps
// again; a transaction older than its timeout is aborted the same way, at
// the coordinator's periodic check. At each partition, a batch of epoch e
// that arrived before the marker is aborted by it, and one that arrives
// after is refused, because its epoch is older than the producer's last
// (INVALID_PRODUCER_EPOCH; ProducerAppendInfo). A late batch can only
// reach a partition that the transaction had added at the coordinator (a
// produce is sent only once AddPartitionsToTxn has been answered), so
// every such partition gets a marker; a late offset commit
// (TxnOffsetCommit) is a transactional batch of epoch e in
// __consumer_offsets, a partition AddOffsetsToTxn had added, and is
// covered the same way. A late AddPartitionsToTxn, AddOffsetsToTxn or
// EndTxn of epoch e reaches a coordinator that has moved past e, which
// refuses it (PRODUCER_FENCED). So nothing of a call that returned an
// error ever commits, whatever the network does later.
//
// kfake (checked in its txns.go) aborts the open transaction at
// InitProducerId with markers of the old epoch and bumps after, but its
// produce path checks a batch's epoch against the producer's current
// epoch, shared with the coordinator in one process, so a late batch of e
// is refused (INVALID_PRODUCER_EPOCH) from the bump on; at a transaction
// timeout it bumps first, as Kafka does.
//
// The one exception is the commit. An EndTxn commit without an answer may
// have committed. The transport sends the same EndTxn commit again, under
// the same epoch, until it is answered or ctx ends (the coordinator
// answers a repeated commit of a committed transaction with success): a
// success returns nil. If no success comes, the call returns
// ErrUnknownOutcome, and in this case only it means "may have committed":
// the transaction's writes (and, for a stream, its offsets with them)
// became visible together, or never will. Every other error of a
// transactional call promises that nothing the call wrote ever becomes
// visible to read_committed readers.
//
// Limits:
//   - read_uncommitted readers see the late batch.
//   - Until the role's next AcquireEpoch or the transaction timeout
//     aborts the open transaction, read_committed readers of its
//     partitions stop at it (as for a crashed holder, above); a member
//     that re-acquires at once ends the stall at once.
//   - A network fault that costs a request its answer costs the holder
//     its holding: safety is bought with an extra handover.
//   - The argument rests on the partition's producer state (the epoch of
//     the last marker), which Kafka rebuilds from the replicated log; an
//     unclean leader election that loses the marker loses the guarantee,
//     as it loses committed data.
//
// # Pipelined commits
//
// A transaction of one record (a lease write, a heartbeat, a session end)
// is three round trips: AddPartitionsToTxn, Produce, EndTxn commit. Where
// the transaction coordinator of its transactional id is also its
// partition's leader (one broker, one connection), the transport can send
// the commit right behind the produce, before the produce's answer: two
// round trips. It does when [Config].Pipeline allows it: PipelineOn, or
// PipelineAuto (the default) against a broker that reports
// transaction.partition.verification.enable=true (Apache Kafka 3.6 and
// later; [BrokerTxnSettings].PartitionVerification, asked once by
// NewBrokerTransport). The coordinator and leader are compared as the
// client knows them, at each transaction; AddPartitionsToTxn always waits
// for its answer, so a produce still reaches only a partition its
// transaction added. One pipelined produce at a time is unanswered per
// broker address: a transaction that finds another out writes its produce
// the plain way, which waits its turn on the connection. Otherwise every
// role's produce could be out at once behind a stalled one, and one caller
// giving up (below: its connection is closed) would leave them all
// without an answer, their tokens retired.
//
// Why the order holds: Apache Kafka reads one request of a connection at a
// time and mutes the connection until that request's answer is sent
// (SocketServer; a Produce with acks=all answers once replicated), so the
// commit is read only after the produce was appended, or refused. kfake
// does the same (clientConn.read waits for the previous answer). Redpanda
// does not: it dispatches a connection's requests in order but may
// complete them out of order, so a commit could overtake its produce and
// the produce open a transaction nobody ends. Redpanda reports no such
// setting, and PipelineOn must never name it. With the setting on, a
// broker's leader also refuses a transactional produce whose partition
// is not in an ongoing transaction of its producer, so a produce that
// lingers after its commit (a broken connection) is refused, not appended
// into a transaction no one ends.
//
// What the answers mean then (commitBehind in pipeline.go):
//   - both succeeded: committed, as before;
//   - the commit fenced, or the produce fenced: nothing shows ([Fenced]);
//   - the commit succeeded and the produce did not (refused, or an answer
//     that may come after an append, REQUEST_TIMED_OUT): the transaction
//     committed with the record or without it. The transport sends the
//     same batch again, under the same sequence number, in a transaction
//     of its own: the broker answers it as a duplicate if the first was
//     appended (with the first's offset), else appends it. So the record
//     shows once and the call succeeds; if that transaction fails too,
//     the call returns ErrUnknownOutcome, "may have committed", and
//     retires the token;
//   - the commit got no answer: ErrUnknownOutcome, "may have committed",
//     the token retired. Unlike the plain commit above, it is not sent
//     again: the produce ahead of it may still be on its way, and a
//     commit on a new connection could overtake it. The transaction
//     committed (the commit was read, behind the produce) or is aborted
//     by the role's next AcquireEpoch or its timeout;
//   - the commit refused otherwise (NOT_COORDINATOR, say): nothing
//     committed; with the produce's answer in hand the plain rules apply.
//
// A lease write returns its record's offset (the fencing number of a
// holding's first lease, see package processor): from the produce's
// answer, which arrives before the commit's on the one connection, or
// from the rewrite's. An answer that acknowledges the record without an
// offset (DUPLICATE_SEQUENCE_NUMBER; Apache Kafka and kfake give a
// duplicate its first offset) fails the write: aborted when it came
// before the commit was sent, else ErrUnknownOutcome, the token retired.
//
// So the exception to "an error means nothing shows" stays the one above
// (ErrUnknownOutcome after a commit was sent), and a pipelined call loses
// a token to a lost commit answer where a plain one would have resent
// it. A produce answered before the commit was sent is handled as a plain
// one (its answer settles what follows). Shown by TestPipelinedCommit* in
// pipeline_test.go.
//
// # Requests the caller gave up on
//
// When ctx ends while a request is out, the transport closes its
// connections to that broker at once (ctxcall.Conns; a reset, so bytes
// still in the client's send buffer are discarded), rather than when the
// request's read timeout passes. A request the broker has not read by then
// never takes effect; requests queued behind it on the connection were
// never written, and are sent again on a new connection.
//
// For AcquireEpoch this means that an abandoned InitProducerId does not
// bump the epoch later unseen, as long as the close overtakes it (tested
// with a request held in the network and dropped at the close). A close
// cannot recall bytes that already left the machine: a broker that has
// read the request, or a network that holds it and delivers it anyway,
// still bumps the epoch once. That bump is harmless to safety: its answer
// is read by no one, so no member holds the new epoch, and it fences
// older tokens exactly as a challenge does. It costs liveness: the holder
// it fenced loses the role at its next write, and the role goes through
// succession again. The same holds for an InitProducerId that got no
// answer and was sent again (AcquireEpoch resends after a lost connection
// within its budget): a late first attempt fences the token the retry
// returned.
//
// KIP-360's conditional InitProducerId (naming the current producer id
// and epoch) would make more late requests harmless: Apache Kafka refuses
// it with PRODUCER_FENCED once the epoch has moved (kfake accepts a stale
// epoch). It is not used: [Transport.AcquireEpoch] names no expected
// token, so the transport would have to Describe first, and a late
// request would still bump when nothing else moved the epoch; and Apache
// Kafka's coordinator, when it finds an open transaction, fences the epoch,
// aborts, answers CONCURRENT_TRANSACTIONS and then refuses the retry that
// names the old epoch (its last epoch is reset by the fence), so taking
// over from a crashed holder would need a Describe-and-retry loop. What
// keeps a stale challenger from challenging at all is the check that its
// view has caught up before AcquireEpoch (package processor).
//
// # Context
//
// sarama's broker calls take no context. BrokerTransport runs each on a
// goroutine and returns as soon as ctx ends, with an error wrapping
// ctx.Err(), and closes the abandoned request's connection (above). A
// request that was out when ctx ended has an unknown outcome: in a
// transaction it retires the token, as above. The connection of a request
// that got no answer for another reason (a read timeout) is closed too,
// and dialled again at the next request; sarama would otherwise keep it
// open but unusable. Retries of retriable answers are bounded by ctx and
// by [Config.RequestTimeout]. A transaction whose ctx ended while none of
// its requests was out is aborted in the background; the token's next
// transaction waits for that abort.
//
// # Authorization and TLS
//
// A broker with an authorizer refuses a call whose principal lacks an ACL
// with TOPIC_, GROUP_, CLUSTER_ or TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
// No retry can add an ACL: the refusal is never resent, and the error
// (of the call's usual kind) wraps an [*AuthorizationError] that names the
// ACL the call needs (WRITE on the TransactionalId for AcquireEpoch and
// the transactions, WRITE on the member's session TransactionalId for
// StartSession and Heartbeat, DESCRIBE on it for Describe and for each
// id of DescribeMany, WRITE on the role topic for Register, READ on it
// for ReadRoleRecords); it matches [ErrNotAuthorized]. DescribeMany joins
// one such error per refused id.
//
// # Who wrote a lease
//
// ReadRoleRecords keeps a lease or release only when its record batch is
// a transaction under the producer id and epoch of the token it names
// (rolestate.CheckLeaseAuthor) and that producer id is the one the role's
// transactional id has at its coordinator
// ([BrokerTransport.VerifyAuthor]: one DescribeTransactions per new
// (role, producer id), remembered in [BrokerTransport.Authors], which
// also holds every producer id AcquireEpoch minted). Anyone with Write on
// the role topic and on some transactional id can commit a lease naming
// its own token; that check is what keeps such a lease from counting.
// Others are skipped and counted as forged (ForgedLeasesSkipped). A
// principal without DESCRIBE on the role's transactional id has its
// leases kept by the batch rule alone (UnverifiedLeasesKept counts them);
// a failure to reach the coordinator fails the read.
//
// With TLS, a connection's handshake completes within
// [Config.DialTimeout] when it is dialled, and a failed one is a
// [*TLSHandshakeError]; [NewBrokerTransport] tries one with every
// bootstrap broker first ([CheckTLS]), so that TLS against a plaintext
// listener fails once, within the dial timeout, rather than at every
// retry of the client's first request. [SASLConfig] never prints its
// password.
package fencing
