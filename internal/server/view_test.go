package server

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/testcluster"
	"github.com/krabka/krole/view"
)

// TestOverARealView serves a view of an embedded cluster.
func TestOverARealView(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	v, err := view.New(view.Options{Config: c.Config})
	require.NoError(t, err)
	h := New(v, Options{Wait: 50 * time.Millisecond})

	rec, _ := get(t, h, "/v1/roles")
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code, "not running: not caught up")

	sc, err := c.Config.Sarama()
	require.NoError(t, err)
	p, err := sarama.NewSyncProducer(c.Config.Brokers, sc)
	require.NoError(t, err)
	defer p.Close()
	val, err := codec.EncodeRecord(codec.Record{Registration: &codec.Registration{Member: "m1", RegisteredAt: 1}})
	require.NoError(t, err)
	_, off, err := p.SendMessage(&sarama.ProducerMessage{Topic: c.Config.Topic, Partition: 0,
		Key: sarama.StringEncoder(codec.RegistrationKey("svc", "m1").String()), Value: sarama.ByteEncoder(val)})
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- v.Run(ctx) }()
	defer func() {
		cancel()
		require.NoError(t, <-errc)
	}()
	wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
	defer wcancel()
	require.NoError(t, v.WaitCaughtUp(wctx))

	rec, body := get(t, h, "/v1/roles/svc/candidates")
	require.Equal(t, http.StatusOK, rec.Code)
	cs := body["candidates"].([]any)
	require.Len(t, cs, 1)
	assert.Equal(t, "m1", cs[0].(map[string]any)["member"])
	assert.Equal(t, float64(off), cs[0].(map[string]any)["offset"])
	rec, _ = get(t, h, "/healthz")
	assert.Equal(t, http.StatusOK, rec.Code)
}
