// Package rolestate is the state of a role as the role topic says it is:
// its latest lease and its candidates ranked by registration offset. The
// succession rules (package processor) decide on it and the view keeps it
// for every role; it imports neither goka nor sarama.
//
// [Fold] computes a role's [State] from its records; the view keeps the
// same answer incrementally.
//
// [State.LeaseEnd] and [State.Live] are the one judgement of whether a
// lease holds, as an observer judges it: a lease lives its span
// ([LeaseSpan]) from when the reader saw it ([State].LeaseSeenAt), on the
// reader's clock, never by the holder's deadline; a release is never
// live. A lease that names its holder's member session also lives one
// [HeartbeatSpan] after the reader saw the latest heartbeat of that
// incarnation that vouches for the role ([State].Session), and ends when
// a session record drops the role ([State.SessionVouch]). The view's
// lookups and package internal/liveness (the CLI's and HTTP API's
// judgement) use them.
//
// [CheckLeaseAuthor] and [CheckHeartbeatAuthor] are the batch half of
// the check that a record was written by the producer it names;
// [Authors] keeps the other half, each role's (and member session's,
// [SessionAuthor]) own producer id.
package rolestate
