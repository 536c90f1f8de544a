// Package view materializes the role topic into a local table with a goka
// View: for each role its latest lease and its candidates ranked by
// registration offset, lowest first, each with the value it registered
// with ([View.Leader] gives the live holder's). Lookups read only the
// local table, never the broker.
//
// # What a lookup guarantees, and what it does not
//
// A lookup answers what the table believes: the records this process has
// read. It is not the broker's fence: a holder [View.Holder] reports as
// live may already be fenced by a lease not read yet (or still inside an
// open transaction), and a lease that looks expired may be renewed by a
// record on its way. Only a write the broker accepts under the current
// epoch proves a holding (see package fencing). The succession rules use
// the view to decide when to act and the broker to decide who wins.
//
// What the table does guarantee:
//
//   - It holds committed records only (read_committed).
//   - Candidates rank by registration offset; a tombstone removes one, a
//     re-registration moves it to the back.
//   - A lookup never answers from a half-read table: until the first
//     catch-up ([View.WaitCaughtUp]) it waits, bounded by its context, then
//     fails with [ErrNotCaughtUp]; after Run has returned, [ErrStopped].
//     Afterwards it answers at once, with the consumer's lag (about a fetch
//     round trip); call WaitCaughtUp first for "everything committed
//     before now".
//   - A lookup costs what the role it names holds, never the other roles.
//   - Records that do not decode are skipped, counted in [View.Stats] and
//     logged (the first of each kind at warn level); a key whose latest
//     value is unreadable keeps its last readable value.
//   - Forged leases are skipped ("Who can write what"), and a table whose
//     topic started over is rebuilt ("When the topic starts over").
//
// # Caught up
//
// The view is caught up once it has applied, in each partition, the last
// record below the last stable offset that a read_committed consumer is
// handed; goka v1.1.14's notion of recovered, which a partition ending in
// a transaction marker or holding an open transaction never reaches, is
// replaced, and goka's recovery reads nothing (goka.go lists what the
// view relies on in goka). One consumer of the view's own per partition
// reads for the whole Run, with raw read_committed fetches that carry
// each record's batch producer id, epoch and transactional flag. The
// rule, the first catch-up's wait for each consumer, and what a record
// committed right after it costs: docs/DESIGN.md, "The view: catching
// up"; the consumer: "The view: its consumer".
//
// # Who can write what
//
// A lease or release counts only when its batch is a transaction of the
// producer id and epoch of the token it names, and that producer id is
// the one the role's own transactional id (<prefix><role>) has at the
// coordinator ([Options].Describe, remembered in [Options].Authors);
// other lease records, and any tombstone on a lease key, are skipped as
// forged ([SkipForged]). A lease awaiting its verdict waits outside the
// table, and [View.Confirm] and [View.WaitCaughtUp] wait for it.
// Registrations stay plain appends: Write on the role topic can reorder
// candidates and step a holder down, never take, hold or vacate a role.
// The argument, a reader without Describe, and the ACLs that matter:
// docs/DESIGN.md, "The view: who can write what".
//
// # Member sessions
//
// The view keeps each member's latest authentic session record (checked
// as a lease is, under rolestate.SessionAuthor), stamped when applied, and
// joins it to every lookup of a role whose lease names that member
// (rolestate.State.Session), so lookups judge the lease with it (see
// package rolestate). A heartbeat that only vouches is not published to
// Watch or Follow ([View.Session] looks it up); a record that drops roles
// is published as a change of each. [View.Confirm] confirms the session's
// partition too.
//
// # Drain requests
//
// The view keeps each member's latest drain request (codec.DrainRequest;
// a tombstone deletes it), and [View.DrainRequested] says whether it
// names a given incarnation of the member's session: a member of a group
// drains when it names its current one. Requests are plain appends, as
// registrations are: Write on the role topic can make a member hand its
// roles over, never take, hold or keep one.
//
// A record of a kind this reader does not know is skipped and counted:
// [SkipVersion] for a value of a newer format version, or a key of
// krole's shape whose kind it does not know (krole/<kind>/...). A reader
// older than drain requests counts theirs as [SkipKey], and logs the
// first at warn level.
//
// # When the topic starts over
//
// A partition whose log now ends below what the view has read (recreated,
// or the cluster restarted without its data) is read again from its start
// into a table of its own, which then replaces the partition's roles
// ([Stats].Rebuilds); meanwhile Confirm fails with [ErrRewound] and
// [View.Health] is unhealthy. What lookups and WaitCaughtUp do until then,
// and what is not seen: docs/DESIGN.md, "The view: when the topic starts
// over".
//
// # State on disk
//
// With [Options].StateDir the table is kept in goka's LevelDB storage, each
// value with its offset, so a restart reads only what was written since.
// Without it, each Run reads the topic from its start.
//
// # Watching
//
// [View.Watch] hands over each change of a role (not a heartbeat that only
// vouches). A slow subscriber never blocks the view: its pending changes
// coalesce per role (first Before, latest After). [View.Follow] streams
// one role's states; with [View.Role] and [View.Confirm] it makes a *View
// a member's state source. Applying a record costs O(subscribers of its
// role + subscribers of every role).
//
// # Confirmation, freshness and the observer's clock
//
// [View.Confirm] is the check before a challenge: it returns once the
// table holds every record of the role's partition committed when the
// call started, in one round trip when no transaction is open, and fails
// rather than answer from the table. [View.ConfirmRecent] may take that
// round trip from the consumer's latest fetch answer, when it is fresh
// enough. Their docs say when and how; the reads: docs/DESIGN.md, "The
// view: what Confirm reads".
//
// [View.Health] says, without blocking, whether the table is current: it
// is unhealthy when no broker answered its probes
// ([Options].HealthInterval) for [Options].StaleAfter, when it was not
// confirmed caught up for that long, or while a rewound partition is not
// rebuilt. Each lease carries LeaseSeenAt, when this view applied it on
// [Options].Clock, and [View.Holder] and [View.Leader] judge it from there
// ([rolestate.State.Live]), never by its deadline.
//
// # Stopping
//
// [View.Run] returns promptly once its ctx ends, whatever the cluster
// does: every connection of the view is dialed through one ctxcall.Conns,
// which Run shuts then (connections reset, dials cancelled and refused),
// so no sarama call waits out its timeouts. Run then waits at most 2s for
// the prober's calls and 2s for the client's close. The view writes
// nothing, so nothing is left undone. Every probe round trip also returns
// as soon as its own ctx ends, resetting its broker's connections.
package view
