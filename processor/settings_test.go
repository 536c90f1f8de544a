package processor

import (
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing/fencingtest"
	"github.com/krabka/krole/rolestate"
)

func TestSettingsDefaults(t *testing.T) {
	s := Settings{}.WithDefaults()
	assert.Equal(t, Settings{
		LeaseDuration:      10 * time.Second,
		HeartbeatInterval:  2 * time.Second,
		HeartbeatDeadline:  8 * time.Second,
		RetryBackoff:       250 * time.Millisecond,
		Stagger:            time.Second,
		TransactionTimeout: 5 * time.Second,
		HeartbeatJitter:    500 * time.Millisecond,
		MaxInFlight:        DefaultMaxInFlight,
	}, s)
	require.NoError(t, s.Validate())

	// Defaults scale with the lease duration.
	for _, d := range []time.Duration{5 * time.Millisecond, time.Second, time.Minute, rolestate.MaxLeaseSpan} {
		assert.NoError(t, Settings{LeaseDuration: d}.WithDefaults().Validate(), "lease %v", d)
	}
	// A field set by hand is kept.
	assert.Equal(t, 3*time.Second, Settings{Stagger: 3 * time.Second}.WithDefaults().Stagger)
}

func TestSettingsValidateRejectsImpossibleCombinations(t *testing.T) {
	base := Settings{}.WithDefaults()
	with := func(f func(*Settings)) Settings { s := base; f(&s); return s }
	cases := []struct {
		name string
		s    Settings
		msg  string
	}{
		{"heartbeat interval not shorter than the lease",
			with(func(s *Settings) { s.HeartbeatInterval = 10 * time.Second }),
			"heartbeat interval 10s must be shorter than lease duration 10s"},
		{"heartbeat interval not shorter than the heartbeat deadline",
			with(func(s *Settings) { s.HeartbeatInterval = 8 * time.Second }),
			"heartbeat interval 8s must be shorter than heartbeat deadline 8s"},
		{"heartbeat deadline past the lease",
			with(func(s *Settings) { s.HeartbeatDeadline = 11 * time.Second }),
			"heartbeat deadline 11s must not be longer than lease duration 10s"},
		{"backoff longer than the heartbeat interval",
			with(func(s *Settings) { s.RetryBackoff = 3 * time.Second }),
			"retry backoff 3s must not be longer than heartbeat interval 2s"},
		{"transaction timeout that can hide a renewal past the lease",
			with(func(s *Settings) { s.TransactionTimeout = 8 * time.Second }),
			"transaction timeout 8s must be shorter than lease duration - heartbeat interval 8s"},
		{"lease longer than observers accept",
			Settings{LeaseDuration: 11 * time.Minute}.WithDefaults(),
			"lease duration 11m0s must not be longer than the longest lease observers accept (rolestate.MaxLeaseSpan) 10m0s"},
		{"heartbeat deadline past the observers' cap, with a lease of 12.5m and more",
			Settings{LeaseDuration: 13 * time.Minute}.WithDefaults(),
			"lease duration 13m0s must not be longer than the longest lease observers accept (rolestate.MaxLeaseSpan) 10m0s"},
		{"negative stagger",
			with(func(s *Settings) { s.Stagger = -time.Second }),
			"stagger -1s must be positive"},
		{"sub-millisecond lease",
			Settings{LeaseDuration: 500 * time.Microsecond}.WithDefaults(),
			"lease duration 500µs must be at least 2ms"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.s.Validate()
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrInvalidSettings)
			var se *SettingsError
			require.True(t, errors.As(err, &se))
			assert.Contains(t, err.Error(), c.msg)
		})
	}
}

func TestNewRejects(t *testing.T) {
	tr := fencingtest.NewMockTransport(t)
	src := newFakeSource(state(role, nil, 0))
	ok := []codec.Role{role}
	cases := map[string]func() (*Member, error){
		"no transport":   func() (*Member, error) { return New(nil, src, "a", ok, Options{}) },
		"no source":      func() (*Member, error) { return New(tr, nil, "a", ok, Options{}) },
		"bad member":     func() (*Member, error) { return New(tr, src, "a/b", ok, Options{}) },
		"no roles":       func() (*Member, error) { return New(tr, src, "a", nil, Options{}) },
		"bad role":       func() (*Member, error) { return New(tr, src, "a", []codec.Role{"a b"}, Options{}) },
		"duplicate role": func() (*Member, error) { return New(tr, src, "a", []codec.Role{role, role}, Options{}) },
		"impossible timing": func() (*Member, error) {
			return New(tr, src, "a", ok, Options{Settings: Settings{HeartbeatInterval: time.Minute}})
		},
	}
	for name, f := range cases {
		m, err := f()
		assert.Error(t, err, name)
		assert.Nil(t, m, name)
	}
	_, err := New(tr, src, "a", ok, Options{Settings: Settings{HeartbeatInterval: time.Minute}})
	assert.ErrorIs(t, err, ErrInvalidSettings)

	m, err := New(tr, src, "a", ok, Options{})
	require.NoError(t, err)
	assert.Equal(t, codec.MemberID("a"), m.ID())
	assert.Equal(t, Settings{}.WithDefaults(), m.Settings())
}

func TestMetricsShareARegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	tr := fencingtest.NewMockTransport(t)
	src := newFakeSource(state(role, nil, 0))
	_, err := New(tr, src, "a", []codec.Role{"r1"}, Options{Registerer: reg})
	require.NoError(t, err)
	_, err = New(tr, src, "b", []codec.Role{"r2"}, Options{Registerer: reg})
	require.NoError(t, err, "a second member in the same process shares the collectors")
	// Nothing is registered globally by default.
	_, err = New(tr, src, "c", []codec.Role{"r3"}, Options{})
	require.NoError(t, err)
}
