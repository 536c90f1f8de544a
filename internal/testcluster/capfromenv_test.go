package testcluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/krabka/krole/internal/devcluster"
	"github.com/krabka/krole/internal/testcluster"
)

// A cluster a test starts through devcluster.Start with DevOptions is
// capped by the table KROLE_TEST_VERSIONS names, as testcluster.Start's
// clusters are; unset, the options are unchanged (and devcluster itself,
// so `krole dev`, never reads the variable).
func TestDevOptionsCapsByTheEnvironment(t *testing.T) {
	t.Setenv(testcluster.VersionsEnv, "")
	opts, err := testcluster.CapFromEnv(devcluster.Options{})
	require.NoError(t, err)
	assert.Empty(t, opts.Extra, "unset: unchanged")

	t.Setenv(testcluster.VersionsEnv, "redpanda")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := devcluster.Start(ctx, testcluster.DevOptions(t, devcluster.Options{}))
	require.NoError(t, err)
	defer c.Close()
	b := sarama.NewBroker(c.ListenAddrs()[0])
	require.NoError(t, b.Open(sarama.NewConfig()))
	defer b.Close()
	res, err := b.ApiVersions(&sarama.ApiVersionsRequest{})
	require.NoError(t, err)
	maxv := map[int16]int16{}
	for _, k := range res.ApiKeys {
		maxv[k.ApiKey] = k.MaxVersion
	}
	assert.Equal(t, int16(7), maxv[int16(kmsg.Produce)], "Redpanda's Produce maximum")
	assert.Equal(t, int16(1), maxv[int16(kmsg.AddOffsetsToTxn)], "Redpanda's AddOffsetsToTxn maximum")

	t.Setenv(testcluster.VersionsEnv, "bogus")
	_, err = testcluster.CapFromEnv(devcluster.Options{})
	assert.ErrorContains(t, err, `KROLE_TEST_VERSIONS="bogus"`)
}
