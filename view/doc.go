// Package view materializes the role topic into a local table with a goka
// View: for each role its latest lease and its candidates ranked by
// registration offset, lowest first. Lookups read only the local table,
// never the broker.
//
// # What a lookup guarantees, and what it does not
//
// A lookup answers what the table believes: the records of the role topic
// that this process has read. It is not the broker's fence. A holder that
// [View.Holder] reports as live may already have been fenced by a newer
// epoch whose lease the table has not read yet, or whose lease write is
// still inside an open transaction; a lease that looks expired may be
// renewed in a record on its way. Only a transactional write under the
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
// # A view's first moments
//
// The first catch-up also waits until each partition's consumer, the one
// that follows the topic from then on, has handed the view the last record
// it can be handed below the last stable offset. (After a restart from the
// state dir with nothing new to read, the consumer starts at the last
// stored record and hands it again; the view does not apply it twice.) A
// consumer that has handed a record is subscribed at the broker and
// fetching, so a record committed after the first catch-up reaches the
// table one fetch later, as it does later on: about the time the writer
// takes to read its own acknowledgement.
//
// The exception is a partition that holds no such record when the view
// starts: an empty partition (in a new topic, say), or one holding only
// transaction markers and aborted records from where the consumer starts.
// Nothing proves that its consumer fetches, and sarama's consumer collects
// new partition subscriptions for 100ms (partitionConsumersBatchTimeout)
// before their first fetch. A record committed to such a partition in that
// window, the first ~100ms after the first catch-up, reaches the table
// only with that first fetch: up to ~100ms late (docs/BENCHMARKS.md,
// section View, has the figures). The same holds for ~100ms after the view
// restarts a partition's consumer on an error (see [View.Run]). This
// cannot be closed from outside sarama: the batching has no setting, and
// sarama gives no sign of a first fetch that returned nothing (a partition
// consumer's HighWaterMarkOffset comes from ListOffsets when it starts,
// and only a fetch that returns records changes it).
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
// [View.Watch] hands over each change of a role (new holder, lease renewed
// or released, candidate joined or left). A slow subscriber never blocks
// the view: its pending changes coalesce per role, keeping the first Before
// and the latest After, so it may miss intermediate states but never the
// latest one. [View.Follow] is the same for one role as a stream of states,
// starting with the current one; with [View.Role] and [View.Confirm] it
// makes a *View the state source of a member.
//
// # Confirmation, freshness and the observer's clock
//
// [View.Confirm] is the check a member makes before it challenges: one
// ListOffsets round trip to the role's partition leader, a wait until the
// table holds everything below the partition's last stable offset, and one
// Fetch to name the producer of a transaction left open there. It fails,
// rather than answer from the table, when the cluster cannot be reached,
// when ctx ends first, or when the partition's offsets went backwards
// ([ErrRewound]).
//
// [View.Health] says, without blocking, whether the table is current: the
// view probes the topic's end every [Options].HealthInterval, and is
// unhealthy when no broker has answered it for [Options].StaleAfter, when
// it has not been confirmed caught up for that long, or when a probe found
// the topic holding less than the view read (the topic was recreated, or
// the cluster restarted without its data; the view reports it but does not
// rebuild its table). Lookups keep answering from the table meanwhile.
//
// Each lease in a state carries LeaseSeenAt: when this view applied (or
// restored) the lease record, on the view's clock ([Options].Clock).
// Expiry judged from it plus the lease's span ([rolestate.LeaseSpan]) does
// not depend on the holder's clock; a view that first reads a lease when
// it starts stamps it then, so it credits the lease with its whole span.
package view
