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
// many roles, one goroutine per role: it follows the roles through a
// [Source] (the view, or a [TransportSource]), acts through a
// fencing.Transport, reports each transition as an [Event], and runs
// [Work] while it holds a role ([Member.Run]). Beside the role goroutines
// runs the member's session (see "Member sessions"). [Settings] are the
// timings, derived from LeaseDuration by default; [Options] add the clock,
// the logger, the metrics and the event callback.
//
// # The rules
//
// [Decide]'s documentation states the rules, numbered. In brief:
// candidates queue in join order; a holder's member session renews its
// lease; every member judges a lease's expiry on its own clock; once a
// role is vacant the candidates challenge in turn, each after confirming
// the role's state; a challenge is AcquireEpoch, which fences the previous
// holder at the broker, then a lease write under the new token.
//
// # Member sessions
//
// Each member keeps one session under a transactional id of its own,
// <prefix>session/<member>, with a random incarnation nonce. Every lease
// it writes names the session, and one heartbeat per RenewInterval,
// written whether or not it holds a role, renews every role it holds: the
// lease lives one span after its latest vouching heartbeat was seen, and a
// session record that drops the role (an exclusion, or the session end a
// leaving member writes) releases it at once. Each round also asks the
// coordinators for the held roles' tokens, so a deposed holder learns of
// its loss within a round. Safety still rests on each role's own fence.
// The mechanism and its cost: docs/DESIGN.md, section "Why it is safe:
// member sessions".
//
// # Stepping down while work stops
//
// A holder that resigns, withdraws, is deregistered by an operator or
// leaves (Run's context ends, without KeepOnExit) cancels its work and
// keeps the holding renewed until work returns or the holding is lost, so
// no successor's work starts beside it; then it lets the role go. See
// docs/DESIGN.md, section "Why it is safe: a deposed holder stops before
// its successor starts", which also says when work's context is cancelled.
//
// # Confirmations from the source's own reads
//
// A source that can confirm a role's state from its own recent reads
// ([RecentConfirmer], as the view does) is asked to, no older than
// [Settings.ConfirmFreshness], instead of a round trip. Why that bound
// keeps the rules' guarantees: docs/DESIGN.md, section "Confirmations
// from the source's own reads".
//
// # One process per member id
//
// A member id names one process. On a transport that writes instances
// ([InstanceRegisterer]), a Member refuses to run beside another live
// process under its id ([Member.Run] returns a [*MemberInUseError]), and
// takes the id over from one that shows no sign of life for a
// LeaseDuration. The rules: docs/DESIGN.md, section "One process per
// member id".
//
// # Writing while holding
//
// Work that writes must carry [Held].Token, or its writes are not fenced.
// To Kafka: [fencing.BrokerTransport.Writer] or Transact of the transport
// given to [New] (only the transport that minted a token can write under
// it), whose transactions the broker refuses once a later member has
// taken the role, or package [github.com/krabka/krole/processor/stream],
// an exactly-once consume-transform-produce loop. Elsewhere (a database,
// a service): pass [Held].Fence and have the target refuse numbers below
// the highest it has seen (see "The fencing number").
//
// # Tokens
//
// A token is (producer id, epoch) of the role's transactional id, minted
// at AcquireEpoch; it stays the same for the whole holding and names that
// holding alone. Once the transport retires it (a write under it got no
// definite answer) nothing is written under it again: the holding ends
// ([ReasonTokenRetired]), and the member may take its own lease back at
// once, fencing only its former self (rule 5 of [Decide]). See
// docs/DESIGN.md, section "Tokens: one token, one holding".
//
// # The fencing number
//
// [Held].Fence is the offset of the holding's first lease record in the
// role's partition: strictly greater than every earlier holding's number,
// across producer ids, restarts and compaction, until the role topic is
// recreated or its partition count changes. A target outside Kafka that
// refuses numbers below the highest it has seen refuses every earlier
// holding. Why the number only grows: docs/DESIGN.md, section "Why the
// fencing number only grows".
//
// # Many roles
//
// Holding a role costs no call per renew interval. A member's calls are
// bounded by [Settings].MaxInFlight, and a challenge that timed out pauses
// all its campaigns, RetryBackoff doubling up to LeaseDuration
// (krole_queued_roles), so an overloaded member slows down instead of
// collapsing. Why, and what a stall costs: docs/DESIGN.md, section "Many
// roles under overload".
//
// # Failover of a member holding many roles
//
// When a lease ran out while its holder's session still claimed the role,
// the candidates rank by a split score of role and member, so the
// survivors of a member that held many roles each take their own share,
// and a candidate defers to a live one ranked ahead of it while that one
// takes roles (rule 7 of [Decide]). A role its holder let go goes in join
// order. See docs/DESIGN.md, section "Failover of a member holding many
// roles".
//
// # Safety
//
// Safety rests on the epoch fence the transaction coordinator keeps on the
// role's transactional id, never on clocks: once AcquireEpoch has returned
// a token, no write under an older token of the role becomes visible to
// read_committed readers. Expiry, confirmations and the held-back rule
// only make two believers, and needless handovers, rarer. What the fence
// covers and what not: docs/DESIGN.md, sections "Safe without clocks" and
// "What the fence does not cover".
//
// # Liveness
//
// How soon a dead holder is replaced rests on the settings and on the
// members' monotonic clocks running at similar rates, never on wall clocks
// agreeing: a holder stops on its own RenewDeadline after its last renewal
// began, before any observer, counting the span from when it saw that
// renewal, may take over. TransactionTimeout < LeaseDuration -
// RenewInterval keeps a crashed member's open transaction from hiding a
// healthy holder's renewals for a lease where the coordinator aborts it
// at the timeout; Apache Kafka and Redpanda abort it up to their check
// interval (10s by default) later. The bounds, and the defaults on a stock
// broker: docs/DESIGN.md, section "Liveness: what bounds a vacancy".
//
// # Events, logs, metrics
//
// Events go to Options.OnEvent one at a time, in order for each role
// ([Event]; [Reason] says why a holding ended). Transitions are logged
// through Options.Logger (log/slog; quiet by default), and metrics go to
// Options.Registerer (none by default), whose doc lists them.
package processor
