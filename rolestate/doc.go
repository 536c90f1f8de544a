// Package rolestate is the state of a role as the role topic says it is:
// its latest lease and its candidates ranked by registration offset. The
// succession rules (package processor) decide on it and the view keeps it
// for every role; it imports neither goka nor sarama.
//
// [Fold] computes a role's [State] from its records. [State.LeaseEnd] and
// [State.Live] are the one judgement of whether a lease holds, on the
// reader's clock, never by the holder's deadline: a lease lives its span
// ([LeaseSpan]) from when the reader saw it, or one [HeartbeatSpan] from
// the latest heartbeat of its member session that vouches for it
// ([State.SessionVouch]), whichever ends later; a release never lives.
//
// [CheckLeaseAuthor] and [CheckHeartbeatAuthor] check that a record was
// written by the producer it names; [Authors] knows which producer ids
// are each role's (and member session's) own.
package rolestate
