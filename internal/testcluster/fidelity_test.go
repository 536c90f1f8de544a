package testcluster_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/testcluster"
	"github.com/krabka/krole/view"
)

// versionLog records the highest version of each request key the
// embedded cluster was sent.
type versionLog struct {
	mu  sync.Mutex
	max map[int16]int16
}

func (l *versionLog) record(req kmsg.Request) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if v, ok := l.max[req.Key()]; !ok || req.GetVersion() > v {
		l.max[req.Key()] = req.GetVersion()
	}
}

// The version matrix (issue 9): under the request versions of Apache Kafka
// 3.0, Apache Kafka 4.0 and Redpanda, every request krole sends
// negotiates down and works: acquire, lease write, a fenced writer,
// application writes read back read_committed, the role's records,
// describe, and a view that catches up with all of it. Each request sent
// is at or below the broker's maximum for its key (kfake refuses one
// above, so the test would fail there too, but the log says which).
func TestVersionMatrix(t *testing.T) {
	if testcluster.External() {
		t.Skip("caps the embedded cluster's versions; KROLE_BROKERS names an outside cluster with versions of its own")
	}
	for _, b := range testcluster.RealBrokers() {
		t.Run(b.Name, func(t *testing.T) {
			c := testcluster.Start(t, testcluster.Options{Partitions: 3, MaxVersions: b.Versions})
			log := &versionLog{max: map[int16]int16{}}
			c.Fake.Control(func(req kmsg.Request) (kmsg.Response, error, bool) {
				c.Fake.KeepControl()
				log.record(req)
				return nil, nil, false
			})
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()

			v, err := view.New(view.Options{Config: c.Config})
			require.NoError(t, err)
			vctx, vcancel := context.WithCancel(ctx)
			vdone := make(chan error, 1)
			go func() { vdone <- v.Run(vctx) }()
			defer func() { vcancel(); require.NoError(t, <-vdone) }()

			role := codec.Role("matrix")
			a, b2 := c.Transport(t), c.Transport(t)
			_, err = a.Register(ctx, role, "node-a")
			require.NoError(t, err)
			_, err = b2.Register(ctx, role, "node-b")
			require.NoError(t, err)

			tokA, err := a.AcquireEpoch(ctx, role)
			require.NoError(t, err)
			now := time.Now().UnixMilli()
			la, err := codec.NewLease("node-a", tokA, now, now+30_000)
			require.NoError(t, err)
			require.NoError(t, a.WriteLease(ctx, role, tokA, la))

			data := c.Topic(t, c.Name("data"), 2, 10*time.Second)
			require.NoError(t, a.Writer(role, tokA).Write(ctx,
				fencing.Message{Topic: data, Partition: 0, Value: []byte("a-0")},
				fencing.Message{Topic: data, Partition: 1, Value: []byte("a-1")}))

			require.NoError(t, v.WaitCaughtUp(ctx))
			st, err := v.Role(ctx, role)
			require.NoError(t, err)
			require.NotNil(t, st.Lease)
			assert.Equal(t, la, *st.Lease, "the view caught up with the lease")
			assert.Len(t, st.Candidates, 2)

			tokB, err := b2.AcquireEpoch(ctx, role)
			require.NoError(t, err)
			assert.True(t, tokB.Newer(tokA))
			err = a.WriteLease(ctx, role, tokA, la)
			assert.True(t, fencing.IsFenced(err), "the old holder's lease write is fenced: %v", err)
			err = a.Writer(role, tokA).Write(ctx, fencing.Message{Topic: data, Partition: 0, Value: []byte("a-late")})
			assert.Error(t, err, "the old holder's application write is refused")
			lb, err := codec.NewLease("node-b", tokB, now, now+30_000)
			require.NoError(t, err)
			require.NoError(t, b2.WriteLease(ctx, role, tokB, lb))
			require.NoError(t, b2.Writer(role, tokB).Write(ctx, fencing.Message{Topic: data, Partition: 0, Value: []byte("b-0")}))

			got, ok, err := b2.Describe(ctx, role)
			require.NoError(t, err)
			assert.True(t, ok)
			assert.Equal(t, tokB, got, "describe names the current token")

			recs, err := b2.ReadRoleRecords(ctx, role)
			require.NoError(t, err)
			var leases []codec.Lease
			for _, r := range recs {
				if r.Record.Lease != nil {
					leases = append(leases, *r.Record.Lease)
				}
			}
			assert.Equal(t, []codec.Lease{la, lb}, leases)

			var values []string
			for _, m := range c.ReadAll(t, data, sarama.ReadCommitted, 20*time.Second) {
				values = append(values, string(m.Value))
			}
			assert.ElementsMatch(t, []string{"a-0", "a-1", "b-0"}, values, "nothing of the fenced writer shows")

			require.NoError(t, v.WaitCaughtUp(ctx))
			st, err = v.Role(ctx, role)
			require.NoError(t, err)
			require.NotNil(t, st.Lease)
			assert.Equal(t, lb, *st.Lease, "the view caught up with the takeover")

			log.mu.Lock()
			defer log.mu.Unlock()
			for _, k := range []kmsg.Key{kmsg.Produce, kmsg.Fetch, kmsg.ListOffsets, kmsg.Metadata, kmsg.InitProducerID,
				kmsg.AddPartitionsToTxn, kmsg.EndTxn, kmsg.FindCoordinator, kmsg.DescribeTransactions} {
				sent, ok := log.max[int16(k)]
				require.True(t, ok, "%s was sent", k.Name())
				limit, _ := b.Versions.LookupMaxKeyVersion(int16(k))
				assert.LessOrEqual(t, sent, limit, "%s v%d is above %s's v%d", k.Name(), sent, b.Name, limit)
				t.Logf("%s: sent v%d, broker max v%d", k.Name(), sent, limit)
			}
		})
	}
}
