// Package group computes how a group's roles spread over its live
// members, the same way on every member from the same view.
//
// A group is a set of roles ([Expand] names one by a pattern such as
// shard-{0..1023}) whose members each take about their share: ceil of
// their weight's fraction of the roles ([Shares]), at most one per member
// for a semaphore's slots. [Assign] gives each role an owner:
//
//   - Sticky: a holder keeps its roles up to its share, those it scores
//     highest ([Score], rendezvous hashing).
//   - The rest go, in role order, to the member of highest score that is
//     below its share.
//
// Why it cannot oscillate: a holding in which no member is above its
// share is its own assignment, so once members hold what Assign says,
// it says the same again. A move is only ever from a member above its
// share to one below it, and each lowers the excess.
//
// Why it does not win a role twice: every member computes the same owner
// for a vacancy from the same view, and only the owner campaigns first;
// the others follow in score order, a stagger apart, so a dead owner
// delays the role by a stagger, not by a race. The broker's fence keeps
// one holder at a time whatever the views say.
package group
