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
// never live. The view's lookups and the HTTP API use them.
package rolestate
