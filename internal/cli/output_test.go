package cli

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestRelative(t *testing.T) {
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{0, "now"},
		{-3 * time.Second, "3s ago"},
		{12 * time.Second, "in 12s"},
		{-(3*time.Minute + 4*time.Second), "3m04s ago"},
		{2*time.Hour + 5*time.Minute, "in 2h05m"},
		{-72 * time.Hour, "3d ago"},
	} {
		assert.Equal(t, tc.want, relative(now.Add(tc.d), now), "%v", tc.d)
	}
	assert.Equal(t, "2025-01-02T03:04:05.000Z (now)", humanTime(now.UnixMilli(), now))
}
