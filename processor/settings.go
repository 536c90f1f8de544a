package processor

import (
	"fmt"
	"time"

	"github.com/krabka/krole/rolestate"
)

// DefaultLeaseDuration is the lease duration of a zero [Settings]; every
// other default derives from LeaseDuration.
const DefaultLeaseDuration = 10 * time.Second

// Settings are the timings of the succession rules. Zero fields take
// their defaults ([Settings.WithDefaults]), each derived from
// LeaseDuration; [Settings.Validate] checks the bounds between them. Give
// every member of a role the same settings. Liveness rests on them, safety
// does not (see "Safety" and "Liveness" in the package doc).
type Settings struct {
	// LeaseDuration is how long a lease lasts, counted by each observer
	// from when it first saw the record, on its own clock. Default 10s
	// ([DefaultLeaseDuration]).
	LeaseDuration time.Duration

	// HeartbeatInterval is how often the member session's heartbeat
	// vouches for every role the member holds; a holder checks in with the
	// session at least this often. Default LeaseDuration/5 (2s).
	HeartbeatInterval time.Duration

	// HeartbeatDeadline is how long after its last vouch began (its
	// election, a lease write, or a heartbeat round that vouched for it) a
	// holder stops on its own (revoked: lease lost); the gap to LeaseDuration is
	// the margin for clock rates and for work to stop. Default
	// LeaseDuration*4/5 (8s).
	HeartbeatDeadline time.Duration

	// RetryBackoff is the first wait after a failed call, doubling with
	// each consecutive failure up to HeartbeatInterval (a failed heartbeat
	// is not retried). Default HeartbeatInterval/8 (250ms).
	RetryBackoff time.Duration

	// Stagger is how much later each rank challenges than the one ahead of
	// it (rule 7 of [Decide]); longer than a challenge takes, or
	// neighbouring ranks race (safely). Default LeaseDuration/10 (1s).
	Stagger time.Duration

	// TransactionTimeout bounds each transport call once it has a slot,
	// and is the transaction timeout to give the transport
	// (fencing.Config.TxnTimeout; at most the brokers'
	// transaction.max.timeout.ms). Default LeaseDuration/2 (5s).
	TransactionTimeout time.Duration

	// HeartbeatJitter spreads the session's rounds: each goes up to this
	// much early, at most HeartbeatInterval - RetryBackoff. Default
	// HeartbeatInterval/4; negative: none.
	HeartbeatJitter time.Duration

	// MaxInFlight bounds the calls the role goroutines have in flight
	// through the transport, over all roles; each waits for a slot before
	// it begins. Default (zero or less) [DefaultMaxInFlight] (5).
	MaxInFlight int

	// KeepOnExit makes a Member whose context ends leave without writing:
	// its leases run out and its registrations stay. Default false: one
	// session end releases its roles, and it deregisters from each.
	KeepOnExit bool
}

// DefaultMaxInFlight is the MaxInFlight of a zero [Settings]: sarama's
// default Net.MaxOpenRequests.
const DefaultMaxInFlight = 5

// WithDefaults returns s with every zero duration, and a MaxInFlight of
// zero or less, set to its default (a negative HeartbeatJitter stays).
func (s Settings) WithDefaults() Settings {
	if s.LeaseDuration == 0 {
		s.LeaseDuration = DefaultLeaseDuration
	}
	if s.HeartbeatInterval == 0 {
		s.HeartbeatInterval = s.LeaseDuration / 5
	}
	if s.HeartbeatDeadline == 0 {
		s.HeartbeatDeadline = s.LeaseDuration * 4 / 5
	}
	if s.RetryBackoff == 0 {
		s.RetryBackoff = s.HeartbeatInterval / 8
	}
	if s.Stagger == 0 {
		s.Stagger = s.LeaseDuration / 10
	}
	if s.TransactionTimeout == 0 {
		s.TransactionTimeout = s.LeaseDuration / 2
	}
	if s.HeartbeatJitter == 0 {
		s.HeartbeatJitter = s.HeartbeatInterval / 4
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
//	0 < RetryBackoff <= HeartbeatInterval < HeartbeatDeadline <= LeaseDuration
//	0 < Stagger
//	0 < TransactionTimeout < LeaseDuration - HeartbeatInterval
//
// Observers count a lease as lasting at most rolestate.MaxLeaseSpan, so a
// longer one could run out for them while its holder still holds it. Why
// the last bound: docs/DESIGN.md, "Liveness: what bounds a vacancy".
func (s Settings) Validate() error {
	pos := []struct {
		name string
		v    time.Duration
	}{
		{"lease duration", s.LeaseDuration},
		{"heartbeat interval", s.HeartbeatInterval},
		{"heartbeat deadline", s.HeartbeatDeadline},
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
	if s.HeartbeatInterval >= s.LeaseDuration {
		return &SettingsError{Field: "heartbeat interval", Value: s.HeartbeatInterval, Rule: "must be shorter than", Other: "lease duration", OtherValue: s.LeaseDuration}
	}
	if s.HeartbeatInterval >= s.HeartbeatDeadline {
		return &SettingsError{Field: "heartbeat interval", Value: s.HeartbeatInterval, Rule: "must be shorter than", Other: "heartbeat deadline", OtherValue: s.HeartbeatDeadline}
	}
	if s.HeartbeatDeadline > s.LeaseDuration {
		return &SettingsError{Field: "heartbeat deadline", Value: s.HeartbeatDeadline, Rule: "must not be longer than", Other: "lease duration", OtherValue: s.LeaseDuration}
	}
	if s.RetryBackoff > s.HeartbeatInterval {
		return &SettingsError{Field: "retry backoff", Value: s.RetryBackoff, Rule: "must not be longer than", Other: "heartbeat interval", OtherValue: s.HeartbeatInterval}
	}
	return s.checkTxnTimeout("transaction timeout", s.TransactionTimeout)
}

// checkTxnTimeout is Validate's last bound, for the transaction timeout d
// named field (New checks the transport's own with it).
func (s Settings) checkTxnTimeout(field string, d time.Duration) error {
	if lim := s.LeaseDuration - s.HeartbeatInterval; d >= lim {
		return &SettingsError{Field: field, Value: d, Rule: "must be shorter than", Other: "lease duration - heartbeat interval", OtherValue: lim}
	}
	return nil
}

// backoff returns the wait after the n-th consecutive failure (n >= 1).
func (s Settings) backoff(n int) time.Duration {
	d := s.RetryBackoff
	for i := 1; i < n && d < s.HeartbeatInterval; i++ {
		d *= 2
	}
	return min(d, s.HeartbeatInterval)
}

// MaxWorkBackoff caps the campaign backoff after work failed: it doubles
// from HeartbeatInterval with each consecutive failure, up to this.
const MaxWorkBackoff = 5 * time.Minute

// workBackoff returns the campaign backoff after the n-th consecutive
// failure of work (n >= 1).
func (s Settings) workBackoff(n int) time.Duration {
	d := s.HeartbeatInterval
	for i := 1; i < n && d < MaxWorkBackoff; i++ {
		d *= 2
	}
	return min(d, MaxWorkBackoff)
}

// SettingsError is the error [Settings.Validate] returns. It matches
// [ErrInvalidSettings] with errors.Is.
type SettingsError struct {
	// Field is the setting at fault, in words ("heartbeat interval", or
	// "transport transaction timeout" for the transport's, checked by New).
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

// Error returns the message, for example "processor settings: heartbeat
// interval 3s must be shorter than heartbeat deadline 2s".
func (e *SettingsError) Error() string {
	if e.Other == "" {
		return fmt.Sprintf("processor settings: %s %v %s", e.Field, e.Value, e.Rule)
	}
	return fmt.Sprintf("processor settings: %s %v %s %s %v", e.Field, e.Value, e.Rule, e.Other, e.OtherValue)
}

// Is reports whether target is ErrInvalidSettings.
func (e *SettingsError) Is(target error) bool { return target == ErrInvalidSettings }
