package view

import (
	"context"
	"fmt"
	"github.com/krabka/krole/rolestate"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/testcluster"
)

// TestMain fails the run when goroutines other than those
// testcluster.LeakOptions allows (sarama's process-wide metrics arbiter,
// from go-metrics) outlive the tests: the view's, goka's and sarama's
// among them (go.uber.org/goleak).
func TestMain(m *testing.M) { testcluster.VerifyNoLeaks(m) }

// testCtx is a context bounded well below the test timeout.
func testCtx(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// runView starts a view on c and stops it (and checks Run's result) when
// the test ends. The returned stop function stops it earlier.
func runView(t testing.TB, cfg fencing.Config, opts Options) (*View, func()) {
	t.Helper()
	opts.Config = cfg
	if opts.Authors == nil {
		opts.Authors = authorsFor(cfg)
	}
	if opts.Logger == nil && os.Getenv("KROLE_TEST_LOG") != "" {
		opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	v, err := New(opts)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- v.Run(ctx) }()
	var stopped atomic.Bool
	stop := func() {
		if stopped.Swap(true) {
			return
		}
		cancel()
		select {
		case err := <-errc:
			require.NoError(t, err, "Run")
		case <-time.After(20 * time.Second):
			t.Errorf("Run did not return after cancel")
		}
	}
	t.Cleanup(stop)
	return v, stop
}

func caughtUp(t testing.TB, v *View) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, v.WaitCaughtUp(ctx))
}

// writer writes test records straight to the role topic with sarama: plain
// appends for registrations, tombstones and poison, a transactional
// producer for leases.
type writer struct {
	t      testing.TB
	cfg    fencing.Config
	nparts int32
	plain  sarama.SyncProducer
	txns   []*txnProducer
}

// testAuthors holds, per cluster, the producer ids the tests' writers
// stand for a role's holder with (see writer.lease).
var testAuthors sync.Map // strings.Join(Brokers, ",") -> *rolestate.Authors

// authorsFor returns the record of roles' own producer ids that runView
// hands a view of cfg's cluster: the producer ids writer.lease wrote a
// role's leases with. A test's transactional producer stands for a
// role's holder, whatever its transactional id, as a member's view knows
// the producer ids its member minted (fencing.BrokerTransport.Authors);
// a producer id not recorded is verified at the coordinator.
func authorsFor(cfg fencing.Config) *rolestate.Authors {
	a, _ := testAuthors.LoadOrStore(strings.Join(cfg.Brokers, ","), rolestate.NewAuthors())
	return a.(*rolestate.Authors)
}

func newWriter(t testing.TB, c *testcluster.Cluster, nparts int32) *writer {
	t.Helper()
	sc, err := c.Config.Sarama()
	require.NoError(t, err)
	p, err := sarama.NewSyncProducer(c.Config.Brokers, sc)
	require.NoError(t, err)
	w := &writer{t: t, cfg: c.Config, nparts: nparts, plain: p}
	t.Cleanup(func() {
		for _, tp := range w.txns {
			_ = tp.Close()
		}
		_ = w.plain.Close()
	})
	return w
}

func (w *writer) send(key string, value []byte, partition int32) int64 {
	w.t.Helper()
	msg := &sarama.ProducerMessage{Topic: w.cfg.Topic, Key: sarama.StringEncoder(key), Partition: partition}
	if value != nil {
		msg.Value = sarama.ByteEncoder(value)
	}
	_, off, err := w.plain.SendMessage(msg)
	require.NoError(w.t, err)
	return off
}

func (w *writer) part(role codec.Role) int32 { return codec.Partition(role, w.nparts) }

// register appends member's registration and returns its offset.
func (w *writer) register(role codec.Role, member codec.MemberID) int64 {
	w.t.Helper()
	b, err := codec.EncodeRecord(codec.Record{Registration: &codec.Registration{Member: member, RegisteredAt: time.Now().UnixMilli()}})
	require.NoError(w.t, err)
	return w.send(codec.RegistrationKey(role, member).String(), b, w.part(role))
}

// registerValue appends member's registration with value, as a plain
// append (sarama's SyncProducer, the way a stranger's kcat would).
func (w *writer) registerValue(role codec.Role, member codec.MemberID, value string) int64 {
	w.t.Helper()
	b, err := codec.EncodeRecord(codec.Record{Registration: &codec.Registration{Member: member, RegisteredAt: time.Now().UnixMilli(), Value: value}})
	require.NoError(w.t, err)
	return w.send(codec.RegistrationKey(role, member).String(), b, w.part(role))
}

// deregister appends a tombstone on member's registration.
func (w *writer) deregister(role codec.Role, member codec.MemberID) int64 {
	w.t.Helper()
	return w.send(codec.RegistrationKey(role, member).String(), nil, w.part(role))
}

// txnProducer returns a new transactional producer (transaction timeout
// 10s) on the transactional id w.cfg.TransactionalID(id).
func (w *writer) txnProducer(id string) *txnProducer {
	w.t.Helper()
	return w.txnProducerTimeout(id, 10*time.Second)
}

func (w *writer) txnProducerTimeout(id string, timeout time.Duration) *txnProducer {
	w.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(w.cfg.Brokers...),
		kgo.TransactionalID(w.cfg.TransactionalID(id)),
		kgo.TransactionTimeout(timeout),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		// The transaction protocol krole's writer speaks (sarama's): the
		// epoch moves only at InitProducerId, not at every commit (KIP-890
		// from Apache Kafka 4.0, which kfake and franz-go speak).
		kgo.MaxVersions(kversion.V3_9_0()))
	require.NoError(w.t, err)
	pid, epoch, err := cl.ProducerID(context.Background())
	require.NoError(w.t, err)
	tp := &txnProducer{t: w.t, cl: cl, token: codec.Token{ProducerID: pid, Epoch: epoch}, authors: authorsFor(w.cfg)}
	w.txns = append(w.txns, tp)
	return tp
}

// txnProducer is a transactional producer (franz-go's, which tells its
// producer id and epoch) with the calls of sarama's SyncProducer that the
// tests use. It writes every lease under its own token, as a real holder
// does: a lease it is handed has its Token replaced (see sign).
type txnProducer struct {
	t     testing.TB
	cl    *kgo.Client
	token codec.Token
	// authors records tp's producer id as the role's own for each lease
	// it writes: tp stands for the role's holder (see authorsFor).
	authors *rolestate.Authors
}

// sign returns l with tp's token: the lease tp writes for it.
func (tp *txnProducer) sign(l codec.Lease) codec.Lease {
	l.Token = tp.token
	return l
}

func (tp *txnProducer) BeginTxn() error { return tp.cl.BeginTransaction() }

func (tp *txnProducer) CommitTxn() error {
	return tp.cl.EndTransaction(context.Background(), kgo.TryCommit)
}

func (tp *txnProducer) AbortTxn() error {
	return tp.cl.EndTransaction(context.Background(), kgo.TryAbort)
}

func (tp *txnProducer) Close() error { tp.cl.Close(); return nil }

// SendMessage produces msg in the open transaction (a lease is signed with
// tp's token) and returns its partition and offset.
func (tp *txnProducer) SendMessage(msg *sarama.ProducerMessage) (int32, int64, error) {
	rs, err := tp.produce(msg)
	if err != nil {
		return 0, 0, err
	}
	return rs[0].Partition, rs[0].Offset, nil
}

// SendMessages produces msgs in the open transaction.
func (tp *txnProducer) SendMessages(msgs []*sarama.ProducerMessage) error {
	_, err := tp.produce(msgs...)
	return err
}

func (tp *txnProducer) produce(msgs ...*sarama.ProducerMessage) ([]*kgo.Record, error) {
	recs := make([]*kgo.Record, len(msgs))
	for i, m := range msgs {
		k, err := m.Key.Encode()
		require.NoError(tp.t, err)
		var v []byte
		if m.Value != nil {
			v, err = m.Value.Encode()
			require.NoError(tp.t, err)
			if r, derr := codec.DecodeRecord(v); derr == nil && r.Lease != nil {
				l := tp.sign(*r.Lease)
				if key, kerr := codec.DecodeKey(k); kerr == nil {
					tp.authors.Own(key.Role, tp.token.ProducerID)
				}
				v, err = codec.EncodeRecord(codec.Record{Lease: &l})
				require.NoError(tp.t, err)
			}
		}
		recs[i] = &kgo.Record{Topic: m.Topic, Partition: m.Partition, Key: k, Value: v}
	}
	res := tp.cl.ProduceSync(context.Background(), recs...)
	return recs, res.FirstErr()
}

func leaseMsg(t testing.TB, w *writer, role codec.Role, l codec.Lease) *sarama.ProducerMessage {
	t.Helper()
	b, err := codec.EncodeRecord(codec.Record{Lease: &l})
	require.NoError(t, err)
	return &sarama.ProducerMessage{Topic: w.cfg.Topic, Key: sarama.StringEncoder(codec.LeaseKey(role).String()),
		Value: sarama.ByteEncoder(b), Partition: w.part(role)}
}

// lease writes l in one transaction of tp and commits (or aborts) it. It
// returns the lease record's offset.
func (w *writer) lease(tp *txnProducer, role codec.Role, l codec.Lease, commit bool) int64 {
	w.t.Helper()
	require.NoError(w.t, tp.BeginTxn())
	_, off, err := tp.SendMessage(leaseMsg(w.t, w, role, l))
	require.NoError(w.t, err)
	if commit {
		require.NoError(w.t, tp.CommitTxn())
	} else {
		require.NoError(w.t, tp.AbortTxn())
	}
	return off
}

func mkLease(member codec.MemberID, epoch int16, granted time.Time, d time.Duration) codec.Lease {
	l, err := codec.NewLease(member, codec.Token{ProducerID: 7, Epoch: epoch}, granted.UnixMilli(), granted.Add(d).UnixMilli())
	if err != nil {
		panic(err)
	}
	return l
}

func members(cs []rolestate.Candidate) []codec.MemberID {
	out := make([]codec.MemberID, len(cs))
	for i, c := range cs {
		out[i] = c.Member
	}
	return out
}

// rolesInPartitions returns n role names per partition, so a test can put
// roles where it wants them.
func rolesInPartitions(prefix string, nparts int32, n int) map[int32][]codec.Role {
	out := map[int32][]codec.Role{}
	for i := 0; ; i++ {
		r := codec.Role(fmt.Sprintf("%s-%d", prefix, i))
		p := codec.Partition(r, nparts)
		if len(out[p]) < n {
			out[p] = append(out[p], r)
		}
		full := true
		for q := int32(0); q < nparts; q++ {
			if len(out[q]) < n {
				full = false
			}
		}
		if full {
			return out
		}
	}
}

// setOffline gives a View that Run never started nparts partitions, so
// that a test can feed its table through apply.
func (v *View) setOffline(nparts int32) {
	v.nparts = nparts
	for p := int32(0); p < nparts; p++ {
		v.partIDs = append(v.partIDs, p)
	}
	v.progress.addPartitions(v.partIDs)
	v.glue.addPartitions(v.partIDs)
}

// leaseErr is the error of a WriteLease, for tests that do not look at
// the offset.
func leaseErr(_ int64, err error) error { return err }
