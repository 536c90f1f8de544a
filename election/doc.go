// Package election is krole's entry point for a Go program: one [Session]
// builds, from one [Config], everything a member of some roles needs, and
// runs it under one lifecycle.
//
// The common program imports this package alone: [Role], [MemberID],
// [Token], [Cluster], [Settings], [Work], [Held] and [Event] are the
// other packages' types under this package's names (aliases), so values
// pass between the packages as they are. The etcd-shaped program is four
// calls ([New], [Session.Election], [Election.Campaign], and a deferred
// [Session.Close]); see the package's Example:
//
//	sess, err := election.New(election.Config{
//		Cluster: election.Cluster{Brokers: []string{"127.0.0.1:9092"}},
//		Member:  "node-1",
//		Roles:   []election.Role{"db"},
//	})
//	if err != nil { ... }
//	defer sess.Close() // resigns what it holds, leaves, stops
//	e, _ := sess.Election("db")
//	h, err := e.Campaign(ctx, "10.0.0.1:5432") // blocks until held
//
// A program that only observes a role needs no member id and no roles:
// a session without them only reads, and writes nothing to the role
// topic.
//
//	sess, err := election.New(election.Config{Cluster: election.Cluster{Brokers: brokers}})
//	if err != nil { ... }
//	defer sess.Close()
//	e, _ := sess.Election("db")
//	for h := range e.Observe(ctx) { ... } // the holder, then each change
//
// # What a Session starts
//
// [New] connects a [fencing.BrokerTransport] to the cluster (the only
// I/O New does), and builds a [view.View] of the role topic and a
// [processor.Member] (when Config.Member is set) that reads the roles
// from the view and acts through the transport. The transport's transaction timeout is not a setting of
// its own: it is Settings.TransactionTimeout (half the lease by default),
// so that a lease write left open by a crashed holder is aborted before
// the lease readers last saw has run out (see package processor, "Liveness").
// One clock, Config.Clock (the system clock by default), drives both the
// member and the view: the member's timers and lease stamps, and the
// view's stamps of when it saw each lease, by which [Election.Leader]
// judges a lease live for its span.
//
// A session runs in one of two ways. [Session.Run] runs it until its ctx
// ends, with the work to do while holding a role, and blocks; its member
// campaigns for every role of Config.Roles. Or nothing runs it: then the
// first [Election.Campaign], [Election.Leader] or [Election.Observe]
// starts it in the background, without work, and [Session.Close] stops
// it, resigning what it holds; no step can be missed. Started so, its
// view runs from the first call, its member from the first Campaign, and
// the member registers for the roles Campaign was called for, no others.
// (Run called after the session started itself adopts that run: it
// campaigns for every role, and returns once its ctx has ended and the
// session has stopped.)
//
// A run runs the view and the member under one errgroup
// (golang.org/x/sync/errgroup) and blocks until both have returned:
//
//  1. the view starts following the role topic;
//  2. once it has caught up (see [view.View.WaitCaughtUp]), Config.OnReady
//     is called and the member starts (under Run at once, else at the
//     first Campaign; never in a session without a member): it
//     registers, campaigns, and runs the work while it holds a role (see
//     [processor.Member.Run]);
//  3. when Run's ctx ends, the member cancels the work, waits for it,
//     deregisters, and ends its member session (one session-end record
//     releases every role it holds; see package processor, "Member
//     sessions"), through the open transport, while the view still runs
//     (so its lookups keep answering);
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
// member's one fatal error is another live process under Config.Member
// (a member id names one process; see package processor, "One process
// per member id"): it then leaves without writing anything for the
// other process, and Run returns a [*MemberInUseError] (matching
// [ErrMemberInUse]), as does a Campaign waiting then. A restarted
// process whose predecessor died rejoins by itself, at most a lease
// after it starts. A lost role is an event ([processor.Event]), not an
// error, and the member campaigns again.
//
// # Defaults
//
// Only Config.Cluster.Brokers is required; Config.Member and Config.Roles
// go together, for a session that campaigns. The settings default as
// [processor.Settings] says (a 10s lease, the rest derived from it), the
// role topic is "krole.roles", the Kafka client id is "krole-" + the
// member (one per member, so the brokers tell members apart), the view
// keeps its table in memory, and there are no logs, metrics or callbacks
// unless Config names them.
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
// concurrency.Election:
//
//   - [Election.Campaign] registers the member for the role, blocks
//     until it holds the role and returns the [Holding] and its token. A
//     value (Config.Value, or Campaign's) rides in the member's
//     registrations and in every lease it writes; a holder that
//     campaigns with a new value keeps the role and writes a lease with
//     the value at once (etcd's Proclaim; processor.Member.RenewNow). A
//     value with a control character is refused (codec.CheckWriteValue).
//   - [Election.Leader] returns the live holder and its value (its
//     lease's, written under its token, so a registration appended by
//     anyone cannot change it: the same value [Election.Observe], `krole
//     leader` and the HTTP API report), as the session's view believes
//     it, reading the session's own writes: once Campaign has returned,
//     Leader names this member (until it loses or resigns the role), even
//     before the view shows its lease.
//   - [Election.Resign] hands the role over now and takes the member out
//     of the role's queue: it does not campaign for the role again until
//     Campaign is called again, as in etcd. Once it returns, Leader from
//     this session no longer names this member. ([Session.Resign], and an
//     operator's `krole resign --member`, hand over and queue the member
//     again at the back.)
//   - [Election.Observe] returns a channel of holder changes, judged as
//     Leader judges the holder.
//
// Campaign (for its role) and [Session.Run] (for every role of
// Config.Roles) are the calls that register; Resign leaves. Leader and
// Observe only read, as etcd's do: a session that calls nothing else
// never joins a role's queue and can never be handed the role.
//
// The guarantees are those of packages processor and fencing: the
// broker's fence on the role's transactional id, never clocks. A Session
// adds no guarantee of its own; it wires the parts the way they are
// safe to run (the view outlives the member, one transport for the
// member and its writes, the transaction timeout within the lease).
package election
