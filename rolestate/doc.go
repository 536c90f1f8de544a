// Package rolestate is the state of a role as the role topic says it is:
// its latest lease and its candidates ranked by registration offset. It is
// what the succession rules (package processor) decide on and what the
// view (package view) keeps for every role; it imports neither goka nor
// sarama, so the rules can be read, built and tested without them.
//
// [Fold] computes a role's [State] from the role's records in offset
// order; the view keeps the same answer incrementally.
package rolestate
