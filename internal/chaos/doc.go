// Package chaos is krole's chaos suite: member processes holding roles on
// an embedded cluster while faults are injected at random, and an
// independent auditor that reads everything back afterwards and judges
// it.
//
// This is a map of the package. What a run does, each fault, the mass
// failover, and the exact rule and bound of each audit are in
// docs/CHAOS.md; which guarantee each audit shows, and the latest runs, in
// docs/GUARANTEES.md, "The chaos suite".
//
// # Running it
//
// `make chaos` runs TestChaos (chaos_test.go, whose comment lists the
// CHAOS_* variables); its defaults, and the part of the suite `make test`
// runs: docs/DEVELOPING.md, "Building and testing". A run's history is
// judged again with TestAuditAgain: docs/CHAOS.md, "Judging a run again".
//
// # The files
//
//   - run.go: [Config] and [Run], the driver: the embedded cluster, the
//     member processes ([BuildMember] builds the member program), the
//     stream's input, the shutdown, and the history filled from what was
//     read back (leases and heartbeats decoded from their JSON).
//   - faults.go: the random faults, drawn with the seed and logged to
//     faults.jsonl.
//   - scenario.go: the mass failover ([ScenarioMassFailover]).
//   - pg.go: the run's PostgreSQL database, the members' tables, and the
//     rows read back with pgx.
//   - read.go: the sentinels, and everything read back through franz-go's
//     kgo up to them.
//   - history.go: what the auditor judges: [History] (written to and read
//     from history.json by [WriteHistory] and [ReadHistory]), its
//     [Event], [Fault], [Lease], [Heartbeat], [Record] and [Row], and the
//     run's [Settings].
//   - audit.go: [Audit] and its [Report] of each [Violation] by [Kind];
//     the audits order, unfenced, stale, author, exactly-once, failover
//     ([FailoverBound]) and elections ([Explains]).
//   - audit_classes.go: overlap, after-mint, sequence, zombie and gap
//     ([GapBound]).
//   - audit_vacancy.go: double-win.
//   - audit_db.go: db-order and db-holding.
//   - member/: the member program, one process per member.
//   - chaos_test.go: the runs (TestChaos, TestChaosGroup,
//     TestChaosMassFailover) and TestAuditAgain; audit*_test.go: the
//     auditor's own tests, on hand-made histories.
package chaos
