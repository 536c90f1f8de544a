// Package processor holds the succession rules of krole and the
// long-running member that runs them. This is the map; why the rules are
// safe, and the bounds they keep, are argued in the docs/DESIGN.md
// sections named below.
//
// # The parts
//
// [Decide] is the rules as a pure function: given a role as the view sees
// it ([rolestate.State]), this member, what it knows locally ([Local]) and
// the time, it says what to do next ([Action]).
//
// A [Member], made by [New], runs the rules for one member id and one or
// many roles: it follows the roles through a [Source] (the view), acts
// through a fencing.Transport, reports each transition as an [Event], and
// runs [Work] while it holds a role ([Member.Run]). A role's rules run on a
// goroutine only while it acts; a role that waits parks, and what it waits
// for (its next decision's time, a state from a [FollowNotifier] source, a
// note from the member session, a call) resumes it. So a member holding
// many roles spends no goroutine on each, and at most a few roles that do
// not hold act at once (actors.go). Beside the roles runs the member's
// session.
// [Settings] are the timings, derived from LeaseDuration by default;
// [Options] add the clock, the logger, the metrics and the event callback.
//
// # The rules
//
// [Decide]'s documentation states the rules, numbered, once; the rest of
// the package refers to them by number. In brief: candidates queue in join
// order and challenge in turn once a role is vacant, on their own clocks,
// each after confirming the role's state; a challenge is AcquireEpoch,
// which fences the previous holder at the broker, then a lease write.
//
// # Member sessions
//
// Each member keeps one session under a transactional id of its own,
// <prefix>session/<member>. Every lease it writes names the session, and
// one heartbeat per HeartbeatInterval, written whether or not it holds a
// role, renews every role it holds; each round also asks the coordinators
// for the held roles' tokens, so a deposed holder learns of its loss
// within a round. Safety still rests on each role's own fence. See
// docs/DESIGN.md, "Why it is safe: member sessions".
//
// # Stepping down while work stops
//
// A holder that resigns, withdraws, is deregistered by an operator or
// leaves (without KeepOnExit) cancels its work and keeps the holding
// renewed until work returns or the holding is lost, so no successor's
// work starts beside it; then it lets the role go. See docs/DESIGN.md,
// "Why it is safe: a deposed holder stops before its successor starts".
//
// # Confirmations from the source's own reads
//
// A source that can confirm a role's state from its own recent reads
// ([RecentConfirmer], as the view does) is asked to, no older than
// [Settings.ConfirmFreshness], instead of a round trip. Why that keeps the
// rules' guarantees: docs/DESIGN.md, "Confirmations from the source's own
// reads".
//
// # One process per member id
//
// On a transport that writes instances ([InstanceRegisterer]), a Member
// refuses to run beside another live process under its id ([Member.Run]
// returns a [*MemberInUseError]), and takes the id over from one that
// shows no sign of life for a LeaseDuration. See docs/DESIGN.md, "One
// process per member id".
//
// # Writing while holding
//
// Work that writes must carry [Held].Token, or its writes are not fenced.
// To Kafka: [fencing.BrokerTransport.Writer] or Transact of the transport
// given to [New] (only the transport that minted a token can write under
// it), or package [github.com/krabka/krole/processor/stream]. Elsewhere (a
// database, a service): pass [Held].Fence and have the target refuse
// numbers below the highest it has seen.
//
// # Tokens
//
// A token is (producer id, epoch) of the role's transactional id, minted
// at AcquireEpoch; it names one holding. Once the transport retires it (a
// write under it got no definite answer) the holding ends
// ([ReasonTokenRetired]) and nothing is written under it again. See
// docs/DESIGN.md, "Tokens: one token, one holding".
//
// # The fencing number
//
// [Held].Fence is the offset of the holding's first lease record in the
// role's partition: greater than every earlier holding's number, across
// producer ids, restarts and compaction, until the role topic is recreated
// or its partition count changes. See docs/DESIGN.md, "Why the fencing
// number only grows".
//
// # Many roles
//
// Holding a role costs no call per heartbeat interval. A member's calls are
// bounded by [Settings].MaxInFlight, and a challenge that timed out pauses
// all its campaigns (krole_queued_roles), so an overloaded member slows
// down instead of collapsing. See docs/DESIGN.md, "Many roles under
// overload".
//
// # Failover of a member holding many roles
//
// When a lease ran out while its holder's session still claimed the role,
// the survivors each take their own share of its roles (rule 7 of
// [Decide]); a role its holder let go goes in join order. See
// docs/DESIGN.md, "Failover of a member holding many roles".
//
// # Groups
//
// A member given a [Group] spreads the group's roles over the group's
// live members instead of campaigning for all of them: its heartbeats
// name the group and are its only registration, and each half heartbeat
// interval it computes the group's assignment ([group.Assign]) from its
// source. [Group]'s documentation states the rules; how to run a group,
// and why it neither oscillates nor wins a role twice: docs/GROUPS.md.
//
// # Safety
//
// Safety rests on the epoch fence the transaction coordinator keeps on the
// role's transactional id, never on clocks: once AcquireEpoch has returned
// a token, no write under an older token of the role becomes visible to
// read_committed readers. Expiry, confirmations and the held-back rule
// only make two believers, and needless handovers, rarer. See
// docs/DESIGN.md, "Safe without clocks" and "What the fence does not
// cover".
//
// # Liveness
//
// How soon a dead holder is replaced rests on the settings and on the
// members' monotonic clocks running at similar rates, never on wall clocks
// agreeing: a holder stops HeartbeatDeadline after its last renewal began,
// before any observer, counting from when it saw that renewal, may take
// over. The bounds, and what a stock broker's late abort of a crashed
// member's transaction costs: docs/DESIGN.md, "Liveness: what bounds a
// vacancy".
//
// # Events, logs, metrics
//
// Events go to Options.OnEvent one at a time, in order for each role
// ([Event]; [Reason] says why a holding ended). Transitions are logged
// through Options.Logger (log/slog; quiet by default), and metrics go to
// Options.Registerer (none by default), whose doc lists them.
package processor
