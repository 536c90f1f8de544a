// Package codec is krole's record model and its wire encoding.
//
// The role topic holds two kinds of record, both in the partition chosen
// from the role name alone (see [Partition]):
//
//   - a registration, keyed by (role, member): member M is a candidate for
//     role R. Its offset is M's join sequence; candidates rank by it, lowest
//     first. A tombstone (nil value) on the key removes the candidate.
//   - a lease, keyed by (role): the member that holds the role, its fencing
//     token, and when the lease was granted and ends. Only the latest counts.
//
// # Names and tokens
//
// [NewRole] and [NewMemberID] check names; every invalid input is an
// [*InvalidError] matching [ErrInvalid]. A [Token] is the producer id and
// epoch the transaction coordinator minted for a role's transactional id;
// this package carries and compares tokens ([Token.Newer]), never makes one.
//
// # Encoding
//
// Keys are plain text that reads well in a console consumer such as kcat:
//
//	krole/reg/<role>/<member>
//	krole/lease/<role>
//
// Neither a role nor a member id contains '/', so keys split without
// escaping. Keys carry no version: compaction must keep matching them.
//
// Values are one line of JSON whose first field is the format version "v":
//
//	{"v":1,"kind":"registration","member":"node-1","registered_at":1700000000000}
//	{"v":1,"kind":"lease","member":"node-1","producer_id":4242,"epoch":7,"granted_at":1700000000000,"deadline":1700000030000}
//
// A registration may carry, as optional fields of version 1 (readers
// ignore fields they do not know), the candidate's value ([CheckValue]:
// an opaque string, often its address) and the instance that wrote it
// ([CheckInstance]: a random nonce, host and pid, by which two processes
// under one member id tell each other apart):
//
//	{"v":1,"kind":"registration","member":"node-1","registered_at":1700000000000,"value":"10.0.0.7:8080","instance":"3f9c0a1b2d4e5f60@web-1/4242"}
//
// Every lease carries its holder's value, so the value reported for a
// holder was written under its token. A lease with a value is written at
// version 2 ([LeaseValueVersion]), value last; a version-1 lease with a
// value is malformed:
//
//	{"v":2,"kind":"lease","member":"node-1","producer_id":4242,"epoch":7,"granted_at":1700000000000,"deadline":1700000030000,"value":"10.0.0.7:8080"}
//
// Values are checked when written ([CheckWriteValue]: no control or
// format characters) and escaped when shown ([PrintableValue]); readers
// accept any valid UTF-8 value that fits, since anyone with Write on the
// topic can append any bytes.
//
// A member session (package processor, "Member sessions") adds a third
// kind, keyed by member, in the partition of the member id
// ([SessionPartition]): heartbeats and the session end ([Heartbeat]), at
// version 3 ([SessionVersion]), as is a lease that names a session:
//
//	krole/session/<member>
//	{"v":3,"kind":"heartbeat","member":"node-1","granted_at":1700000000000,"deadline":1700000015000,"session":{"producer_id":17,"epoch":3,"nonce":"9f2c4e6a8b0d1f35"},"excluded":["stuck.role"]}
//	{"v":3,"kind":"session_end","member":"node-1","session":{"producer_id":17,"epoch":3,"nonce":"9f2c4e6a8b0d1f35"}}
//	{"v":3,"kind":"lease","member":"node-1","producer_id":4242,"epoch":7,"granted_at":1700000000000,"deadline":1700000030000,"session":{"producer_id":17,"epoch":2,"nonce":"9f2c4e6a8b0d1f35"}}
//
// Every lease of a holding but its first carries the holding's fencing
// number, "fence" ([Lease].Fence), an optional field of every version:
//
//	{"v":3,"kind":"lease","member":"node-1","producer_id":4242,"epoch":7,"granted_at":1700000000000,"deadline":1700000030000,"fence":17,"session":{"producer_id":17,"epoch":2,"nonce":"9f2c4e6a8b0d1f35"}}
//	{"v":1,"kind":"lease","member":"node-1","producer_id":4242,"epoch":7,"granted_at":0,"deadline":1,"fence":17}
//
// A release may say why it was written, "cause" ([Cause]: rebalance,
// drain or leave, written by a member of a group), an optional field of
// every version after "fence": a reader that does not know it still reads
// the release, which matters more than its cause. A cause on a lease that
// is no release is malformed; one of a cause's shape that a reader does
// not know (a newer writer's) is read as it is, and taken as none:
//
//	{"v":1,"kind":"lease","member":"node-1","producer_id":4242,"epoch":7,"granted_at":0,"deadline":1,"fence":17,"cause":"drain"}
//
// A drain request ([DrainRequest]) asks a member of a group to hand
// every role over; it names the incarnation nonce of the member's session
// and applies to that incarnation only. It is keyed by member, in the
// partition of its session records, at version 4 ([DrainVersion]); a
// tombstone withdraws it:
//
//	krole/drain/<member>
//	{"v":4,"kind":"drain","member":"node-1","nonce":"9f2c4e6a8b0d1f35","requested_at":1700000000000}
//
// A value of a version newer than [DrainVersion] decodes to an
// [*UnknownVersionError], so an older reader skips a newer writer's
// record and counts it. A key of krole's shape whose kind is unknown,
// krole/<kind>/..., decodes to an error wrapping [ErrUnknownKind], which
// readers treat alike. (A reader older than drain requests takes their key
// for one that is not krole's: the view counts it as a bad key.) Times
// are Unix milliseconds.
//
// Decoding has a fast path for the exact bytes this package writes;
// anything else takes the general path through encoding/json, with the
// same result. [RecordBuf] decodes into storage the caller provides.
// [KeyCodec] and [RecordCodec] are the goka codecs, for the view. The
// golden files in testdata/ pin the bytes (rewritten with -update).
package codec
