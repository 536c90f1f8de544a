package processor_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/processor"
)

// The defaults against a stock Apache Kafka or Redpanda (abort interval
// 10 s), as Settings documents them: the stall rule does not hold for the
// defaults (members on a view rely on the held-back rule instead, tested
// by TestIntegrationFrozenPartitionCausesNoElectionStorm with a stall of
// five leases), and it holds for the timings recommended for a
// TransportSource, which pass Validate.
func TestDefaultsAgainstAStockBroker(t *testing.T) {
	stock := fencing.BrokerTxnSettings{MaxTxnTimeout: 15 * time.Minute, AbortInterval: fencing.DefaultAbortInterval}

	d := processor.Settings{}.WithDefaults()
	require.NoError(t, d.Validate())
	assert.Equal(t, 10*time.Second, d.LeaseDuration)
	assert.Equal(t, 5*time.Second, d.TransactionTimeout)
	err := stock.CheckTimings(d.TransactionTimeout, d.LeaseDuration, d.HeartbeatInterval)
	var bse *fencing.BrokerSettingsError
	require.ErrorAs(t, err, &bse, "the defaults break the stall rule on a stock broker")
	assert.False(t, bse.Refused)

	tsrc := processor.Settings{LeaseDuration: 20 * time.Second, TransactionTimeout: 5 * time.Second}.WithDefaults()
	require.NoError(t, tsrc.Validate())
	assert.Equal(t, 4*time.Second, tsrc.HeartbeatInterval)
	assert.NoError(t, stock.CheckTimings(tsrc.TransactionTimeout, tsrc.LeaseDuration, tsrc.HeartbeatInterval),
		"the timings recommended for a TransportSource hold on a stock broker")
}
