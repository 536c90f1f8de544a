// Package election is krole's entry point for a Go program: one [Session]
// builds, from one [Config], everything a member of some roles needs, and
// runs it under one lifecycle.
//
// [Role], [MemberID], [Token], [Cluster], [Settings], [Work], [Held] and
// [Event] are aliases of the other packages' types, so the common program
// imports this package alone. The etcd-shaped program is four calls (see
// the package's Example):
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
// A session without a member and roles only reads and writes nothing:
//
//	sess, err := election.New(election.Config{Cluster: election.Cluster{Brokers: brokers}})
//	if err != nil { ... }
//	defer sess.Close()
//	e, _ := sess.Election("db")
//	for h := range e.Observe(ctx) { ... } // the holder, then each change
//
// # What a Session starts
//
// [New] connects a [fencing.BrokerTransport] (its only I/O) and builds a
// [view.View] of the role topic and, with Config.Member, a
// [processor.Member] that reads the view and acts through the transport.
// The transport's transaction timeout is Settings.TransactionTimeout, so
// a lease write left open by a crash is aborted before the lease readers
// last saw runs out (package processor, "Liveness"). Config.Clock drives
// both the member and the view.
//
// [Session.Run] runs the session until its ctx ends, with work, and
// campaigns for every role of Config.Roles. Without Run, the first
// [Election.Campaign], [Election.Leader] or [Election.Observe] starts it
// in the background, without work, and [Session.Close] stops it; the
// member then registers only for the roles Campaign was called for.
//
// A run runs the view and the member under one errgroup and blocks until
// both have returned:
//
//  1. the view starts following the role topic;
//  2. once it has caught up, Config.OnReady is called and the member
//     starts: it registers, campaigns, and runs the work while it holds a
//     role ([processor.Member.Run]);
//  3. when ctx ends, the member stops the work, deregisters and ends its
//     member session, while the view still answers its lookups;
//  4. then the view stops;
//  5. then the transport is closed, and Run returns.
//
// A fatal error of the view ends the member as if ctx had ended, after
// Config.OnFatal, and Run returns it as a [*ViewError]. A failed first
// catch-up is retried (100 ms doubling to 5 s, logged at warn). The
// member's one fatal error is another live process under Config.Member
// ([ErrMemberInUse]; package processor, "One process per member id"). A
// lost role is an [Event], not an error; the member campaigns again.
//
// # Defaults
//
// Only Config.Cluster.Brokers is required; Config.Member and Config.Roles
// go together. The settings default as [processor.Settings] says (a 10s
// lease), the role topic is "krole.roles", the client id "krole-" + the
// member, the view's table is in memory, and there are no logs, metrics
// or callbacks unless Config names them.
//
// # The etcd-shaped calls
//
// [Session.Election] gives one role etcd's concurrency.Election calls:
// [Election.Campaign] (the only call that registers, besides Run),
// [Election.Leader], [Election.Resign] and [Election.Observe]. Leader and
// Observe only read. The value a holder is reported with is its lease's,
// written under its token, so no registration can change it.
// [Session.Writer] and [Session.Transport] write fenced by the holding's
// token; only the transport that minted a token can write under it.
//
// The guarantees are those of packages processor and fencing: the
// broker's fence on the role's transactional id, never clocks. A Session
// adds none; it wires the parts the way they are safe to run (the view
// outlives the member, one transport for the member and its writes, the
// transaction timeout within the lease).
package election
