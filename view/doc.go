// Package view materializes the role topic into a local table with a goka
// View: for each role its latest lease and its candidates ranked by
// registration offset, lowest first, each with the value it registered
// with ([View.Leader] gives the live holder's). Lookups read only the
// local table, never the broker.
//
// # What a lookup guarantees, and what it does not
//
// A lookup answers what the table believes: the records of the role topic
// that this process has read. It is not the broker's fence. A holder that
// [View.Holder] reports as live may already have been fenced by a newer
// epoch whose lease the table has not read yet, or whose lease write is
// still inside an open transaction; a lease that looks expired may be
// renewed in a record on its way (a heartbeat of its holder's member
// session, or a lease rewrite). Only a transactional write under the
// current epoch, accepted by the broker, proves that a member holds a role
// (see package fencing). The succession rules use the view to decide when
// to act (challenge, stagger, step down early) and the broker to decide who
// wins.
//
// What the table does guarantee:
//
//   - It holds committed records only: the view reads with read_committed
//     isolation, so a record of an aborted or still open transaction never
//     shows (a lease write left open by a crashed holder shows nothing until
//     the coordinator aborts it, and then never).
//   - Candidates are ranked by the offset of their registration, which is
//     the join order within the role's partition; a tombstone removes a
//     candidate, a re-registration moves it to the back.
//   - A lookup never answers from a half-read table: until the view has
//     caught up with the topic (see [View.WaitCaughtUp] for the exact
//     meaning), a lookup waits, bounded by its context, and then fails with
//     [ErrNotCaughtUp]. After Run has returned it fails with [ErrStopped].
//   - After the first catch-up a lookup answers at once, from the table as
//     it stands: it follows the topic with the consumer's lag (about a fetch
//     round trip; see "A view's first moments" for the one exception). A
//     caller that needs "at least everything committed before now" calls
//     [View.WaitCaughtUp] first, which costs a broker round trip.
//   - A lookup costs what the role it names holds (its candidates), never
//     the other roles.
//   - Records that do not decode (garbage, a newer format version, a key
//     that is not krole's, a value that does not fit its key, a role in the
//     wrong partition) are skipped, counted in [View.Stats] and logged (the
//     first of each kind at warn level, with partition and offset); every
//     other record is applied as if they were not there. A key whose latest
//     value is unreadable keeps its last readable value.
//   - A lease or release counts only when it was written in a transaction
//     by the producer id and epoch of the token it names; any other lease
//     record is skipped the same way (see "Who can write what").
//   - When the topic starts over (recreated, or the cluster restarted
//     without its data), the table is rebuilt from it (see "When the topic
//     starts over", which also says when this cannot be seen).
//
// # Caught up
//
// goka v1.1.14 runs each partition in two phases, each with a consumer of
// its own: recovery reads until it has been handed the record at high
// watermark - 1, then closes its consumer, and once every partition has
// recovered another consumer follows the topic. A partition whose last
// offset is a transaction marker (every committed lease write ends with
// one) never gets there, nor does one with an open transaction. The view
// replaces that notion with its own: it asks the partition leaders for
// the last stable offset and reads the partition's tail back from it to
// find the last record that a read_committed consumer is handed; the
// partition is caught up once the view has applied that record (see
// [View.WaitCaughtUp]). goka's recovery is made to read nothing (its topic
// manager is wrapped), so one consumer per partition reads the topic, from
// its start or from the state dir's offset, for the whole Run.
//
// That consumer is the view's own (goka is handed it as its sarama
// consumer): raw read_committed fetches on a connection per partition,
// which drop aborted transactions and transaction markers as Kafka's own
// consumer does, and which hand the view each record's batch producer id,
// epoch and transactional flag (see "Who can write what"). The consumer
// decodes the records of each fetch answer as it reads them, and goka is
// handed them as one message, which the view applies record by record.
// goka.go lists what the view relies on in goka, each with a test.
//
// # A view's first moments
//
// The first catch-up also waits until each partition's consumer, the one
// that follows the topic from then on, has started, and for a partition
// holding records below the last stable offset, until it has handed the
// view the last of them. (After a restart from the state dir with nothing
// new to read, the consumer starts at the last stored record and hands it
// again; the view does not apply it twice.) A partition consumer fetches
// from the moment it starts, so a record committed after the first
// catch-up reaches the table one fetch later, as it does later on: about
// the time the writer takes to read its own acknowledgement. For a
// partition that held no such record (an empty partition, say) the first
// fetch may still be opening its connection when the first catch-up
// returns; a record committed then waits for that connection, a round
// trip or two (docs/BENCHMARKS.md, section View, has the figures). The
// same holds after the view restarts a partition's consumer on an error
// (see [View.Run]).
//
// # Who can write what
//
// A lease or a release counts only when it was written in a transaction
// by the producer id and epoch of the token it names: its record batch is
// transactional and the batch's producer id and epoch equal the lease's
// Token. Any other lease record is skipped as forged ([SkipForged]),
// counted and logged like the other skips: a plain append (producer id -1,
// or an idempotent producer's own id, not transactional), a transaction
// under another transactional id (another producer id), a write under an
// older or newer epoch than the one the lease names, and any tombstone on
// a lease key (krole never writes one, and it names no token).
//
// That alone binds a lease to its writer's producer id, not to the role:
// anyone with Write on the topic and on some transactional id (an
// application's own, or krole.<another role> as a member of that role)
// can commit a lease naming its own producer id and epoch. So a lease or
// release also counts only when its producer id is the one the role's own
// transactional id (<prefix><role>, fencing.Config.TxnPrefix) has at the
// transaction coordinator: the view asks the coordinator
// (DescribeTransactions on that transactional id, [Options].Describe)
// once per new (role, producer id) and remembers the answer
// ([Options].Authors, rolestate.Authors). Kafka never gives one producer
// id to two transactional ids, and a transactional id keeps its producer
// id until it expires (transactional.id.expiration.ms, 7 days idle by
// default) or runs out of epochs, so each answer holds for good: a
// producer id once the role's stays the role's; one that is not is
// another transactional id's, or the role's before such a change, which
// fenced every lease under it. A member's view shares its transport's
// record, which knows the producer ids the member minted, so a holder
// never waits on its own leases. A lease whose producer id the
// coordinator names for the role counts; one it does not is skipped as
// forged ([SkipForged]). The view reads committed batches only, so a
// lease that counts was committed by the holder of the role's
// transactional id at the epoch it names, whose writes the broker fences
// once a newer epoch exists.
//
// While the answer for a new producer id is on its way, the lease record
// waits outside the table, as if not read yet: lookups and Watch show the
// role as it was before it (the previous lease, which runs out as it
// would have), [View.Confirm] of the role waits for the answers on the
// records below the last stable offset it confirms, and
// [View.WaitCaughtUp] for those waiting when it began. The record-apply
// loop never waits on the network: the verifier runs beside it, and
// applies a lease found the role's own when the answer comes (it is
// judged from then, and written to the state dir then; until then the
// state dir keeps it under a pending key, so that a Run that ends first
// leaves it to the next Run to verify). So a forged
// release never makes a live holder look vacant (it never shows), and a
// forged lease never makes a dead holder look live (it never shows
// either; a candidate's confirmation waits one DescribeTransactions round
// trip for its verdict). When the coordinator cannot be reached, the
// records wait and the view retries with a backoff; Confirm waits with
// them, so a member does not challenge on what it could not verify, and
// a challenge, whose AcquireEpoch goes to the same coordinator, would
// fail anyway. A reader whose principal may not Describe the role's
// transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED) counts leases
// by their record batch alone, and logs a warning once: a member always
// has that ACL (Write on the TransactionalId implies Describe); a
// read-only reader (krole table, serve, leader, observe) without it can be
// shown a lease forged under another transactional id, but makes no
// decision on it.
//
// What the check does not stop: registrations and their tombstones are
// plain appends by design (a member registers without a transaction), so
// a principal with Write on the role topic can still add candidates and
// remove them, which changes the ranking and who challenges next. A
// tombstone of the live holder's registration is the operator's
// step-down (krole resign --member writes just that): the holder releases
// the role at once and registers again at the back, so such a principal
// can force a handover, as often as it likes; the role passes to the next
// candidate within a challenge's round trips and stays held. It cannot
// make a lease or release count, so it cannot take a role, hold it, keep
// it vacant, or make a deposed holder's writes count. A principal with
// Write on the topic and on some other transactional id cannot either:
// its leases are skipped as forged. The value readers report for the
// holder is the one its lease carries (codec.Lease.Value, [Leader]), so a
// registration appended by anyone changes a candidate's value, never the
// holder's. The ACLs that matter: Write on the role topic lets a principal register, deregister
// and so step a holder down; grant it only to members and operators. A
// lease needs, in addition, Write (and Describe) on the TransactionalId
// <prefix><role> (krole.<role> by default); grant that only to the role's
// members. Write on the topic plus that transactional id can take the
// role through the broker's fence, as any member can.
//
// # Member sessions
//
// A lease may name its holder's member session (codec.Lease.Session; see
// package processor, "Member sessions"). The view keeps each member's
// latest session record that counts (a heartbeat or a session end, key
// krole/session/<member>), with when it applied it on its clock, and
// joins it to every lookup of a role whose lease names that member
// (rolestate.State.Session), so that [View.Holder], [View.Leader] and
// rolestate.State.LeaseEnd judge the lease with it: one heartbeat span
// from when the view saw a heartbeat of the lease's incarnation that does
// not exclude the role; ended at once by one that excludes it or ends the
// session; a later incarnation's heartbeat says nothing of the lease. A
// session record counts only under the rules of a lease: written in a
// transaction by the session it names, whose producer id is the one
// <prefix>session/<member> has at its coordinator (asked as for a lease,
// once per new producer id; Options.Describe is asked with the session's
// key, rolestate.SessionAuthor). A heartbeat that only vouches is not
// published to Watch or Follow (it changes no role's records): a reader
// waiting for a lease's end looks the session up again ([View.Session]).
// A session record that drops roles (a heartbeat that excludes them, or
// a session end) is published as a change of each role it drops, which
// is then vacant at once, as after a release. [View.Confirm] confirms the
// session's partition too.
//
// # When the topic starts over
//
// A partition whose log now ends below the offset the view has read has
// gone backwards: the topic was deleted and created again, or the cluster
// restarted without its data. The view sees it when its consumer is told
// that its next offset is out of range and the partition's end is below
// it, or when goka restarts the partition's consumer and the end is below
// what the view (or its state dir) holds. It then reads that partition
// again from its start into a table of its own (with a state dir, it
// clears the partition's database first) and, once that has caught up,
// replaces the partition's roles with it: subscribers get each changed
// role (Before the old state, After the rebuilt one), [Stats].Rebuilds
// counts it, and a warning is logged. Until then lookups answer from the
// old table, [View.WaitCaughtUp] waits, [View.Confirm] fails with
// [ErrRewound] for the partition's roles, and [View.Health] reports that
// the offsets went backwards; a probe of Confirm, WaitCaughtUp or the
// health monitor that finds the partition's end below what the view had
// read before it probed counts as seeing it too. Once the rebuilt table
// has replaced the old one, Confirm answers and Health is healthy again;
// each lease of the rebuilt table is stamped (LeaseSeenAt) when it
// replaces the old one. A partition recreated and
// written past the view's next offset before the view fetches again is
// not seen to go backwards: offsets alone cannot tell (Kafka's topic ids
// could; sarama's fetch does not send them), and the view then reads on
// from its offset and never sees the new records below it. Nor is a
// partition rebuilt that only a probe sees going backwards (its new last
// stable offset is below what the view read, held there by an open
// transaction, while its end is past the consumer's next offset): the
// consumer reads on, and Confirm and Health keep reporting it until the
// view is restarted without its state dir.
//
// # State on disk
//
// With [Options].StateDir the table is kept in goka's LevelDB storage, each
// value stored with its offset, so a restart rebuilds the ranked index from
// disk and reads only the records written since. Without it, the table
// lives in memory and each Run reads the topic from its start.
//
// # Watching
//
// [View.Watch] hands over each change of a role (new holder, lease
// written again or released, the holder's session record that drops the
// role, candidate joined or left; not a heartbeat that only vouches). A slow subscriber never blocks
// the view: its pending changes coalesce per role, keeping the first Before
// and the latest After, so it may miss intermediate states but never the
// latest one. [View.Follow] is the same for one role as a stream of states,
// starting with the current one; with [View.Role] and [View.Confirm] it
// makes a *View the state source of a member. Subscribers are indexed by
// the roles they watch, so applying a record costs O(subscribers of its
// role + subscribers of every role), whatever the number of roles
// followed: a member following each of its K roles adds no cost per
// record.
//
// # Confirmation, freshness and the observer's clock
//
// [View.Confirm] is the check a member makes before it challenges: one
// Fetch from the role's partition leader (a ListOffsets round trip before
// the view's first catch-up) for the partition's last stable offset, a wait
// until the table holds everything below it, and, only when a transaction
// is open there, one more Fetch to name its producer. It fails,
// rather than answer from the table, when the cluster cannot be reached,
// when ctx ends first, or while the partition's offsets have gone
// backwards and the view has not yet rebuilt its table ([ErrRewound]; see
// "When the topic starts over").
//
// [View.ConfirmRecent] may spare that round trip: the view's own consumer
// long-polls every partition, and each of its fetch answers carries the
// same last stable offset and high watermark as Confirm's Fetch. When the
// latest answer's request was sent at most maxAge before the call (on
// this process's monotonic clock), after the last probe of an earlier
// confirmation returned, shows no open transaction and was read to its
// last stable offset, the confirmation is taken from it: the state then
// holds everything committed before that request was sent, not before
// the call. An answer a network partition held is one whose request was
// sent before the partition: older than maxAge once the partition lasts
// longer, so it is never used for the confirmation that follows it.
//
// [View.Health] says, without blocking, whether the table is current: the
// view probes the topic's end every [Options].HealthInterval, and is
// unhealthy when no broker has answered it for [Options].StaleAfter, when
// it has not been confirmed caught up for that long, or while a partition
// whose offsets went backwards (the topic was recreated, or the cluster
// restarted without its data) has not been rebuilt yet (see "When the
// topic starts over"). Lookups keep answering from the table meanwhile.
//
// Each lease in a state carries LeaseSeenAt: when this view applied (or
// restored) the lease record, on the view's clock ([Options].Clock); a
// lease of a rebuilt table, when that table replaced the old one.
// Expiry judged from it plus the lease's span ([rolestate.LeaseSpan]) does
// not depend on the holder's clock; a view that first reads a lease when
// it starts stamps it then, so it credits the lease with its whole span.
// [View.Holder] and [View.Leader] judge a lease live that way
// ([rolestate.State.Live]), never by its deadline; a release is never
// live.
//
// # Stopping
//
// [View.Run] returns promptly once its ctx ends, whatever the cluster
// does: every connection of the view (its client's, its partition
// consumers', goka's topic manager's) is dialed through one
// ctxcall.Conns, which Run shuts as soon as ctx ends: the connections are
// reset, a dial under way is cancelled and later dials fail at once, so a
// sarama call waiting on a broker that does not answer (a metadata
// refresh, a ListOffsets, a fetch) fails at once instead of waiting out
// its timeouts. Run then waits at most 2s for the prober's calls and 2s
// for the client's close, and leaves behind whatever has not ended by
// then. The view writes nothing, so nothing is left undone. Every probe
// round trip (of [View.WaitCaughtUp], [View.Confirm] and the health
// monitor) also returns as soon as its own ctx ends, and the connections
// to its broker are reset then.
package view
