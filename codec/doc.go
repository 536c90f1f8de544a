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
// A [Role] is 1-128 characters of [A-Za-z0-9._-] and a [MemberID] 1-128 of
// [A-Za-z0-9._:@-] (so host:pid and user@host work); [NewRole] and
// [NewMemberID] check them, and every invalid input is an [*InvalidError]
// matching [ErrInvalid]. A [Token] is the producer id and epoch that the
// Kafka transaction coordinator minted for a role's transactional id; this
// package only carries and compares tokens ([Token.Newer]), it never makes
// one up.
//
// # Encoding
//
// Keys are plain text that reads well in a console consumer such as kcat:
//
//	krole/reg/<role>/<member>
//	krole/lease/<role>
//
// A role never contains '/', nor does a member id, so the key splits without
// escaping. Keys carry no version: a key must stay byte-identical for as long
// as compaction has to match it.
//
// Values are one line of JSON whose first field is the format version "v":
//
//	{"v":1,"kind":"registration","member":"node-1","registered_at":1700000000000}
//	{"v":1,"kind":"lease","member":"node-1","producer_id":4242,"epoch":7,"granted_at":1700000000000,"deadline":1700000030000}
//
// A registration may carry the candidate's value, an opaque string of at
// most [MaxValueLen] bytes of UTF-8 (often the candidate's address, for
// clients to find the holder); [CheckValue] checks it, and a registration
// without one has no "value" field:
//
//	{"v":1,"kind":"registration","member":"node-1","registered_at":1700000000000,"value":"10.0.0.7:8080"}
//
// The value is an optional field of version 1, not a new version: readers
// ignore fields they do not know, so a reader older than values reads a
// registration with a value as the registration, without its value (checked
// against the released decoder; a test in this package keeps that shape).
//
// A registration may also carry the instance that wrote it: a random
// nonce the member process drew when it started, then its host and pid
// ([CheckInstance]; an optional field of version 1 too, last). Two
// processes under one member id tell each other apart by it:
//
//	{"v":1,"kind":"registration","member":"node-1","registered_at":1700000000000,"value":"10.0.0.7:8080","instance":"3f9c0a1b2d4e5f60@web-1/4242"}
//
// A lease carries its holder's value in every lease the holder writes, so
// that the value readers report for the holder was written under the
// holder's token and a plain append cannot change it. A lease with a
// value is written at format version 2 ([LeaseValueVersion]), with the
// value last; one without stays at version 1:
//
//	{"v":2,"kind":"lease","member":"node-1","producer_id":4242,"epoch":7,"granted_at":1700000000000,"deadline":1700000030000,"value":"10.0.0.7:8080"}
//
// A reader of version 1 only skips such a lease as newer (counted); it
// would have refused a version-1 lease with a value as malformed. A
// version-1 lease with a value is malformed.
//
// Values are checked when written with [CheckWriteValue] (no control or
// format characters) and shown with [PrintableValue] (escaped and quoted when
// they hold any), since a stranger with Write on the topic can append any
// bytes: readers accept any valid UTF-8 value that fits.
//
// A member session (see package processor, "Member sessions") adds a third
// kind of record, keyed by member, in the partition chosen from the member
// id alone ([SessionPartition]): its heartbeats and its session end
// ([Heartbeat]), written at format version 3 ([SessionVersion]). A lease
// that names the holder's session is written at version 3 too:
//
//	krole/session/<member>
//	{"v":3,"kind":"heartbeat","member":"node-1","granted_at":1700000000000,"deadline":1700000015000,"session":{"producer_id":17,"epoch":3,"nonce":"9f2c4e6a8b0d1f35"},"excluded":["stuck.role"]}
//	{"v":3,"kind":"session_end","member":"node-1","session":{"producer_id":17,"epoch":3,"nonce":"9f2c4e6a8b0d1f35"}}
//	{"v":3,"kind":"lease","member":"node-1","producer_id":4242,"epoch":7,"granted_at":1700000000000,"deadline":1700000030000,"session":{"producer_id":17,"epoch":2,"nonce":"9f2c4e6a8b0d1f35"}}
//
// A lease may carry the fencing number of its holding, "fence": the
// offset of the holding's first lease record in the role's partition (see
// [Lease].Fence). Every lease of a holding but its first carries it
// (that one cannot know its own offset), after "deadline"; it is an
// optional field of every lease version, never negative:
//
//	{"v":3,"kind":"lease","member":"node-1","producer_id":4242,"epoch":7,"granted_at":1700000000000,"deadline":1700000030000,"fence":17,"session":{"producer_id":17,"epoch":2,"nonce":"9f2c4e6a8b0d1f35"}}
//	{"v":1,"kind":"lease","member":"node-1","producer_id":4242,"epoch":7,"granted_at":0,"deadline":1,"fence":17}
//
// The session's transactional id is <prefix>session/<member>
// ([SessionName]): a role never contains '/', so it is never a role's.
// Version-3 values take the general decoding path.
//
// A value whose version is newer than [SessionVersion] decodes to an
// [*UnknownVersionError], never a panic, so an older reader skips a newer
// writer's record and counts it. Times are Unix milliseconds.
//
// Decoding has a fast path for the exact bytes this package writes (the
// shapes above, fields in this order, no whitespace, no escapes), which
// does not use encoding/json; anything else, valid or not, takes the
// general path through encoding/json, so what an input decodes to, or the
// error it gives, does not depend on the path (a fuzz test holds them to
// that). [RecordBuf] decodes into storage the caller provides, for a
// reader of many records.
//
// [KeyCodec] and [RecordCodec] are the goka codecs of keys and values, for
// the view.
//
// The golden files in testdata/ pin these bytes; a change to the encoding
// fails the golden test unless the files are rewritten with -update.
package codec
