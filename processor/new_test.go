package processor

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/fencing/fencingtest"
)

// New checks the transport's transaction timeout through the named
// capability fencing.TxnTimeouter, and only through it: the mock does not
// offer one, so New does not check it (explicitly, not by a silent miss
// of an undeclared method); a transport that offers one must keep it
// below LeaseDuration - HeartbeatInterval.
func TestNewChecksTheTransportTxnTimeout(t *testing.T) {
	mockTr := fencingtest.NewMockTransport(t)
	_, offers := any(mockTr).(fencing.TxnTimeouter)
	require.False(t, offers, "the mock offers no transaction timeout")
	_, offers = any(&fencing.BrokerTransport{}).(fencing.TxnTimeouter)
	require.True(t, offers, "the broker transport offers its transaction timeout")

	src := newFakeSource(state(role, nil, 0))
	roles := []codec.Role{role}
	s := Settings{LeaseDuration: 10 * time.Second} // heartbeat interval 2s: the bound is 8s

	_, err := New(mockTr, src, "a", roles, Options{Settings: s})
	require.NoError(t, err, "a transport without a timeout is not checked")

	_, err = New(timeoutTransport{mockTr, 7900 * time.Millisecond}, src, "a", roles, Options{Settings: s})
	require.NoError(t, err, "a timeout below the bound is accepted")

	for _, d := range []time.Duration{8 * time.Second, time.Minute} {
		m, err := New(timeoutTransport{mockTr, d}, src, "a", roles, Options{Settings: s})
		assert.Nil(t, m)
		require.ErrorIs(t, err, ErrInvalidSettings, "timeout %v", d)
		var se *SettingsError
		require.True(t, errors.As(err, &se))
		assert.Equal(t, "transport transaction timeout", se.Field)
		assert.Equal(t, d, se.Value)
		assert.Equal(t, 8*time.Second, se.OtherValue)
	}
}
