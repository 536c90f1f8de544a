// Package election is krole's entry point for a Go program: one [Session]
// builds, from one [Config], everything a member of some roles needs, and
// runs it under one lifecycle.
//
// # What a Session starts
//
// [New] connects a [fencing.BrokerTransport] to the cluster (the only
// I/O New does), and builds a [view.View] of the role topic and a
// [processor.Member] that reads the roles from the view and acts through
// the transport. The transport's transaction timeout is not a setting of
// its own: it is Settings.TransactionTimeout (half the lease by default),
// so that a lease write left open by a crashed holder is aborted before
// the lease readers last saw has run out (see package processor, "Liveness").
// One clock, Config.Clock (the system clock by default), drives both the
// member and the view: the member's timers and lease stamps, and the
// view's stamps of when it saw each lease, by which [Election.Leader]
// judges a lease live for its span.
//
// [Session.Run] runs the view and the member under one errgroup
// (golang.org/x/sync/errgroup) and blocks until both have returned:
//
//  1. the view starts following the role topic;
//  2. once it has caught up (see [view.View.WaitCaughtUp]), Config.OnReady
//     is called and the member starts: it registers, campaigns, and runs
//     the work while it holds a role (see [processor.Member.Run]);
//  3. when Run's ctx ends, the member cancels the work, waits for it,
//     resigns what it holds and deregisters, through the open transport,
//     while the view still runs (so its lookups keep answering);
//  4. then the view stops;
//  5. then the transport is closed (it waits, for a bounded time, for
//     the aborts of transactions whose callers gave up), and Run returns.
//
// A fatal error of the view (the role topic deleted, a state dir that
// cannot be written; see [view.View.Run]) ends the member as if ctx had
// ended, in the same order, after Config.OnFatal has been told, and Run
// returns it as a [*ViewError]. A first catch-up whose probe of the
// topic's end fails (a leader moving, a broker restarting) is not fatal:
// it is tried again, with a backoff from 100 ms doubling to 5 s, each
// failure logged at warn, and the member starts once it succeeds. The
// member itself has no fatal errors: a lost role is an event
// ([processor.Event]), not an error, and the member campaigns again.
//
// # Defaults
//
// Only Config.Cluster.Brokers, Config.Member and Config.Roles are
// required. The settings default as [processor.Settings] says (a 10s
// lease, the rest derived from it), the role topic is "krole.roles", the
// Kafka client id is "krole-" + the member (one per member, so the
// brokers tell members apart), the view keeps its table in memory, and
// there are no logs, metrics or callbacks unless Config names them.
//
// # What it exposes
//
// Everything Run started is reachable while it runs: [Session.View] for
// lookups and watches, [Session.Member] and [Session.Resign] for the
// member, [Session.Writer] and [Session.Transport] for writes fenced by
// the holding's token, and Config.OnEvent for the member's transitions.
// Only the transport that minted a token can write under it, which is
// why the work writes through the Session's.
//
// # The etcd-shaped calls
//
// [Session.Election] gives one role the calls of etcd's
// concurrency.Election: [Election.Campaign] (blocks until this member
// holds the role; returns the [Holding] and its token), [Election.Resign]
// (hands over now), [Election.Leader] (the live holder and its value) and
// [Election.Observe] (a channel of holder changes). The member stays the
// engine: it campaigns from Run on, and Campaign waits for it; a value
// (Config.Value, or Campaign's) rides in the member's registrations and
// in every lease it writes. The holder's value that [Election.Leader],
// [Election.Observe], `krole leader` and the HTTP API report is its
// lease's, written under its token, so a registration appended by anyone
// cannot change it; a holder whose value changes (Campaign with another
// value while holding, etcd's Proclaim) writes a lease with it at once
// (processor.Member.RenewNow). A value with a control character is
// refused (codec.CheckWriteValue).
//
// The guarantees are those of packages processor and fencing: the
// broker's fence on the role's transactional id, never clocks. A Session
// adds no guarantee of its own; it wires the parts the way they are
// safe to run (the view outlives the member, one transport for the
// member and its writes, the transaction timeout within the lease).
package election
