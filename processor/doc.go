// Package processor holds the succession rules of krole and the
// long-running member that runs them.
//
// [Decide] is the rules as a pure function: given a role as the view sees
// it, this member, what it knows locally and the time, it says what to do
// next (register, wait, challenge, renew, step down, resign). A [Member]
// runs the rules for one member and one or many roles: it registers,
// follows the roles through a [Source] (the view), performs the actions
// through a fencing.Transport, reports [Event]s, and runs a processor's
// [Work] while it holds a role ([Member.Run]).
//
// # The rules
//
// Candidates of a role rank by the offset of their registration, lowest
// first. The holder renews its lease every RenewInterval: a write of a new
// lease under the same token, with deadline = start of the write +
// LeaseDuration. A renewal answered fenced ends its leadership at once. A
// holder that has not renewed successfully within RenewDeadline of the
// start of its last successful write stops on its own, measured on its own
// monotonic clock only, before others (whose clocks see the deadline
// LeaseDuration after that start) may take over.
//
// A role is vacant when it has no lease, its lease is a release (see
// [codec.ReleaseLease]) or the lease's deadline has passed on the local wall
// clock. Then the candidates challenge in turn: the member named in the
// lease that ended ranks last (it let the lease go), and the candidate of
// effective rank r challenges r*Stagger after it first observed the
// vacancy, on its local clock. A challenge is AcquireEpoch (which fences
// any previous holder at the broker) followed by a lease write under the
// new token. The winner deregisters ("prunes") the candidates that did not
// challenge in their turn and the member whose lease expired, so dead
// registrations delay one succession by a Stagger each and then are gone.
// A live member that was pruned sees that it is no longer a candidate and
// registers again, at the back. A challenger whose lease write is fenced
// lost a race; it leaves that vacancy alone for a LeaseDuration so the
// winner's lease can show.
//
// A resigning holder stops its work, writes the release lease (granted_at
// 0, deadline 1: expired under every clock) under its token and
// deregisters, so the next candidate challenges at once. A Member whose
// context ends resigns every role it holds (unless KeepOnExit), so a
// rolling restart hands roles over without waiting for a deadline.
//
// # What is guaranteed, and where
//
// Safety does not rest on clocks. Two members may both believe for a
// moment that they hold a role (a paused process, clock skew, a view that
// lags), but a deposed holder's lease writes fail at the broker, because
// the coordinator accepts transactional writes from the newest epoch only.
// The fence covers writes made through the transport under the token, and
// any write a processor makes transactionally under the same producer id
// and epoch; it covers nothing else. Work that writes elsewhere must pass
// [Held].Token along and have its target check it (fencing.Transport's
// Describe tells the token that holds a role now).
//
// Liveness rests on clocks and the settings: how long a vacancy lasts
// depends on the holder's lease duration, on the candidates' wall clocks
// agreeing with the holder's within a fraction of the lease, and on
// Stagger exceeding the time a candidate needs to see a vacancy and
// complete a challenge.
//
// The cancellation of Work's context when a role is lost is local and
// best effort: it happens when a renewal is fenced, when the view shows a
// newer token, and at the latest when RenewDeadline passes (a timer
// independent of any call in flight), which is before another member's
// clock can see the lease expire if the clocks run at similar rates. It is
// not a guarantee that no other member holds the role meanwhile.
//
// # Tokens
//
// A token is (producer id, epoch) of the role's transactional id, minted by
// the transaction coordinator at AcquireEpoch. With the transaction
// protocol Sarama speaks, the epoch moves only at InitProducerId, so the
// token is fixed for as long as a member holds the role, and renewals
// reuse it. Should the epoch move at every commit (KIP-890, transaction
// version 2), the transport must keep presenting the epoch it was minted
// with as the token, or the rules' "newer token in the view" check must
// compare producer ids only; that is the transport's concern, not the
// rules'.
//
// # Events, logs, metrics
//
// Events are delivered to Options.OnEvent one at a time, in order for each
// role (see [Event] for the Elected/Revoked pairing). Every transition is
// logged with log/slog through Options.Logger (quiet by default).
// Metrics, prefixed krole_, go to Options.Registerer (none by default): the
// holder per role, transitions, renewal latency and fenced writes.
package processor
