// Package check is `krole check`: it tests, on the user's own cluster,
// every assumption krole makes of it, and reports each as a named
// [Result] (pass, warn, fail or skip) with what it found and what to do.
//
// It is safe to run against a production cluster:
//
//   - it writes to one scratch role only, ScratchPrefix followed by 12
//     random hex digits, whose transactional id is the configured prefix
//     followed by that name; before its first write it checks that the
//     role and its transactional id are unknown to the cluster, and
//     writes nothing when they are not (the id's token is checked when
//     the cluster can say: without Describe on it, or without
//     DescribeTransactions, the role's records decide). No other role is
//     read or written; no running member is fenced.
//   - it writes to the role topic (the scratch role's partition), not to
//     a scratch topic: the checks are about that topic (its compaction,
//     replication, leaders and ACLs), a member's principal may write
//     there and may not create topics, and the writes cost readers of
//     that partition no more than one lease write does (an open
//     transaction holds read_committed readers of the partition back
//     until it ends, for milliseconds here). Every record it writes is a
//     registration of the scratch member (krole-check- followed by the
//     same hex digits): it writes no lease, since krole never writes a lease
//     tombstone (readers count one as forged), so a lease could never be
//     removed.
//   - at the end (the cleanup check, which runs even when the budget ran
//     out) it takes a new epoch of the scratch id, which aborts any
//     transaction a check left open, tombstones the scratch
//     registration, and reads the role back empty. The transactional id
//     stays known to its coordinator until
//     transactional.id.expiration.ms passes unused.
//   - every check runs within [Options].Timeout, and the whole run
//     within [Options].Budget (the cleanup gets a Timeout of its own
//     after it), so a cluster that does not answer makes checks fail,
//     never hang.
//
// # The checks
//
// In the order they run ([Report].Checks):
//
//   - reachability: the transport connects (TLS, SASL) and the
//     metadata answers; when it fails, the report holds it alone.
//   - versions: each broker's ApiVersions serve every request krole
//     sends, at versions it can speak; and which of the tables the test
//     suite runs under (kafka-3.0, kafka-4.0, redpanda;
//     internal/testcluster) gives the same request versions.
//   - role-topic: the topic exists and is compacted (cleanup.policy is
//     compact alone); segment.ms, min.compaction.lag.ms and
//     delete.retention.ms against what `krole init` sets.
//   - role-partitions: every role's records lie in the partition
//     codec.Partition gives it for the topic's partition count now (all
//     partitions read, read_committed). A role found elsewhere means the
//     count changed, and the role's fencing numbers started again.
//   - durability: replication factor, min.insync.replicas and
//     unclean.leader.election.enable, which must not be true.
//   - acl.*: each permission the principal of [Options].As needs, tried
//     with the request that needs it (a fetch past the end of the
//     scratch partition, the scratch registration, InitProducerId and
//     DescribeTransactions on the scratch id; for an operator also
//     DescribeConfigs, and CreateTopics and IncrementalAlterConfigs with
//     validate_only); a refusal names the ACL and the kafka-acls.sh
//     command that adds it.
//   - transactions.init: InitProducerId on the scratch id with the
//     transaction timeout of the configured lease.
//   - transactions.fence and transactions.read-committed: the fence
//     scenario (see fenceScenario): a second InitProducerId fences the
//     first; a produce and a commit under the fenced epoch are refused,
//     with the codes reported, and krole (package fencing's own mapping,
//     through BrokerTransport.Transact) reads each as fenced; an open
//     transaction holds read_committed readers back, an aborted one
//     never shows, a committed one does.
//   - timeouts: transaction.max.timeout.ms against the transaction
//     timeout, and the broker's abort interval with the stall it allows.
//   - describe: DescribeTransactions answers for the prefix, with the
//     token InitProducerId minted last.
//   - clock: the transaction coordinator's clock against the local one,
//     from the start time it stamps on an open transaction (reported by
//     DescribeTransactions); a warning above [Options].ClockWarn.
//   - latency: p50 and p99 of a burst of transactions of one record, as
//     a lease write or a member session's heartbeat writes them, and the
//     smallest safe lease they imply.
//   - cleanup: above.
//
// With As [Viewer] the checks that write are reported as skipped, and the
// run sends only requests that read (ApiVersions, Metadata, Fetch,
// ListOffsets, FindCoordinator, DescribeConfigs, DescribeTransactions).
package check
