package processor

import (
	"fmt"
	"time"

	"github.com/krabka/krole/rolestate"
)

// DefaultLeaseDuration is the lease duration of a zero [Settings]. Every
// other default is derived from the lease duration, so setting only
// LeaseDuration scales the rest with it.
const DefaultLeaseDuration = 10 * time.Second

// Settings are the timings of the succession rules. The zero value is
// usable: [Settings.WithDefaults] fills every zero field. With the default
// lease of 10s the defaults are: renew every 2s, give up 8s after the last
// renewal began, back off from 250ms, stagger 1s per rank, transaction
// timeout 5s.
//
// Liveness rests on these timings and on the clocks; safety does not. Two
// members may both believe they hold a role for a moment (clock skew, a
// paused process), but the broker accepts lease writes under the newest
// epoch only.
//
// The defaults on a stock Apache Kafka or Redpanda. Both abort a
// transaction that outlived its timeout only at a periodic check, every
// transaction.abort.timed.out.transaction.cleanup.interval.ms (Apache
// Kafka, TransactionStateManagerConfig.java) or
// abort_timed_out_transactions_interval_ms (Redpanda,
// src/v/config/configuration.cc), 10s by default. A lease write left
// open by a holder that crashed mid-write therefore holds the
// read_committed readers of its partition back for up to
// TransactionTimeout + 10s = 15s, longer than the default lease less a
// renew interval (8s): the rule LeaseDuration > TransactionTimeout +
// 10s + RenewInterval, which would keep that stall shorter than a lease,
// does not hold for the defaults, and would need a lease of 20s or more.
// The defaults stay at a lease of 10s, because a healthy holder does not
// need that rule: a member reading through a view (*view.View, what
// election.Session and krole run use) does not
// challenge while its confirmations show the partition's readers held
// back by another producer's open transaction (see the package
// documentation), so the stall cannot make a healthy holder of another
// role in that partition look expired; the crashed holder's own role is
// taken over as usual (AcquireEpoch aborts its transaction). What the
// stall still costs: challenges of the partition's other roles wait for
// it to end, so a holder of one of them that dies during it is replaced
// up to TransactionTimeout + the broker's interval later than its lease
// says. The rule still matters for members on a [TransportSource] (it
// cannot see open transactions): there, on a stock broker, use
// LeaseDuration >= 20s with TransactionTimeout 5s (20s > 5s + 10s + 4s),
// or lower the broker's interval. fencing.BrokerTxnSettings.CheckTimings
// checks a set of timings against what a broker reports.
type Settings struct {
	// LeaseDuration is how long a lease lasts from the moment its write
	// begins: a lease granted at T has deadline T+LeaseDuration, in the
	// writer's wall clock. Others judge its expiry on their own clocks:
	// they may challenge once Deadline - GrantedAt (capped at
	// rolestate.MaxLeaseSpan) has passed since they first observed the
	// lease record. Default 10s.
	LeaseDuration time.Duration

	// RenewInterval is how often the member session writes a heartbeat,
	// which renews every role the member holds: each round begins
	// RenewInterval (less RenewJitter at random) after the previous one
	// began, whether that one succeeded or not, and waits for no call
	// slot (see "Member sessions" in the package documentation). A
	// holder's goroutine checks in with the session at least this often.
	// Default LeaseDuration/5 (2s).
	RenewInterval time.Duration

	// RenewDeadline is how long after the start of its last renewal (the
	// member session round that last vouched for the role, or its
	// election or last lease write) a holder keeps acting as holder
	// without another successful renewal. When it passes, the holder stops on its own (revoked:
	// lease lost), measured on its own monotonic clock only. The gap to
	// LeaseDuration is the margin for clock rate differences and for the
	// held work to stop before anybody else may take the role. Default
	// LeaseDuration*4/5 (8s).
	RenewDeadline time.Duration

	// RetryBackoff is the first wait after a failed call to the transport
	// or source; it doubles with every consecutive failure, up to
	// RenewInterval. A failed lease rewrite is retried at this pace; a
	// failed heartbeat is not (the next round comes RenewInterval after
	// it began). Default RenewInterval/8 (250ms).
	RetryBackoff time.Duration

	// Stagger is how long each rank waits after the one ahead of it once
	// a role is vacant: the candidate of effective rank r challenges
	// r*Stagger after it observed the vacancy (on its local clock). A
	// dead candidate ahead therefore delays succession by one Stagger,
	// and n dead candidates by n*Stagger, once: the winner prunes them.
	// It should exceed the time a candidate needs to see a vacancy and
	// complete a challenge, or neighbouring ranks race (safely: the
	// broker fences the loser). Default LeaseDuration/10 (1s).
	Stagger time.Duration

	// TransactionTimeout bounds every call the Member makes through the
	// transport, once the call has a call slot (see MaxInFlight; a lease
	// rewrite's wait for a slot is bounded by the holding's local
	// deadline), and each call of the member session's round (its
	// DescribeMany, its heartbeat), and it is the transaction timeout to
	// give the transport (fencing.Config.TxnTimeout): a lease write or a
	// heartbeat left open by a crashed member holds back read_committed
	// readers of its partition, for every role and member session in it,
	// until the coordinator aborts it after this long.
	// Apache Kafka and Redpanda abort it only at their next check for
	// timed-out transactions (transaction.abort.timed.out.transaction.cleanup.interval.ms,
	// default 10s), so there the stall lasts up to TransactionTimeout +
	// that interval; members reading through a view do not take a
	// healthy holder's role behind it (see "The defaults on a stock
	// Apache Kafka or Redpanda" above), members on a TransportSource need
	// LeaseDuration above TransactionTimeout + 10s + RenewInterval. It
	// must not exceed the brokers' transaction.max.timeout.ms (default
	// 15 min), which fencing.NewBrokerTransport checks at start. Default
	// LeaseDuration/2 (5s).
	TransactionTimeout time.Duration

	// RenewJitter spreads the member session's heartbeat rounds across
	// the interval: each round goes a random duration in [0, RenewJitter)
	// (at most RenewInterval - RetryBackoff) before RenewInterval has
	// passed since the previous one began, drawn anew each time, so that
	// members started together do not heartbeat in step. Zero: the
	// default, RenewInterval/4; negative: none (every round exactly at
	// RenewInterval).
	RenewJitter time.Duration

	// MaxInFlight bounds the calls the Member's role goroutines have in
	// flight through the transport at once, over all its roles: lease
	// rewrites and releases go first, then registrations, challenges,
	// deregistrations and prunes. A call waits for its turn before it
	// begins, so no transaction stays open while it waits. The member
	// session's round takes no slot (see the package documentation,
	// "Many roles").
	// Zero or less: [DefaultMaxInFlight] (5, sarama's
	// Net.MaxOpenRequests: one member never queues requests inside the
	// client).
	MaxInFlight int

	// KeepOnExit, when true, makes a Member whose context ends leave
	// without writing anything: no session end, so its leases run out (a
	// span after each observer saw its last renewal, its last heartbeat
	// included) and its registrations stay (a restart under the same
	// member id keeps its rank). Default false: a leaving member
	// deregisters from each role and writes one session end, which
	// releases every role it holds, so a rolling restart hands roles
	// over at once.
	KeepOnExit bool
}

// DefaultMaxInFlight is the MaxInFlight of a zero [Settings]: sarama's
// default Net.MaxOpenRequests.
const DefaultMaxInFlight = 5

// WithDefaults returns s with every zero duration, and a MaxInFlight of
// zero or less, set to its default (a negative RenewJitter stays: none).
func (s Settings) WithDefaults() Settings {
	if s.LeaseDuration == 0 {
		s.LeaseDuration = DefaultLeaseDuration
	}
	if s.RenewInterval == 0 {
		s.RenewInterval = s.LeaseDuration / 5
	}
	if s.RenewDeadline == 0 {
		s.RenewDeadline = s.LeaseDuration * 4 / 5
	}
	if s.RetryBackoff == 0 {
		s.RetryBackoff = s.RenewInterval / 8
	}
	if s.Stagger == 0 {
		s.Stagger = s.LeaseDuration / 10
	}
	if s.TransactionTimeout == 0 {
		s.TransactionTimeout = s.LeaseDuration / 2
	}
	if s.RenewJitter == 0 {
		s.RenewJitter = s.RenewInterval / 4
	}
	if s.MaxInFlight <= 0 {
		s.MaxInFlight = DefaultMaxInFlight
	}
	return s
}

// Validate reports the first impossible setting or combination as a
// [*SettingsError] naming the values involved. It checks s as given; call
// it on s.WithDefaults() to check what a Member would run with. It
// requires:
//
//	2ms <= LeaseDuration <= rolestate.MaxLeaseSpan
//	0 < RetryBackoff <= RenewInterval < RenewDeadline <= LeaseDuration
//	0 < Stagger
//	0 < TransactionTimeout < LeaseDuration - RenewInterval
//
// The cap on LeaseDuration is what observers accept: they count any lease
// as lasting at most rolestate.MaxLeaseSpan (10 minutes) after they saw
// it. A longer lease would let them take the role over while its holder,
// renewed every RenewInterval and giving up only at RenewDeadline, still
// believes it holds it; since RenewInterval < RenewDeadline <=
// LeaseDuration, the one cap bounds all three.
//
// The last bound keeps a transaction left open by a crashed writer from
// hiding a healthy holder's renewals (its lease writes and heartbeats) long enough for its lease to look
// expired: the lease the readers last saw has at least
// LeaseDuration-RenewInterval left when they are held back. It assumes
// the coordinator aborts the transaction when its timeout passes, as kfake
// does; Apache Kafka may take up to its
// transaction.abort.timed.out.transaction.cleanup.interval.ms (default
// 10s) longer, which Validate cannot see (see the package documentation).
func (s Settings) Validate() error {
	pos := []struct {
		name string
		v    time.Duration
	}{
		{"lease duration", s.LeaseDuration},
		{"renew interval", s.RenewInterval},
		{"renew deadline", s.RenewDeadline},
		{"retry backoff", s.RetryBackoff},
		{"stagger", s.Stagger},
		{"transaction timeout", s.TransactionTimeout},
	}
	for _, p := range pos {
		if p.v <= 0 {
			return &SettingsError{Field: p.name, Value: p.v, Rule: "must be positive"}
		}
	}
	if s.LeaseDuration < 2*time.Millisecond {
		return &SettingsError{Field: "lease duration", Value: s.LeaseDuration, Rule: "must be at least 2ms (leases are in milliseconds, and one of 1ms reads as a release)"}
	}
	if s.LeaseDuration > rolestate.MaxLeaseSpan {
		return &SettingsError{Field: "lease duration", Value: s.LeaseDuration, Rule: "must not be longer than", Other: "the longest lease observers accept (rolestate.MaxLeaseSpan)", OtherValue: rolestate.MaxLeaseSpan}
	}
	if s.RenewInterval >= s.LeaseDuration {
		return &SettingsError{Field: "renew interval", Value: s.RenewInterval, Rule: "must be shorter than", Other: "lease duration", OtherValue: s.LeaseDuration}
	}
	if s.RenewInterval >= s.RenewDeadline {
		return &SettingsError{Field: "renew interval", Value: s.RenewInterval, Rule: "must be shorter than", Other: "renew deadline", OtherValue: s.RenewDeadline}
	}
	if s.RenewDeadline > s.LeaseDuration {
		return &SettingsError{Field: "renew deadline", Value: s.RenewDeadline, Rule: "must not be longer than", Other: "lease duration", OtherValue: s.LeaseDuration}
	}
	if s.RetryBackoff > s.RenewInterval {
		return &SettingsError{Field: "retry backoff", Value: s.RetryBackoff, Rule: "must not be longer than", Other: "renew interval", OtherValue: s.RenewInterval}
	}
	if lim := s.LeaseDuration - s.RenewInterval; s.TransactionTimeout >= lim {
		return &SettingsError{Field: "transaction timeout", Value: s.TransactionTimeout, Rule: "must be shorter than", Other: "lease duration - renew interval", OtherValue: lim}
	}
	return nil
}

// backoff returns the wait after the n-th consecutive failure (n >= 1).
func (s Settings) backoff(n int) time.Duration {
	d := s.RetryBackoff
	for i := 1; i < n && d < s.RenewInterval; i++ {
		d *= 2
	}
	return min(d, s.RenewInterval)
}

// MaxWorkBackoff caps the campaign backoff after work failed: after the
// n-th consecutive failure of work (each within a LeaseDuration of its
// election) a member waits RenewInterval * 2^(n-1), at most this long,
// before it registers and campaigns again.
const MaxWorkBackoff = 5 * time.Minute

// workBackoff returns the campaign backoff after the n-th consecutive
// failure of work (n >= 1): RenewInterval doubled n-1 times, at most
// [MaxWorkBackoff].
func (s Settings) workBackoff(n int) time.Duration {
	d := s.RenewInterval
	for i := 1; i < n && d < MaxWorkBackoff; i++ {
		d *= 2
	}
	return min(d, MaxWorkBackoff)
}

// SettingsError is the error [Settings.Validate] returns. It matches
// [ErrInvalidSettings] with errors.Is.
type SettingsError struct {
	// Field is the setting at fault, in words ("renew interval"), or
	// "transport transaction timeout" when New finds the transport's
	// fencing.Config.TxnTimeout too long.
	Field string
	// Value is Field's value.
	Value time.Duration
	// Rule is what Value breaks, in words: "must be positive", or, for a
	// cross-field rule, a comparison with Other ("must be shorter than").
	Rule string
	// Other is the other setting of a cross-field rule; "" for a rule on
	// Field alone.
	Other string
	// OtherValue is Other's value.
	OtherValue time.Duration
}

// Error returns "processor settings: " followed by Field, Value and Rule,
// and Other and OtherValue for a cross-field rule, for example
// "processor settings: renew interval 3s must be shorter than renew
// deadline 2s".
func (e *SettingsError) Error() string {
	if e.Other == "" {
		return fmt.Sprintf("processor settings: %s %v %s", e.Field, e.Value, e.Rule)
	}
	return fmt.Sprintf("processor settings: %s %v %s %s %v", e.Field, e.Value, e.Rule, e.Other, e.OtherValue)
}

// Is reports whether target is ErrInvalidSettings.
func (e *SettingsError) Is(target error) bool { return target == ErrInvalidSettings }
