// Package rolestate is the state of a role as the role topic says it is:
// its latest lease and its candidates ranked by registration offset. It is
// what the succession rules (package processor) decide on and what the
// view (package view) keeps for every role; it imports neither goka nor
// sarama, so the rules can be read, built and tested without them.
//
// [Fold] computes a role's [State] from the role's records in offset
// order; the view keeps the same answer incrementally.
//
// [State.LeaseEnd] and [State.Live] are the one judgement of whether a
// lease holds, as an observer judges it: from when the reader saw the
// lease record ([State].LeaseSeenAt) plus its span ([LeaseSpan]), on the
// reader's clock, never by the holder's wall-clock deadline; a release is
// never live. A lease that names its holder's member session (see package
// processor, "Member sessions") lives, too, one heartbeat span
// ([HeartbeatSpan]) after the reader saw the latest heartbeat of that
// incarnation that vouches for the role ([State].Session), and ends when
// the reader saw a session record that drops the role (one that excludes
// it, or the session end), as after a release. [State.Renewal] names the
// latest of those renewals. The view's lookups use them, and package
// internal/liveness builds the CLI's and the HTTP API's judgement on them.
//
// [CheckLeaseAuthor] and [CheckHeartbeatAuthor] are the batch half of
// the check that a lease, or a session record, was written by the
// producer it names; [Authors] keeps the other half, the producer id of
// each role's (and each member session's, [SessionAuthor]) own
// transactional id.
package rolestate
