// Package chaos is krole's chaos suite: member processes holding roles on
// an embedded cluster while faults are injected at random, and an
// independent auditor that reads everything back afterwards and judges
// it. `make chaos` runs the suite for CHAOS_DURATION (default 5m) with
// seed CHAOS_SEED (random when unset, logged first); `make test` runs it
// for 30 s with a fixed seed, and the mass failover (below) of 1000 roles
// (about 25 s).
//
// # The run
//
// [Run] starts a 3-broker embedded cluster (package internal/devcluster)
// in the test process, so that the driver reaches kfake's controls, and
// Config.Members (5) processes of the member program (internal/chaos/member,
// built with `go build` by [BuildMember]). Each member is a candidate for
// all Config.Roles (40; `make chaos`: CHAOS_ROLES) roles, so that each holds
// several (eight on average, more while others are down), all renewed by
// its one member session (package processor, "Member sessions": one
// heartbeat transaction per heartbeat interval in its session partition of
// the role topic, and a lease written only at an election), with
// Config.Lease (2 s) and the timings
// processor.Settings derives from it (renew 400 ms, stagger 200 ms,
// transaction timeout 1 s), and a request timeout of 1 s. It runs an
// election.Session (view, transport, processor.Member; the view outlives
// the member, the transport both) whose Config.Clock, the member's and
// the view's, runs a per-process offset ahead of the system clock, drawn
// from [-MaxClockOffset, +MaxClockOffset] at every start (the suite's
// runs: 5 s, two and a half leases).
//
// While it holds a role, a member writes numbered records (role, member,
// token, sequence) through a fencing.Writer under the holding's token to
// the topic chaos.out, keyed by role, every Config.WriteEvery (Roles *
// 12.5 ms, 500 ms for 40 roles: about 80 records a second from all the
// members, whatever the number of roles); while it
// holds the role "stream" it runs processor/stream from chaos.in, which
// the driver fills with consecutive numbers every 50 ms, to chaos.stream.
//
// With Config.Postgres (the random runs: the test binary's PostgreSQL
// server, package internal/testdb, started while the member program
// builds; the mass failover has none) the driver creates a database of
// the run's own with the members' tables and sqlfence's fence table, and
// a member holding a role other than the stream's also writes a row there every
// Config.WriteEvery, on a goroutine of its own, through package sqlfence
// under the holding's fencing number (processor.Held.Fence): role,
// number, member, token, the holding's sequence number, and the system
// time taken before the member checked that the holding's context had
// not ended, then began the transaction. The transaction takes the row's
// pos from a counter row of the role that it increments and holds locked
// until it ends, so a role's rows commit in the order of their pos. A
// write once begun is not cut short when the holding ends (whether it
// commits is the fence's decision); after sqlfence.ErrStale the holding
// writes no more rows. A member has at most four transactions in flight.
//
// Each member appends its events to a JSON-lines file the driver names:
// "start"; "minted" as soon as AcquireEpoch returns a token, before any
// lease is written under it (election.Config.OnMinted); "elected" and
// "revoked" from processor's events; "write" when a numbered record's
// write call returned, for every call, whatever it returned: the
// sequence number, the system time the call began and the outcome ("ok";
// "may-have-committed", the one error after which the record may still
// commit: fencing.ErrUnknownOutcome from an EndTxn commit resent without
// a success until the context ended; otherwise the error's kind:
// "unknown-outcome", "fenced", "not-held", "producer", "client", "admin",
// "context", "error"; a call cut short by SIGKILL has no line);
// "dbwrite" when a row's fenced transaction returned, with the same
// fields and the holding's fencing number (outcome "ok", "stale",
// "reused", "conflict", "context" or "error"); "commit" after each stream
// transaction; each with the member's own time and the system time.
//
// The faults, chosen with the seed, one every Config.FaultEvery (1 s) on
// average, each logged with its start and end to faults.jsonl:
//
//   - member faults (45%; at most two members down at once, three times
//     in four a member that holds a role): SIGKILL, restarted after
//     lease/2 to 3 leases; a crash mid-heartbeat: the next EndTxn of the
//     member's session transactional id (chaos.session/<member>) that
//     reaches its coordinator, a heartbeat's (or the session end's)
//     commit after its record was produced, is not processed (a kfake
//     control): the member is SIGKILLed and the request's connection
//     closed, so that the transaction stays open and holds back the
//     readers of the session's partition of the role topic, the leases of
//     a quarter of the roles with it, until the coordinator aborts it at
//     the transaction timeout (1 s); logged as a kill (detail
//     "mid-heartbeat") from the SIGKILL, restarted after lease/2 to 3
//     leases, and abandoned, nothing logged, when no such EndTxn comes
//     within three leases; SIGSTOP, SIGCONT after 1.25 to 2 leases; a
//     partition (every broker connection of the member's process, its
//     transport's and its view's, by their client ids, cut off both ways
//     through faultnet while the member runs on), healed after 1.25 to 2
//     leases, when what it sent meanwhile is delivered; restart (SIGTERM:
//     the member resigns, then starts again). Every start draws a new
//     clock offset.
//   - request faults (30%) on InitProducerId, AddPartitionsToTxn, Produce,
//     EndTxn or Fetch, for 100 ms to a lease: the error codes real brokers
//     answer (CONCURRENT_TRANSACTIONS, NOT_COORDINATOR,
//     COORDINATOR_LOAD_IN_PROGRESS on the coordinator's requests;
//     NOT_ENOUGH_REPLICAS, INVALID_PRODUCER_EPOCH, NOT_LEADER_OR_FOLLOWER
//     on Produce, not on the driver's own input; NOT_LEADER_OR_FOLLOWER,
//     UNKNOWN_SERVER_ERROR on Fetch) through kfake's Fault; requests
//     held 50 ms to 1.5 request timeouts before the broker answers
//     (ControlKey with SleepControl, so some answers come after the
//     client gave up); connections closed instead of an answer.
//   - stalls (5%): every Produce of every member, on every broker, held
//     back once through faultnet (Net.Hold, the members' client ids,
//     every node), for 0.3 to 0.5 leases (0.6 to 1 s: about a second,
//     shorter than HeartbeatDeadline, 1.6 s), then delivered, those the
//     client gave up on included; the requests behind a held one on its
//     connection wait with it. The driver's own input is not held.
//   - cluster faults (20%): RehashCoordinators, MoveTopicPartition,
//     ShufflePartitionLeaders, and RemoveNode followed lease/2 to 2 leases
//     later by AddNode of a new node (a new id and port: kfake keeps a
//     removed node's connections open and answering, and clients that
//     find the same id at the same address again stay on them, which no
//     real broker does). Members started later get the nodes of the
//     moment as their bootstrap brokers.
//
// After Config.Duration the faults are undone, the driver waits (up to
// Config.Settle) for the stream to commit the whole input, sends SIGTERM
// to every member (SIGKILL after 5 s), appends a plain sentinel record to
// every partition, and reads every partition up to its sentinel with
// read_committed isolation through franz-go's kgo: nothing of krole's
// read path (no sarama, no package of krole) reads the results. Lease
// values (with the member session each names) and the member sessions'
// records (key krole/session/<member>: heartbeats, with the roles each
// excludes, and session ends) are decoded here, from their JSON, not
// through package codec (a test holds the two to the same format). The
// rows are read with pgx, in the order of their pos; nothing of sqlfence
// reads them.
//
// # The mass failover
//
// With Config.Scenario ScenarioMassFailover (`make chaos
// CHAOS_SCENARIO=massfailover`, CHAOS_ROLES default 1000,
// CHAOS_CANDIDATES default 2) no fault is drawn. The first member
// campaigns alone until its event log shows it holding every role; the
// others start one after another, each once kgo reads a registration of
// the one before for every role on the role topic, so that they rank in
// that order on every role; half a lease later the first is SIGKILLed
// (a kill fault, detail "holding N roles") and left down. Every role
// then falls vacant at once and the candidates split them, each taking its
// share at the pace of its calls and deferring to the others on theirs
// (package processor, "Failover of a member holding many roles"). The run ends a lease
// after every role has a new holder, and is judged as any other; the
// failover and gap bounds add Settings.Takeover, 10 ms a role, a few
// times the pace one candidate takes them at on the embedded cluster.
// Config.Duration bounds each wait. The audit that matters here is
// double-win: a candidate that joins in on another's share while that one
// is still taking roles races it for some, both elected.
//
// # The audit
//
// [Audit] judges a [History] and reports each [Violation] with its
// evidence, then a summary with the lines "faults: N", "kills
// mid-heartbeat: N" (among them), "vacancies: N (won more than once: M,
// K of them while a fault could hold a challenge in flight)",
// "failovers: N",
// "max failover: X ms" and "violations: N" (and, after "max failover",
// the failover closest to its bound and "most of the tolerance used: X
// ms", the most a failover took beyond its bound without Tolerance, the
// evidence for the Tolerance below; and after it "writes: N (outcome
// count, ...)", the members' write lines by outcome, "database writes:
// N (outcome count, ...)", their dbwrite lines, "gaps judged: N",
// "longest gap" and "gap closest to its bound", each with its length and
// bound; its first line counts what was read: leases, heartbeats and
// session ends, numbered records, the stream's input and output, the
// database rows). Token
// order is (producer id, epoch); kfake never reuses a producer id.
//
// A holding's last renewal, from which the overlap and gap audits
// measure, is the system time (batch timestamp, set from the system clock
// when the batch is built, after the write began) of the latest of: its
// committed leases and its release; and, when its lease names a member
// session, every committed heartbeat of that session (the same member,
// producer id and nonce, an epoch at least the lease's) that does not
// exclude the role, and the session's end (a release of every lease
// naming it). A holder writes its lease at its election, when its value
// changes and hourly; its session's heartbeat, one per heartbeat interval,
// renews it. A heartbeat counts at most at the minted (or elected) line of
// the role's first newer token, and at most at the token's release: a
// session round vouches for a role only when its DescribeTransactions,
// sent at the round's start, still shows the token, so a round that did
// began before any newer token was minted, however late its heartbeat;
// the member's later heartbeats, which name the session still (it holds
// other roles), and stop excluding the role once its view shows the newer
// lease, renew nothing of a holding that ended.
//
//   - order: per role and partition of chaos.out, and per partition of
//     chaos.stream, the tokens of committed records in offset order never
//     decrease.
//   - unfenced: every committed record of chaos.out was written in a batch
//     whose producer id and epoch are the token the record names.
//   - stale: per role, no lease of a token is committed (in offset order
//     of the role's partition) after the first lease of a newer token.
//   - author: every lease on the role topic was written in a batch of the
//     producer id and epoch it names, and names the member whose event log
//     minted that token for that role; every heartbeat and session end in
//     a batch of the producer id and epoch of the session it names.
//   - exactly-once: every committed value of chaos.in is in chaos.stream
//     exactly once, and chaos.stream holds nothing else.
//   - failover: for each SIGKILL, SIGSTOP or partition at time k of a
//     member that held a role (by its event log: after its elected line,
//     before its revoked line or its next start), the crash mid-heartbeat
//     included (a kill), the role's next token is elected (its elected
//     line, else its minted line) within "Lease + Renew +
//     Stagger*(Members-1) + Tolerance + injected" after k. Lease + Renew:
//     the vacancy shows at most a lease after the holder's last renewal
//     is observed, which is at most a heartbeat interval before k (a
//     heartbeat of its session, one a heartbeat interval; a crash
//     mid-heartbeat leaves the last one uncommitted, and the open
//     transaction holds back the session partition's readers for at most
//     the transaction timeout, 1 s, from before k: within the lease the
//     vacancy waits for anyway); Stagger*(Members-1): every other
//     candidate ahead in rank may be down; injected: for each other fault
//     whose span [Start, End + RequestTimeout] overlaps [k, k + the
//     bound], what the gap bound below counts for it (a broker fault its
//     length End-Start plus one RequestTimeout, the client's wait to give
//     up on a request; a fault of the holder or of a member that minted a
//     token of the role meanwhile Lease + RequestTimeout; any other
//     member fault RequestTimeout + Stagger*(Members-1)), the bound
//     growing with each fault it counts until no more overlaps. (A
//     failover is a gap that a fault of the holder began, and is judged
//     as one: a challenger's faults delay it as they delay a gap.) The
//     chain of faults counts whole: a fault that begins while earlier
//     ones delay the failover delays it too. Tolerance (default Lease/2,
//     1 s at the suite's 2 s lease) is a margin for a loaded 2-core
//     machine: the members' scheduling and the challenge's round trips;
//     the summary's "most of the tolerance used" line shows how much of
//     it a run used. A role whose bound runs past the shutdown without a
//     new holder is not judged.
//   - elections: per role, each election (the first committed lease of a
//     token) after the first is explained, or it is a violation. An
//     election whose token was minted less than a Stagger after the
//     previous election is a concurrent race (below) first, up to
//     Members-1 in a row, and spends no fault's budget, which is kept
//     for the elections only a fault explains.
//     So does an election after the previous election's revoked line
//     said its token was retired (package processor, "Tokens": the
//     holder takes its own lease back at once, fencing only its former
//     self, and its heartbeats exclude the role, so another candidate
//     may take it as well); what left its request without an answer,
//     which may happen with no fault injected, is the gap audit's to bound.
//     So does an election whose challenge began (its minted line) after
//     the previous holding's release was committed (a resignation, or a
//     group's handover, package processor, "Groups"), or after its
//     holder's revoked line said it handed the role over: the holder's
//     session drops the role first, and a successor that read that
//     heartbeat may fence the release in flight.
//     Faults explain the other elections of a role in time order, each up to its budget
//     ([Explains]): a kill, stop, partition or restart of the previous holder, or the
//     shutdown, explains one, if it started before the election and ended
//     no more than a lease before the previous election began; so does
//     one of a challenger it may have cut short between the two
//     elections: a member that minted a token of the role then (not the
//     winner's), or, for a kill or an exit then, any member when a token
//     between the two was minted by no member's log (a challenger killed
//     before its minted line: its challenge, minted, fenced the one
//     before it and wrote no lease); a broker
//     fault explains 1 + (End-Start)/HeartbeatDeadline of each role, within
//     [Start, End + Lease + RequestTimeout]; a delay of InitProducerID,
//     and a stall (an InitProducerId may wait behind a held Produce on
//     its connection), explains Members + (End-Start)/HeartbeatDeadline (a
//     challenge its member gave up on is still minted by the broker when
//     it gets to it, fencing the holder of the moment; one per member in
//     flight). Explaining an election says nothing of how late it came:
//     that is the gap audit's.
//     Member starts and clock
//     offsets explain nothing: with expiry judged on the observer's clock
//     they must not cause elections. A role's opening campaign is
//     special: members that start together may each take the role before
//     their views show each other's registrations (package processor says
//     so), so up to Members-1 elections within a lease of the role's
//     first election are "opening" races. An election is a race (the "races"
//     count of the summary) when its token was minted less than a
//     Stagger after the previous election, up to Members-1 such in a row
//     (challenges already under way, concurrent with the one that won;
//     the summary names the longest chain), or, not explained by a
//     fault, when it was minted less than a lease after the previous election
//     and that one was not itself a race (a neighbouring rank racing for
//     the vacancy the fault opened). Elections after the shutdown are not
//     judged.
//   - overlap (two holdings at once beyond what the fence allows): a
//     holder may believe it holds until its local deadline, HeartbeatDeadline
//     (4/5 of the lease, 1.6 s) after the start of the last session
//     round that vouched for the role, or of its last successful lease
//     write, or its election, on its own monotonic clock (package
//     processor). The
//     auditor bounds that start from above by the holding's last
//     renewal (above) or its
//     elected line, whichever is later; when a SIGSTOP of the process
//     spans the deadline, or begins within Tolerance after it, the
//     deadline moves to the SIGCONT (a stopped process can do nothing,
//     giving up included). A holder's own log
//     shows it holding until its revoked line for the token, or, without
//     one, until the last line its process wrote. If that is later than
//     the deadline + Tolerance while a newer token of the role had been
//     elected before it, it is a violation. Assumes: the member processes
//     share the machine's system clock (they do: the offsets are applied
//     to their Config.Clock only), which runs at the rate of their
//     monotonic clocks.
//   - after-mint: once a member's minted line for a token of a role is
//     written (after AcquireEpoch returned, so after the coordinator
//     fenced every older token of the role), no write under an older
//     token of the role can commit. A committed lease, numbered record or
//     stream output under token T whose write began after the minted (or
//     elected) line of a token newer than T is a violation, whether or not
//     the newer token ever wrote anything (the order audit compares only
//     committed records with each other, and misses a late commit the
//     newer token never followed). The write's begin is its batch
//     timestamp (system clock, when the batch was built), for a numbered
//     record also its write line's begin, whichever is later. Assumes: one
//     system clock for the members (the comparison is strict, in whole
//     milliseconds, so truncation cannot make it report falsely).
//   - sequence: per role and token, the committed numbered records carry
//     each sequence number once, in increasing offset order (a holder
//     writes them one at a time, each after the previous call returned).
//   - zombie: no numbered record is committed whose write line says the
//     call returned an error, other than "may-have-committed"
//     (docs/GUARANTEES.md, section 2: a write that returned an error never
//     shows later).
//   - gap: per role, between consecutive elections in token order, the
//     role is without a holder from the earlier holding's last renewal
//     (above: its last vouching heartbeat, lease, release or session
//     end) to the later
//     election (its elected line, else its minted line), and after its
//     last election up to the shutdown. A gap longer than [GapBound] is a
//     violation unless at some moment of it every member process was down
//     (killed, stopped, cut off, restarting, or exited and not yet started
//     again): no live candidate. GapBound is Lease + Renew +
//     Stagger*(Members-1) + Tolerance (the lease runs out; at most a renew
//     interval to commit it and for the candidates to read it; the
//     candidates' turns, those ahead possibly down; the machine's load),
//     plus, for each fault whose span [Start, End + RequestTimeout]
//     overlaps [from, from + the bound], counted as the bound grows (the
//     failover bound's chain rule): a broker fault (a stall included) its
//     length End-Start plus one RequestTimeout; a member fault (kill,
//     stop, partition, restart, exit) of the gap's holder, or of a member
//     that minted a token of the role from the gap's start until the
//     fault's end + RequestTimeout, Lease + RequestTimeout, not its
//     length (a challenge the fault cut short, a token minted late or a
//     lease write left open, can make the candidates that lost to it wait
//     a lease for a newer lease, after a request given up on); any other
//     member fault RequestTimeout + Stagger*(Members-1) (the member is
//     passed over within the base's stagger, but a transaction of another
//     role it left open holds back its partition's readers up to the
//     transaction timeout, 1 s, the request timeout, and the candidates'
//     turns count again from then; the heartbeat a crash mid-heartbeat
//     leaves open holds back its session's partition alike; counting
//     every member fault as a lease and a request timeout would let the
//     chain grow a gap's bound to minutes when faults come every second).
//     So with five members and no other fault near
//     it, a stall of one second allows 6.2 s: lease 2 s, renew 0.4 s,
//     four staggers 0.8 s, tolerance 1 s, the stall's 1 s and a request
//     timeout 1 s; a role that stays unheld 14 s after it, with a live
//     candidate, is reported, though the stall explains the election that
//     ends the gap (explaining an election says nothing of how late it
//     came, and the failover audit measures only after a fault of the
//     holder).
//     The first election of a role (the opening) is not judged. In a run
//     whose faults come every second, the chain still makes some bounds
//     long (the summary's "longest gap" and "gap closest to its bound"
//     lines show the bounds). Run leaves the whole history in
//     Config.Dir/history.json; `go test -run TestAuditAgain
//     ./internal/chaos` with CHAOS_HISTORY=path judges one again, after a
//     change of the auditor.
//   - double-win: per role, every vacancy is won once. A vacancy begins
//     when a holding ends as the role topic shows it: its release is
//     committed, its member session ends, a heartbeat of its session
//     excludes the role (one begun no earlier than the holding's lease,
//     both on the member's clock, as rolestate.ExcludesLease has it), or
//     it expires a Lease after its last renewal (above), each judged at
//     the minted line of the next token: a challenger can have read only
//     what was committed before its token was minted. The next election fills
//     the vacancy; an election by another member before that winner's
//     holding ended is a second win of the same vacancy (the earlier
//     winner never let the role go, and two members believed they held
//     it). An election by the holding's own member is a take-back
//     (package processor, rule 5) and wins nothing: the holding goes on
//     under the new token, and when its own heartbeat had excluded the
//     role first, a candidate that saw the exclusion may race the
//     take-back (rule 6) and win that vacancy once. So a resignation, a
//     handover (the session's end), a step-down followed by expiry, or
//     an expiry, then an election, is one vacancy won once. The opening
//     campaign (see elections) and elections after the shutdown are not
//     judged. A vacancy won more than once is reported with the role,
//     each winner's member, token, lease offset and minted time, unless
//     a fault could have held a challenge in flight: a broker fault, or
//     a fault of one of its winners, whose span [Start, End +
//     RequestTimeout] overlaps [its start or its first win, whichever is
//     earlier, less a RequestTimeout, its last win]. The summary counts
//     both. With a fault every second the random runs shadow most such
//     races; the mass failover injects no fault to shadow them.
//   - db-order: per role, in commit order (pos), no database row of a
//     smaller fencing number is committed after one of a larger number
//     (sqlfence's guarantee: once a holding has written, every older
//     holding's transaction is refused).
//   - db-holding: every database row's number is a holding of its
//     member: the offset of the first committed lease of a token of the
//     role (on the role topic, read with kgo), a lease naming the row's
//     member and token; and that holding was live when the row's
//     transaction began (the row's begin time): the member's own log
//     shows it elected and not yet revoked, nor the process started
//     again, or no later holding of the role had begun its first lease
//     (its batch timestamp is later). The member takes the begin time
//     before it checks the holding's context, which ends before its
//     revoked line is written, so the audit is sound on one system
//     clock. A deposed holder whose transaction began after it knew it
//     was deposed is what this catches: the fence itself lets such a
//     write through until the newer holding has written.
//
// The auditor's own tests feed it hand-made histories with one violation
// of each kind and require that it reports it, and, for each class of
// audit (overlap, after-mint, sequence and zombie, gap), a history just
// inside the bound that it must not report.
package chaos
