// Package processor holds the succession rules of krole and the
// long-running member that runs them.
//
// [Decide] is the rules as a pure function: given a role as the view sees
// it, this member, what it knows locally and the time, it says what to do
// next (register, wait, challenge, renew, step down, resign). A [Member]
// runs the rules for one member and one or many roles: it registers,
// follows the roles through a [Source] (the view), performs the actions
// through a fencing.Transport, reports each transition as an [Event], and
// runs a processor's [Work] while it holds a role ([Member.Run]).
//
// # The rules
//
// Candidates of a role rank by the offset of their registration, lowest
// first. A holder's lease names its member session, and the session's
// heartbeat, one transaction per RenewInterval for every role the member
// holds, renews it (see "Member sessions"); the holder writes its lease
// again only when its value changes and every [LeaseRewriteInterval]. A
// holding ends at once when the session's round finds the role's token
// moved at its coordinator (fenced), when the view shows a lease under a
// newer token, when the transport can no longer write under the token
// ([fencing.TokenChecker]: a write under it, work's, was fenced or got no
// answer), or when a lease rewrite is refused. A
// holder that has not been renewed within RenewDeadline of the start of
// the last round that vouched for it (or of its election, or of its last
// lease write) stops on its own, measured on its own monotonic clock only,
// before others may take over (see Liveness).
//
// Every other member judges a lease on its own clock, never on the
// writer's deadline: a lease record (each lease write is a new record, at
// a new offset) expires rolestate.LeaseSpan(lease) after this member first
// observed it, that is Deadline - GrantedAt (two readings of the writer's
// clock, so the writer's clock offset does not enter), capped at
// rolestate.MaxLeaseSpan. The observation is the member's own (kept in its
// [Local]; the view's LeaseSeenAt, on the view's clock, is not used). A
// member that has just started counts a lease it has never seen renewed
// from its first observation: it waits one span at most, even for a lease
// whose holder died long ago.
//
// A lease may name its holder's member session (codec.Lease.Session; see
// "Member sessions" below). Such a lease expires as above, or one
// heartbeat span (rolestate.HeartbeatSpan) after this member first
// observed the latest heartbeat of that session's incarnation that does
// not exclude the role (the source's own time for it when the source
// gives one this member's clock can take: the view, in the same process,
// stamps each record when it applies it), whichever is later; the
// session's record that excludes the role (a heartbeat begun no earlier
// than the lease: one begun before it excluded an earlier lease of the
// role, see rolestate.ExcludesLease) or ends the session makes the
// role vacant at once, and a record of another incarnation keeps nothing
// alive. The member looks the session's record up afresh at every
// decision ([SessionSource]): heartbeats are not role changes.
//
// A role is vacant when it has no lease, its lease is a release (see
// [codec.ReleaseLease]) or its lease has expired as above. Then the
// candidates challenge in turn. They rank in join order when the holder let
// the role go, and by a split score of role and member when its lease ran
// out while its session still claimed it (see "Failover of a member
// holding many roles"); the member named in the lease that ended ranks
// last either way, and the candidate of effective rank r
// challenges r*Stagger after it first observed the vacancy, on its local
// clock; while a candidate ranked ahead of it is alive (the member saw a
// heartbeat of that candidate's member session within two RenewIntervals)
// it defers to it while that candidate makes progress (one LeaseDuration
// past its turn, or past the last time the member saw it take a role,
// whichever is later), so that the roles of a member that died holding
// many, all vacant at once, are not raced for by several candidates.
// Before a challenge, the candidate confirms the role's state
// ([Source].Confirm: one round trip to the partition's leader, and a wait
// until its source holds everything committed below the last stable
// offset; or, from a [RecentConfirmer], its own read of at most
// [Settings.ConfirmFreshness] ago, see "Confirmations from the source's
// own reads") and decides again on the confirmed state, at the time the
// confirmation returned (a lease record it shows for the first time is
// observed then, however long the round trip was held); it challenges only
// if the rules still say so, and never from a failed confirmation (it backs
// off, RetryBackoff doubling up to RenewInterval). So a member back from
// a network partition, a pause or with a lagging view sees the renewals it
// missed, each a record it has not yet seen expire, and does not fence
// their holder. A challenge is AcquireEpoch (which fences any previous
// holder at the broker) followed by a lease write under the new token.
// The winner deregisters ("prunes") the candidates that did not challenge
// in their turn and the member whose lease expired, so dead registrations
// delay one succession by a Stagger each and then are gone. A live member
// that was pruned sees that it is no longer a candidate and registers
// again, at the back. A holder whose registration someone else removed
// (`krole resign --member`, a tombstone on its key) hands the role over
// first, as Resign does (Revoked with ReasonDeregistered, then the
// release), then registers again at the back: an operator's way to make
// a live holder step down. It stops its work first, and while work stops
// it keeps the holding renewed: its goroutine checks in with the member
// session every RenewInterval, so the session's heartbeats go on vouching
// for the role and each round that does moves the local deadline on (no
// lease is written meanwhile), so that the role is neither released nor
// left to lapse while work runs and no successor's work starts beside it
// (`krole run`: while any process of CMD's tree lives). The wait itself
// is bounded only by work: it lasts until work returns, which Run waits
// for in any case (krole run's work returns once CMD's tree is gone,
// SIGKILL after --kill-timeout). The renewals end when the holding is
// lost: the session's round finds the token moved (the release that
// follows is then fenced too), the session's incarnation ends, or no
// round vouches for the role before the local deadline (the lease runs
// out); then the member goes on without work, which may outlive the
// holding. A token the transport retired meanwhile (a write of work's
// got no answer) is found at the release, which is then written under a
// new epoch as below, within the local deadline. Resign, Withdraw and
// the end of Run's context (which waits for work in any case) renew the
// same way while work stops; work that failed has returned.
//
// A member that was fenced (its session's round found its token moved, or
// a write under its token was refused) or lost a challenge race
// (its lease write after AcquireEpoch refused) does not challenge that
// role again until its view shows a lease at a higher offset than the one
// it showed then, or LeaseDuration has passed since the refusal came: the
// winner's lease write is bounded by the winner's TransactionTimeout,
// shorter than that, so by then it has shown or failed. A stale vacancy is
// not challenged twice. (Every such local time is taken when the call
// that learned it returned, never before the call: a confirmation, a
// registration's wait to show in the view, a loss.)
//
// While confirmations show the partition's readers held back by an open
// transaction of a producer other than the one named in the role's live
// lease (rolestate.Confirmed.OpenProducerID; for a lease that names a
// member session, also one in the session's partition of a producer
// other than the session's, when the role's partition has none open),
// the lease may have been renewed behind that transaction (a lease
// rewrite, or a heartbeat of its holder's session): the time it looks
// expired is frozen time. A transaction seen open for the first time may
// be one in flight for milliseconds (another role's lease write, another
// member's heartbeat), so the candidate confirms again a RetryBackoff
// later: if the same transaction is still open at the
// same offset (Confirmed.OpenOffset), readers are frozen, and it does not
// challenge, confirming again every RenewInterval until the transaction
// ends; if readers have moved (no open transaction, or one at another
// offset), it goes on, and the candidates' turns (rank × Stagger) count
// again from the thaw, since every candidate of the partition waited past
// its turn on the same frozen readers. An open transaction of the lease's
// own producer id (the role's transactional id: a holder or challenger
// that died mid-write) does not hold it back: AcquireEpoch aborts that
// transaction.
// Nor does one after a release or with no lease: no holder's renewal can
// hide behind it.
//
// A holding ends at once, without a write, when the transport retires its
// token (a write under it answered fencing.ErrUnknownOutcome: a lease
// rewrite, or work's through a fencing.Writer or a stream, which the
// member learns at its next decision from fencing.TokenChecker, or the
// fencing.ErrNotHeld whose cause says the token was retired after an
// unknown outcome; revoked: [ReasonTokenRetired]). The view still shows
// the member's own lease under that token as live; the member, and only
// it, may challenge that lease at once (after a confirmation, pruning
// nobody): it fences only its former self. Any other lease follows the
// normal rules. An ErrNotHeld without that cause (a lease rewrite's, or
// CheckToken's) is not a retirement: the transport forgot the token
// because a write under it (work's fencing.Writer or stream) was fenced,
// or it minted a newer one,
// so another member may hold the role. That ends the holding as a fence
// does (revoked: [ReasonFenced]), with the wait after a loss described
// above: the member does not take its own lease back at once.
//
// A resigning holder stops its work, writes the release lease (granted_at
// 0, deadline 1: expired under every clock) under its token and
// deregisters, so the next candidate challenges at once. When the
// transport has retired the holding's token (a write under it, work's
// included, got no answer), no release can be written under it. A new
// epoch would fence whoever holds the role, so the resigning member takes
// one as a challenge does: only after a confirmation that still shows its
// own lease under that token as the latest, and only before the holding's
// local deadline (the start of the last round or lease write that renewed
// it + RenewDeadline, which also bounds that AcquireEpoch), before any
// observer can have seen the lease expire; it then releases under the new epoch, fencing only its former
// self. Otherwise (a newer lease confirmed, a failed confirmation, past
// the deadline) it writes nothing and the lease runs out, at most one
// lease for the next candidate. [Member.Withdraw] resigns as Resign
// does (and deregisters a member that does not hold the role) but then
// keeps the member out of the role's queue until [Member.Rejoin]. A
// Member whose context ends (unless KeepOnExit) stops the work of every
// role it holds and then writes one session end, which releases at once
// every lease that names its session's incarnation (a lease that does
// not, it releases one by one as Resign does), and then deregisters from
// each of its roles (the member named in the lease that ended ranks last,
// so the successor need not see the deregistration first, and the session
// end does not queue behind the deregistrations), so a rolling
// restart hands roles over without waiting for a deadline. Work that returns an error resigns the role too; the member then waits before
// it registers and campaigns again: RenewInterval after the first failure,
// doubling with each consecutive one (a holding whose work ran at least a
// LeaseDuration restarts the count), at most [MaxWorkBackoff]. Each
// failure is logged with its cause and the wait, and counted in
// krole_work_failures_total.
//
// # Confirmations from the source's own reads
//
// A source that can confirm from its own recent reads ([RecentConfirmer];
// the view does, from its consumer's fetch answers) is asked to, with
// maxAge W = [Settings.ConfirmFreshness] = min(RetryBackoff, Stagger/4,
// (LeaseDuration - RenewDeadline)/4), sparing the round trip when its
// latest read is that fresh (after a release, the read that brought the
// release usually is). Such a confirmation, returned at T_c, holds every
// record committed before some T_s >= T_c - W, where Confirm's holds
// every record committed before its call. The member decides on it at
// T_c, as on any confirmation. Why that keeps the rules' guarantees:
//
//   - No takeover of a healthy holder from a stale view. The candidate
//     challenges a lease whose last renewal it saw is the record L (the
//     lease itself, or the latest heartbeat of the session it names that
//     vouches for the role), first observed at o, only if o + span <= T_c
//     (span = the holder's LeaseDuration). A healthy holder began L's
//     write (for a heartbeat, its round) at w < o and committed its next
//     renewal (a heartbeat that vouches for the role, or a lease write)
//     before w + RenewDeadline (otherwise it stopped on its own at that
//     deadline), so before o + RenewDeadline <= T_c - (LeaseDuration -
//     RenewDeadline) <= T_c - 4W < T_s: the confirmation holds that
//     renewal, the member observes it at T_c, and does not challenge. A
//     member cut off from the cluster (or paused) gets no fresh read: the
//     answers the network held are to requests sent before the cut, older
//     than W at the first confirmation after it, so that confirmation is
//     Confirm's round trip, answered after the heal, as before. (This
//     needs the holder's LeaseDuration - RenewDeadline >= W: members of a
//     role run the same settings; W uses a quarter of the margin, and
//     leaves the rest to clocks running at different rates.)
//   - Turns after a vacancy. A candidate of rank r >= 1 challenges r x
//     Stagger after it observed the vacancy; the rank ahead of it, whose
//     lease it must not miss, has Stagger - W (not Stagger) to complete
//     its challenge and have it committed, so Stagger must exceed a
//     challenge's time by W = Stagger/4 or less more than before.
//   - Frozen partitions. A read that shows an open transaction is never
//     used (Confirm's second Fetch names its producer), and the view uses
//     no read sent before an earlier confirmation's probes returned, so a
//     confirmation never reports an older partition state than the one
//     before it: a thaw it reports happened.
//
// Safety does not depend on any of this: the broker's fence holds whatever
// a confirmation says. The partition tests (a member cut off both ways by
// internal/faultnet while it runs on) run with it:
// TestIntegrationPartitionedCandidateDoesNotFenceTheHolder fails (the
// candidate fences the healthy holder after the heal) when the view uses
// an answer however old it is, and view's
// TestConfirmRecentAfterACutHoldsWhatWasCommittedDuringIt checks the
// view's side.
//
// # Member sessions
//
// Each member keeps one session under a transactional id of its own,
// <prefix>session/<member> (fencing.Config.SessionTransactionalID; a role
// name never contains '/', so no role's <prefix><role> is it), begun by
// InitProducerId before its first challenge (fencing.Transport
// StartSession) and carrying a random incarnation nonce. Every lease it
// writes names the session (producer id, epoch, nonce), and one heartbeat
// transaction per RenewInterval in the member's session partition
// (codec.Heartbeat) keeps every lease of the incarnation alive: renewal
// costs grow with members, not with roles. The session begins at Run's
// start and heartbeats whether or not the member holds a role: its
// heartbeats are also the member id's sign of life (see "One process per
// member id"). Its first round comes with its first holding or one
// RenewInterval after the start, not at once, where it would contend
// with the first challenge at the coordinator. The goroutine that writes them
// (session.go) runs beside the role goroutines; each round:
//
//   - a held role whose goroutine has not checked in for
//     TransactionTimeout + RenewInterval is stuck: its work is cancelled,
//     and the heartbeat excludes it, so others take it after they see the
//     heartbeat. A role goroutine checks in at every decision, and a
//     holder decides at least every RenewInterval;
//   - one DescribeTransactions per coordinator over the held roles'
//     transactional ids (fencing.Transport DescribeMany) ends at once
//     every holding whose token moved (revoked: [ReasonFenced]): a deposed
//     holder learns it from the coordinator's own word within a round,
//     whatever its view shows. When the coordinator knows no producer for
//     a role's transactional id at all (it expired under the holding:
//     transactional.id.expiration.ms), nobody took the role: the holding
//     ends the same way, and the member takes its own lease back at once
//     under a new token (rule 5 of Decide), instead of waiting a lease as
//     after a fence (rule 6);
//   - then one heartbeat under the session's token, listing the excluded
//     roles. Once it commits, each role the round's describe confirmed has
//     its local deadline moved to the round's start + RenewDeadline. An
//     observer credits the heartbeat one span (LeaseDuration >
//     RenewDeadline) from when it saw it, after the round began: the
//     holder stops first, as with a lease of its own.
//
// A role the member stops holding without a release (fenced, from the
// round that learns it on; lost at its deadline; its token retired), or
// whose challenge's lease write got no
// definite answer (the lease may have committed, naming the incarnation,
// under a retired token: the member takes it back at once, rule 5 of
// Decide), is excluded by the heartbeats until the member's view shows a
// lease of the role that does not name the incarnation. A member leaving
// with KeepOnExit writes no heartbeat at all once its context has ended,
// so nothing is excluded on the way out. Releasing one role (Resign, Withdraw, failed work, a
// step-down) is one release under its token; a member leaving (its ctx
// ends, without KeepOnExit) writes one session end once every role's work
// has stopped, which releases every lease of the incarnation at once, and
// then deregisters each role. When its last heartbeat got no definite
// answer it first starts the session's producer again under the same
// nonce (a later epoch of the same producer id ends the incarnation's
// leases all the same); after a fenced heartbeat it does not, since
// another process may hold the session.
//
// A heartbeat that commits after the local deadline some role it vouched
// for had when it began (the member was paused, or cut off, mid-heartbeat)
// ends the incarnation with a session end, and the member campaigns again
// under a new nonce: the late heartbeat brings no lease back to life. An
// unanswered heartbeat starts the session again before the next (same
// nonce, new epoch; a new producer id ends the incarnation). It may
// commit until that start, so a start at or after that deadline ends the
// incarnation as a late heartbeat does, with the session end under the
// new epoch. A heartbeat answered fenced starts the session again too
// (the coordinator aborts a heartbeat that outlived the transaction
// timeout, bumping the epoch), unless the member
// id's latest session record is then another incarnation's heartbeat,
// not under an earlier epoch of the session's producer id (that one is a
// predecessor's, written before this process's StartSession): another
// process took the session, every holding ends, and this member is
// refused (see "One process per member id").
//
// Safety is unchanged: a challenge is AcquireEpoch on the role's
// transactional id, then a lease under the role's token, and every data
// write stays under the role's token, so safety rests on the role's epoch
// fence alone, whatever the heartbeats do. A forged, late or resurrected
// heartbeat can only make observers wait longer: heartbeats are
// authenticated as leases are (rolestate.CheckHeartbeatAuthor, and the
// session transactional id's own producer id), a challenger confirms the
// session's partition as well as the role's, and the frozen-partition rule
// covers both.
//
// The cost: every role of a member depends on one coordinator (the
// session's) and one partition leader (the session partition's). A
// failover of either longer than RenewDeadline - RenewInterval loses all
// the member's roles at once, each to its deadline, where per-role renewal
// lost the roles on that coordinator or leader only.
//
// # One process per member id
//
// A member id names one process. On a transport that writes instances
// ([InstanceRegisterer], as fencing.BrokerTransport is), each [Member]
// draws an instance when it is created ([NewInstance]: a random nonce,
// then the host and pid) and writes it in every registration, and it
// refuses to run beside another live process under its id:
//
//   - At its start, a role whose view shows a registration of its id by
//     another instance is watched for one LeaseDuration before this
//     member writes anything for it. If meanwhile a lease of its id is
//     written under a token this process did not mint (the other took the
//     role, or rewrote its lease: a holder rewrites it only when its value
//     changes and every LeaseRewriteInterval, so a live holder is seen by
//     its session's heartbeats, the last point below), or the other
//     registers again, the other is live: Run returns a
//     [*MemberInUseError] (matching [ErrMemberInUse]) naming it. If the
//     registration is removed, or the lease passes without a sign of
//     life, the other is taken for dead (a process killed, or stopped
//     with KeepOnExit) and this member registers under its own instance,
//     at the back of the queue: a restarted member rejoins one lease
//     after its start at most, without manual steps.
//   - A candidate that does not hold the role writes nothing while it
//     waits, so a newcomer can take its id over after that lease. The
//     candidate, once it has been the id's instance for a lease, answers
//     a newer registration of its id by another instance by registering
//     again (moving to the back of the queue: the one disturbance it
//     suffers), and the newcomer, which has been the id's instance for
//     less than a lease, sees a registration of another instance newer
//     than its own and is refused. Two instances that keep answering
//     each other (both established: one was cut off for longer than a
//     lease) stop at the second answer within a lease: the one that sees
//     it is refused.
//   - At any time, a lease of its id under a token this process did not
//     mint, while it holds nothing, refuses it.
//   - The member session's transactional id is the member id's, so a
//     process's StartSession fences the heartbeats of any other process
//     under its id. Before its first one (at Run's start), a member whose
//     view shows its id's latest session record to be another
//     incarnation's heartbeat (not a session end) watches that session
//     for one LeaseDuration: a newer heartbeat of it refuses this member
//     (the other is live); a session end, or no heartbeat
//     for a lease, lets it start its own. Every member heartbeats from
//     its start, holding roles or not, so a live one is seen within a
//     RenewInterval; and a member whose own heartbeat is answered fenced
//     while the id's latest session record is another incarnation's
//     heartbeat, not under an earlier epoch of the session's producer id
//     (another process took the session over after a lease of silence:
//     this one was paused or cut off), is refused, every holding ended.
//
// A refused member leaves as when its ctx ends, except that it writes
// nothing for the other: it deregisters only a registration of its own
// (never one whose newest record is another instance's, which would make
// that one step down), and it releases only a holding of its own. A
// member never adopts another instance's registration as its own (one
// written without an instance, by an older writer or `krole register`,
// it adopts as before), so two processes under one id cannot remove each
// other's registration on their way out. Liveness here rests on clocks,
// as elsewhere; a process paused for longer than a lease may find its id
// taken over when it wakes, and is then refused or refuses the other as
// above. Processes of krole older than instances are not told apart.
//
// # Safety: the broker's fence, never clocks
//
// Safety rests on one thing only: the epoch fence that the Kafka
// transaction coordinator keeps on the role's transactional id
// ([fencing.Config].TxnPrefix + role). Once AcquireEpoch has returned a
// token for a role, the cluster refuses every transactional write, offset
// commit and commit under an older epoch of that id, and aborts what the
// older epoch left open, so no write under an older token becomes visible
// to read_committed readers after that: of two members that both believe
// they hold a role, only the newer can still write. No clock reading,
// lease deadline, timer or setting takes part in that. Clock skew, a
// paused process or a lagging view can make two members believe for a
// moment that they hold a role; the older one's writes still fail. The
// observer-clock expiry, the confirmation before a challenge and the
// held-back rule make such moments and needless handovers rarer; safety
// does not rest on them.
//
// The rules read only leases that the role's own transactional id wrote:
// a source (the view, a [TransportSource]) skips a lease or release whose
// producer id is not the one the role's transactional id has at its
// coordinator (see package view, "Who can write what"), so a stranger
// with Write on the role topic and on another transactional id (an
// application's, or another role's) can neither make a live holder look
// vacant (a forged release) nor keep a dead holder's role unheld (a
// forged lease). A lease the source has not verified yet does not show;
// the confirmation before a challenge waits for its verdict.
//
// The fence covers the lease writes the Member makes through the
// transport, and any write made in a transaction of the role's
// transactional id under the holding's token (see "Writing while holding"
// below); it covers nothing else. Registrations are plain appends, and a
// deposed holder that writes outside such a transaction, or does not
// write at all, is not stopped by the broker.
//
// # Liveness: clocks, lease durations, the transaction timeout
//
// Liveness rests on clocks and the settings: how long a vacancy lasts, and
// whether a healthy holder keeps its role, depends on
//
//   - the holder's LeaseDuration, RenewInterval and RenewDeadline, and the
//     members' monotonic clocks running at similar rates. Wall clocks may
//     disagree by any offset: a candidate counts a lease's span on its own
//     clock from when it first saw the record, which is after the holder
//     began the write, so a healthy holder is not challenged early however
//     far its clock is off, and a dead holder is replaced one span (+
//     Stagger per rank ahead, + up to two RenewIntervals after the last
//     heartbeat of a candidate ahead that stopped meanwhile, or one
//     LeaseDuration at most while a live candidate ahead does not take
//     the role, + the view's lag) after the candidate
//     saw its last renewal (its lease, or the last heartbeat of its
//     session that vouched for the role), never a clock offset later. The
//     holder stops at RenewDeadline after the start of the last session
//     round that vouched for the role (or of its election, or of its last
//     lease write), before any observer's span (counted from a later
//     moment) can run out;
//   - rolestate.MaxLeaseSpan (10 minutes): a lease record claiming a longer
//     span keeps a role unheld for that long at most;
//   - Stagger exceeding the time a candidate needs to see a vacancy and
//     complete a challenge;
//   - the transaction timeout (Settings.TransactionTimeout, given to the
//     transport as fencing.Config.TxnTimeout): a lease write or a
//     heartbeat left open by a member that crashed mid-transaction holds
//     back read_committed readers of its partition, the views of every
//     role and every member session in that partition included, until the
//     coordinator aborts it, so the lease writes and heartbeats of healthy
//     holders there are hidden meanwhile. [Settings.Validate]
//     requires TransactionTimeout < LeaseDuration - RenewInterval, and
//     [New] the same of the transport's TxnTimeout, so that the lease
//     readers last saw outlives the stall. That bound does not cover
//     another process's transactions (another role's holder with a longer
//     timeout): there the held-back rule above keeps the candidates of the
//     partition's other roles from taking a healthy holder's role, at the
//     price that a holder that dies during such a stall is replaced only
//     once it ends. A [TransportSource] cannot see open transactions
//     (its Confirm always reports none), so members on one do not have
//     that protection.
//
// That bound assumes the coordinator aborts a transaction when its timeout
// passes, as kfake (the embedded cluster of krole dev and the tests) does.
// Apache Kafka and Redpanda abort timed-out transactions only when a
// periodic check runs, every
// transaction.abort.timed.out.transaction.cleanup.interval.ms (Redpanda:
// abort_timed_out_transactions_interval_ms; default 10 s for both), so
// there a member that crashed mid-transaction can hide renewals from
// read_committed readers for up to TxnTimeout + that interval, 15 s with
// the defaults: longer than the bound above. Members reading through a
// view are kept from taking a healthy holder's role meanwhile by the
// held-back rule above (the crashed holder's transaction is another
// producer's), so the default settings are kept (see [Settings] for the
// reasoning); what the longer stall costs is succession of the
// partition's other roles delayed until it ends. Members on a
// [TransportSource] have no such rule: with them, on a stock broker, pick
// a LeaseDuration longer than TxnTimeout + 10 s + RenewInterval (20 s with
// TransactionTimeout 5 s and the derived RenewInterval of 4 s), or lower
// that broker setting; otherwise such a crash can make candidates see a
// healthy holder's lease expire and take its role.
//
// The cancellation of Work's context when a role is lost is local and
// best effort: it happens when the member session's round finds the token
// moved, when a lease rewrite is fenced or its token retired or forgotten
// (or the transport says so, fencing.TokenChecker), when the view shows a
// newer token, when the session's incarnation ends (a late heartbeat) or
// the round finds the role's goroutine stuck, and at the latest when
// RenewDeadline passes (a timer independent of any call in flight), which is before
// another member's span for the lease can run out if the clocks run at
// similar rates. It is not a guarantee that no other member holds the role
// meanwhile.
//
// # Writing while holding
//
// Work that writes must carry [Held].Token, or its writes are not fenced.
// To write to Kafka, let tr be the [fencing.BrokerTransport] given to
// [New] (only the transport that minted a token can write under it) and
// use a [fencing.Writer] for the holding, tr.Writer(held.Role,
// held.Token), or tr.Transact for several writes and offset commits in
// one transaction: both write in transactions of the role's transactional
// id, so the broker refuses them once a later member has acquired the
// role. For consume-transform-produce work, package
// [github.com/krabka/krole/processor/stream] runs an exactly-once loop
// under the token. To write elsewhere (a database, a service), pass the
// token along and have the target refuse tokens older than the newest it
// has seen, or ask [fencing.Transport].Describe for the token that holds
// the role now.
//
// # Tokens
//
// A token is (producer id, epoch) of the role's transactional id, minted by
// the transaction coordinator at AcquireEpoch. With the transaction
// protocol Sarama speaks, the epoch moves only at InitProducerId, so the
// token is fixed for as long as a member holds the role, and its lease
// rewrites reuse it (heartbeats are written under the member session's
// own token). Should the epoch move at every commit (KIP-890, transaction
// version 2), the transport must keep presenting the epoch it was minted
// with as the token, or the rules' "newer token in the view" check must
// compare producer ids only; that is the transport's concern, not the
// rules'.
//
// A token is never used again after the transport retires it (a request
// under it got no definite answer, fencing.ErrUnknownOutcome): its holding
// ends, and a new holding, with a new token from AcquireEpoch, begins only
// through a challenge. So a token always identifies one holding; Work, and
// anything that checks tokens, learns of a new one only through a new
// Elected event and a new call of Work.
//
// # The fencing number
//
// Each holding also has one integer, [Held].Fence, strictly greater than
// the number of every earlier holding of the role, whatever any member's
// view or clock says, across producer-id changes, restarts and
// compaction: the offset of the holding's first lease record (its
// challenge's lease write) in the role's partition, as the Produce's
// answer gives it (fencing.Transport.WriteLease). A target outside Kafka
// that stores the highest number it has seen and refuses smaller ones
// refuses every earlier holding, where tokens compare only within one
// producer id.
//
// Why it grows: the new holder produces that record only after its
// InitProducerId on the role's transactional id raised the epoch. A lease
// record of an earlier holding is then either committed before it (so at a
// lower offset: offsets only grow in a partition), or in a transaction
// that InitProducerId aborted, or refused (AddPartitionsToTxn or Produce
// under the old epoch is fenced; under the producer id of an expired
// transactional id, INVALID_PRODUCER_ID_MAPPING), so it never becomes
// visible. So every earlier holding's first lease lies at a lower offset.
// Compaction keeps offsets. The number is at least 1 in practice, since
// the holder's registration precedes its lease in the same partition;
// nothing relies on that.
//
// The first lease cannot carry its own offset; every later lease of the
// holding (rewrites, the release) carries the number (codec.Lease.Fence),
// so readers (rolestate.State.Fence) report the same number after
// compaction removed the first record. A release written under a new
// epoch (see above) is a holding of its own, numbered by its offset. Taking
// one's own lease back is a new challenge, with a new number.
//
// What breaks it: recreating the role topic (offsets start again at 0),
// and changing its partition count (codec.Partition moves the role to
// another partition, whose offsets are unrelated). `krole check` reports
// a role whose records lie in a partition other than the one it maps to
// now. A recreated topic cannot be told from Kafka: a target's table of
// highest numbers then refuses every new holding (it fails closed) until
// the operator resets the role's entry.
//
// # Many roles
//
// A member running many roles (one per partition, tenant or shard) slows
// down under overload; it must not collapse. The collapse to avoid: were
// every role goroutine to call the transport at once, renewals would queue
// behind challenges inside the client (sarama sends at most
// Net.MaxOpenRequests requests per connection and queues the rest past
// their contexts), queued calls would outlive the transaction timeout, the
// transactions they abandon would hold back every read_committed view of
// their partition, more roles would look expired, more would be
// challenged: a metastable failure, the retries feeding the overload. So:
//
//   - Holding a role costs no call per renew interval: the member
//     session's one heartbeat renews every role the member holds, so a
//     member holds as many roles as its goroutines and view can keep, and
//     slow lease writes (a loaded coordinator, a slow partition) cost it
//     no held role.
//   - Calls in flight are bounded per member (Settings.MaxInFlight, by
//     default sarama's 5), by a limiter all the member's role goroutines
//     share. A call waits for a slot before it begins, never inside a
//     transaction; lease rewrites are served first, then releases, then
//     registrations, challenges, deregistrations and prunes. The member
//     session's round (its DescribeMany and heartbeat) takes no slot: it
//     never waits behind the role goroutines' calls.
//   - A campaign takes its challenge's slot before its confirmation, and
//     holds it through the challenge's calls, so that a confirmation never
//     goes stale waiting for a slot. That wait is the member's own queue
//     (a member starting with thousands of roles campaigns for all of them
//     at once): when it runs out (a LeaseDuration) the role decides again
//     a little later, and nothing else happens.
//   - A challenge whose calls time out pauses every campaign of the
//     member, RetryBackoff doubling up to LeaseDuration, with jitter; a
//     successful challenge ends the run. The roles refused meanwhile stay
//     registered, and are counted in krole_queued_roles.
//   - A new holding does not wake the member session for a round of its
//     own (only the first, and one whose role the heartbeats still
//     exclude): the next round vouches for it, well before its local
//     deadline. A round per role taken (a DescribeMany over every held
//     role and a note to each role's goroutine) would make taking K roles
//     grow as K squared: minutes, at most of a core, for thousands of roles,
//     which now come at the cluster's pace.
//
// So a stall shorter than RenewDeadline - RenewInterval, less a
// heartbeat's time (every request of the member held back, then answered;
// 1.2s with a 2s lease), loses nothing: the round in flight during it
// commits before the local deadlines it extends. A longer stall loses
// every role at once, each at its deadline (or with the late heartbeat's
// session end), and other candidates take them within a lease plus their
// stagger.
//
// Measured (docs/BENCHMARKS.md, "Many roles": "Holding many roles" and
// "One member-session round, the mechanism alone").
//
// # Failover of a member holding many roles
//
// Every role a member holds falls due at once when it dies: one session's
// heartbeats kept them all. Its survivors split them: in a vacancy left
// by a lease that ran out, candidates rank by a rendezvous score of role
// and member (FNV-1a of both, mixed), which every member computes alike
// from the names alone, so each survivor is first for about its share of
// the roles and takes them one after another, at the pace of its calls
// (MaxInFlight challenges at a time), while the others take theirs. A
// candidate whose turn (one Stagger later) came while the one ahead of
// it was still at its share would race it, role by role: each confirmed
// vacant while the other's challenge was in flight, both elected, one
// fenced at once (safe, the fence holds, but a wasted election and work
// started and stopped). So a candidate defers to a live candidate ranked
// ahead of it (rule 7: its member session heartbeating within two
// RenewIntervals) for as long as that candidate makes progress: until one
// LeaseDuration past its turn, or past the last time it saw that
// candidate take any role, whichever is later. A candidate ahead that stopped, paused or was
// cut off is passed over at most three RenewIntervals after its last
// heartbeat (two, and the watch below),
// and one that is alive but takes no role (its campaigns paused, say)
// holds the role vacant one LeaseDuration longer at most. Progress is
// judged on each member's own clock from the leases its view shows; it
// decides only who tries first, never who may write. A deferring role
// sleeps until its deference ends; one watch per Member looks up the
// candidates deferred to every RenewInterval and wakes the roles
// deferring to one that stopped heartbeating, so that thousands of
// deferring roles cost the member next to nothing.
//
// A holder that lets go (a release, or a session record that drops the
// role: a resign, a leaving member) leaves the role to the next candidate
// in join order, so a planned handover goes where the queue says.
//
// # Events, logs, metrics
//
// Events are delivered to Options.OnEvent one at a time, in order for each
// role (see [Event] for the Elected/Revoked pairing). Every transition is
// logged with log/slog through Options.Logger (quiet by default).
// Metrics go to Options.Registerer (none by default); the names and labels
// are listed there.
package processor
