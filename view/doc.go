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
//     round trip). A caller that needs "at least everything committed before
//     now" calls [View.WaitCaughtUp] first, which costs a broker round trip.
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
// goka v1.1.14 considers a partition recovered once it has been handed the
// record at high watermark - 1. A partition whose last offset is a
// transaction marker (every committed lease write ends with one) never gets
// there, nor does one with an open transaction, and goka holds back every
// other partition until all have recovered. The view replaces goka's
// notion: it asks the partition leaders for the last stable offset and
// reads the partition's tail back from it to find the last record that a
// read_committed consumer is handed; the partition is caught up once the
// view has applied that record. goka's own recovery is pointed at the same
// record (its topic manager is wrapped), so it finishes too.
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
// starting with the current one; with [View.Role] it makes a *View the
// state source of a member.
package view
