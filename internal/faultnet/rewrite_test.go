package faultnet_test

import (
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/krabka/krole/internal/faultnet"
	"github.com/krabka/krole/internal/testcluster"
)

// A rewrite rule changes what the client is told, not what the broker
// did: the broker appends the produce, the client hears a refusal; the
// rule's function sees the request; only Count answers are replaced, and
// other clients' answers pass.
func TestRewriteChangesTheAnswerOnly(t *testing.T) {
	c, fn := testcluster.StartFaulty(t, testcluster.Options{Nodes: 1})
	topic := c.Topic(t, c.Name("app"), 1, 10*time.Second)
	var mu sync.Mutex
	var seen []string // the topics of the requests the function saw
	rw := fn.Rewrite(faultnet.Rule{APIKey: produceKey, Node: faultnet.AnyNode, ClientID: "liar", Count: 1},
		func(req kmsg.Request, resp kmsg.Response) kmsg.Response {
			pr := req.(*kmsg.ProduceRequest)
			mu.Lock()
			seen = append(seen, pr.Topics[0].Topic)
			mu.Unlock()
			res := resp.(*kmsg.ProduceResponse)
			for i := range res.Topics {
				for j := range res.Topics[i].Partitions {
					res.Topics[i].Partitions[j].ErrorCode = kerr.InvalidRecord.Code
				}
			}
			return res
		})
	other := producer(t, c, "honest-1")
	_, _, err := other.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder("other")})
	require.NoError(t, err, "another client's answer is not rewritten")

	p := producer(t, c, "liar-1")
	_, _, err = p.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder("appended")})
	require.ErrorIs(t, err, sarama.ErrInvalidRecord, "the client hears the rewritten answer")
	assert.Equal(t, 1, rw.Count())
	mu.Lock()
	assert.Equal(t, []string{topic}, seen)
	mu.Unlock()
	_, _, err = p.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder("after")})
	require.NoError(t, err, "the rule rewrote its one answer")
	assert.Equal(t, 1, rw.Count())
	assert.Equal(t, []string{"other", "appended", "after"}, values(c.ReadAll(t, topic, sarama.ReadUncommitted, 10*time.Second)),
		"the broker appended what it was sent")
}
