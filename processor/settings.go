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
// usable: [Settings.WithDefaults] fills every zero field, each derived
// from LeaseDuration, and [Settings.Validate] checks the constraints
// between them. With the default lease of 10s: renew every 2s, give up 8s
// after the last renewal began, back off from 250ms, stagger 1s per rank,
// transaction timeout 5s. Give every member of a role the same settings.
//
// Liveness rests on these timings and on the clocks; safety does not (see
// "Safety" and "Liveness" in the package documentation; on a stock Apache
// Kafka or Redpanda, docs/DESIGN.md, section "Liveness: what bounds a
// vacancy", says why the defaults still hold).
type Settings struct {
	// LeaseDuration is how long a lease lasts: one written at T has
	// deadline T+LeaseDuration on the writer's clock, and every other
	// member counts that span from when it first saw the record, on its
	// own clock. Default [DefaultLeaseDuration] (10s); at least 2ms, at
	// most rolestate.MaxLeaseSpan (10 minutes).
	LeaseDuration time.Duration

	// RenewInterval is how often the member session's heartbeat round
	// renews every role the member holds: each round begins RenewInterval
	// (less a random RenewJitter) after the previous one began, and takes
	// no call slot. A holder's goroutine checks in with the session at
	// least this often. Default LeaseDuration/5 (2s); shorter than
	// RenewDeadline.
	RenewInterval time.Duration

	// RenewDeadline is how long a holder goes on without a renewal: it
	// stops on its own (revoked: lease lost) RenewDeadline after the start
	// of its last renewal (the session round that last vouched for the
	// role, or its election or last lease write), on its own monotonic
	// clock. The gap to LeaseDuration is the margin for clock rates and
	// for work to stop before anyone may take the role. Default
	// LeaseDuration*4/5 (8s); longer than RenewInterval, at most
	// LeaseDuration.
	RenewDeadline time.Duration

	// RetryBackoff is the first wait after a failed call to the transport
	// or source; it doubles with each consecutive failure, up to
	// RenewInterval (a failed heartbeat is not retried: the next round
	// comes on time). Default RenewInterval/8 (250ms); positive, at most
	// RenewInterval.
	RetryBackoff time.Duration

	// Stagger is how long each rank waits after the one ahead of it once a
	// role is vacant: the candidate of rank r challenges r*Stagger after it
	// observed the vacancy, so each dead candidate ahead delays succession
	// by one Stagger, once (the winner prunes it). Make it longer than a
	// candidate takes to see a vacancy and complete a challenge, or
	// neighbouring ranks race (safely: the broker fences the loser).
	// Default LeaseDuration/10 (1s); positive.
	Stagger time.Duration

	// TransactionTimeout bounds each call the Member makes through the
	// transport once the call has a slot (see MaxInFlight), and each call
	// of the session's round, and is the transaction timeout to give the
	// transport (fencing.Config.TxnTimeout): a transaction left open by a
	// crashed member holds back the readers of its partition until the
	// coordinator aborts it after this long (on a stock broker, up to its
	// abort-check interval later: see "Liveness" in the package
	// documentation). Default LeaseDuration/2 (5s); shorter than
	// LeaseDuration - RenewInterval, and at most the brokers'
	// transaction.max.timeout.ms, which fencing.NewBrokerTransport checks.
	TransactionTimeout time.Duration

	// RenewJitter spreads the session's heartbeat rounds, so that members
	// started together do not heartbeat in step: each round goes a random
	// duration in [0, RenewJitter), at most RenewInterval - RetryBackoff,
	// before RenewInterval has passed since the previous one began.
	// Default (zero) RenewInterval/4; negative: none.
	RenewJitter time.Duration

	// MaxInFlight bounds the calls the Member's role goroutines have in
	// flight through the transport at once, over all its roles. A call
	// waits for a slot before it begins, so no transaction stays open
	// while it waits; releases are served ahead of registrations and
	// challenges. The session's round takes no slot (see "Many roles" in
	// the package documentation). Zero or less: [DefaultMaxInFlight] (5).
	MaxInFlight int

	// KeepOnExit, when true, makes a Member whose context ends leave
	// without writing anything: its leases run out (a span after each
	// observer saw its last renewal) and its registrations stay (a restart
	// under the same member id keeps its rank). Default false: the member
	// writes one session end, which releases every role it holds at once,
	// and deregisters from each role.
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
	return s.checkTxnTimeout("transaction timeout", s.TransactionTimeout)
}

// checkTxnTimeout is Validate's last bound, for a transaction timeout d
// named field: Validate checks TransactionTimeout with it, and New the
// transport's own timeout, which holds readers back just as long.
func (s Settings) checkTxnTimeout(field string, d time.Duration) error {
	if lim := s.LeaseDuration - s.RenewInterval; d >= lim {
		return &SettingsError{Field: field, Value: d, Rule: "must be shorter than", Other: "lease duration - renew interval", OtherValue: lim}
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
