package fencing_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/fencing"
)

// Sarama is where a Config from outside gets its defaults (the transport
// builds from a defaulted one without applying them again), and applying
// them twice changes nothing, so a caller that defaulted its Config
// already gets the same.
func TestSaramaAppliesTheDefaultsOnce(t *testing.T) {
	c := fencing.Config{Brokers: []string{"127.0.0.1:1"}, ClientID: "me"}
	d := c.WithDefaults()
	assert.Equal(t, d, d.WithDefaults())

	sc, err := c.Sarama()
	require.NoError(t, err)
	assert.Equal(t, "me", sc.ClientID)
	assert.Equal(t, fencing.DefaultDialTimeout, sc.Net.DialTimeout)
	assert.Equal(t, fencing.DefaultRequestTimeout, sc.Net.ReadTimeout)
	assert.Equal(t, fencing.DefaultRequestTimeout, sc.Admin.Timeout)

	sd, err := d.Sarama()
	require.NoError(t, err)
	assert.Equal(t, sc.ClientID, sd.ClientID)
	assert.Equal(t, sc.Net.DialTimeout, sd.Net.DialTimeout)
	assert.Equal(t, sc.Metadata.Timeout, sd.Metadata.Timeout)
}
