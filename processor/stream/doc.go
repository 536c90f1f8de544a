// Package stream is a consume-transform-produce loop for the holder of a
// krole role, exactly once across failovers, the way Kafka Streams does it
// with exactly_once_v2.
//
// [Run] works for one holding (one role, one token). It reads an input
// topic with read_committed isolation from the offsets a consumer group
// has committed, passes each record to [Config].Transform, and for each
// batch of records runs one transaction under the holder's token (see
// fencing.BrokerTransport.Transact) that writes the outputs and commits
// the group's input offsets (AddOffsetsToTxn, TxnOffsetCommit). The
// outputs and the offsets that say they were produced become visible
// together, or neither does. The group is never joined: the holder of the
// role owns every partition of the input, and krole's succession, not a
// group rebalance, decides who that is.
//
// With a krole member, Run is the member's work; Config.Transport must be
// the transport the member acts through, since a token can be written
// under only by the transport that minted it. An election.Session (the
// library's entry point) runs the member and owns that transport
// (election.Session.Transport):
//
//	sess, _ := election.New(election.Config{Cluster: fcfg, Member: "worker-1",
//		Roles: []codec.Role{"orders-enricher"}})
//	defer sess.Close()
//	err := sess.Run(ctx, func(ctx context.Context, held processor.Held) error {
//		return stream.Run(ctx, stream.Config{Transport: sess.Transport(), Group: "orders-enricher",
//			Input: "orders", Output: "orders.enriched", Transform: enrich}, held.Role, held.Token)
//	})
//
// examples/exactlyonce is this program in full.
//
// # The guarantee
//
// Every input record below the committed offsets has its outputs in the
// output topics exactly once, as seen by a read_committed reader, however
// often the role changes hands, and whether a holder stops cleanly, is
// cancelled in the middle of a transaction, crashes, or is deposed while
// it still runs:
//
//   - A new holder's AcquireEpoch aborts any transaction the previous
//     holder left open, and the broker refuses every later write, offset
//     commit and commit of the previous token. A deposed holder that has
//     not noticed its loss cannot add an output or move an offset.
//   - Run reads the committed offsets with OffsetFetch RequireStable, after
//     its token's own pending transaction (if any) has ended, so it starts
//     exactly after the last committed batch: no record is skipped (no
//     gap) and none whose outputs are committed is processed again (no
//     duplicate).
//   - When a transaction fails for another reason (a broker error), Run
//     aborts what may be open, reads the committed offsets again and
//     resumes from them, so a commit that did land is not repeated and one
//     that did not is redone.
//   - When a request of a transaction gets no answer (a lost connection,
//     a timeout), the transport retires the token
//     (fencing.ErrUnknownOutcome): Run sends nothing more under it, not
//     even an abort, and returns the error. The next holder's AcquireEpoch
//     aborts the open transaction, and a late write of it is refused. A
//     commit without an answer is sent again until answered; if it never
//     is, the batch may have committed, outputs and offsets together, and
//     the next holder resumes after it or redoes it accordingly.
//
// The outputs of the records of one input partition are written in input
// order, and records with the same key keep their order when they go to
// the same output partition.
//
// # The limits
//
//   - Readers of the output must read with read_committed isolation. A
//     read_uncommitted reader sees the outputs of aborted transactions,
//     which a failover will write again.
//   - Transform may run more than once for a record (its batch was aborted,
//     or the holder was deposed before the commit). It must have no effect
//     outside the messages it returns: a side effect elsewhere (a database
//     write, an HTTP call) happens at least once, not exactly once. It
//     should be deterministic if the outputs of a redone batch must equal
//     those of the aborted attempt, though exactly-once does not depend on
//     it: only the committed attempt is ever visible.
//   - Only writes made in Run's transactions are fenced. A processor that
//     writes to Kafka by other means, or to other systems, must carry the
//     token itself (see fencing.Writer and fencing.Transport.Describe).
//   - The group's committed offsets are the processor's position. Nothing
//     else may commit offsets for the group (no consumer group with that
//     id may run), or the position is lost.
//   - An input record that Transform refuses (an error) stops every holder
//     at the same offset: Run returns the error without committing. Route
//     bad records to a dead-letter topic through Transform's outputs
//     instead.
//   - A committed offset below the input's log start (the records were
//     deleted by retention before they were processed) is an error, not a
//     silent skip.
//   - A deposed holder learns of the fence only when it next writes: an
//     idle Run goes on waiting until its ctx ends, which the krole member
//     cancels when it learns that it lost the role (see processor's
//     Member.Run).
//   - Input partitions added while Run runs are read only from the next
//     Run (or the next resumption after a failed transaction).
//   - Run's transactions share the role's transactional id with the
//     holding's lease writes, which wait for them. Choose BatchSize (and
//     Linger) so that one batch's writes take well under
//     fencing.Config.TxnTimeout. A batch's outputs are held in memory until
//     it is written.
//   - Records carry key and value; headers are neither read nor written.
package stream
