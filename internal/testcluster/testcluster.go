// Package testcluster gives integration tests a Kafka-protocol cluster over
// TCP: the one KROLE_BROKERS names when it is set (host:port[,host:port],
// so the suite runs against Apache Kafka or Redpanda), or an embedded kfake
// cluster (package internal/devcluster) started for the test and closed
// when it ends.
//
// The two differ in timing, not in the protocol. kfake aborts a timed-out
// transaction when its timeout passes; Apache Kafka aborts it only at its
// next check, every
// transaction.abort.timed.out.transaction.cleanup.interval.ms (default 10
// s), so a test whose bound rests on the abort must call
// [Cluster.RequireFake] or allow for that interval.
//
// The embedded cluster can advertise the request versions of a real
// broker ([Options].MaxVersions, or [VersionsEnv] for a whole run:
// KROLE_TEST_VERSIONS=redpanda, kafka-3.0 or kafka-4.0; [RealBrokers]), so
// that the suite shows krole's requests negotiate down to what Apache
// Kafka 3.0 and 4.0 and Redpanda serve. The package's own tests run the
// core operations under each table in every run.
//
// It also holds what the tests of several packages share: fresh names
// and application topics ([Cluster.Name], [Cluster.Topic]), a read of
// everything decided so far ([Cluster.ReadAll]), transports and member
// writes ([Cluster.Transport], [Cluster.Members]), the exactly-once check
// of outputs ([RequireExactlyOnce]), the goroutine-leak check of TestMain
// ([VerifyNoLeaks]) and a buffer safe for concurrent use ([SyncBuffer]).
package testcluster

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/devcluster"
	"github.com/krabka/krole/internal/faultnet"
)

// Cluster is what a test gets: a config naming a fresh topic and a fresh
// transactional-id prefix (so tests never see each other's roles), and the
// embedded cluster when there is one (nil for an external cluster).
type Cluster struct {
	// Config reaches the cluster, with defaults applied: Brokers from
	// KROLE_BROKERS or the embedded cluster's listeners, and a Topic and
	// TxnPrefix of this test's own ("krole-test-<unique>.roles" and
	// "krole-test-<unique>."). The topic exists already, compacted, with
	// Options.Partitions partitions and replication factor 1.
	Config fencing.Config
	// Fake is the embedded cluster, for its control hooks (fault
	// injection, coordinator placement); nil when KROLE_BROKERS names an
	// outside cluster. It is closed when the test ends.
	Fake *devcluster.Cluster
}

// Options of [Start].
type Options struct {
	// Nodes is the number of brokers of the embedded cluster; ignored for
	// an outside cluster. Default 1.
	Nodes int
	// Partitions is the number of partitions of the role topic. Default 3.
	Partitions int32
	// BrokerConfigs are broker settings of the embedded cluster (see
	// devcluster.Options.BrokerConfigs); ignored for an outside cluster,
	// whose settings the test cannot change. Default none.
	BrokerConfigs map[string]string
	// Faults, when set, puts this faultnet.Net between every client and
	// every broker of the embedded cluster (see [StartFaulty]); it is
	// closed when the test ends. Ignored for an outside cluster. Default
	// nil.
	Faults *faultnet.Net
	// MaxVersions, when set, caps the maximum request versions the
	// embedded cluster advertises and accepts (kfake.MaxVersions), so a
	// test runs as against that broker ([RealBrokers] has the tables of
	// Apache Kafka 3.0 and 4.0 and of Redpanda). Ignored for an outside
	// cluster, whose versions are its own. Default nil: the table
	// [VersionsEnv] names, else kfake's own.
	MaxVersions *kversion.Versions
}

var seq atomic.Int64

// External reports whether KROLE_BROKERS names an outside cluster, that
// is, whether [Start] will use it rather than start kfake.
func External() bool { return os.Getenv("KROLE_BROKERS") != "" }

// Start returns a cluster for t, with a compacted role topic of its own.
// It blocks until the topic shows in the cluster's metadata (30 s at
// most), and fails t (t.Fatalf) when the embedded cluster does not start or the
// topic cannot be created. The embedded cluster, if any, is closed by
// t.Cleanup; the topic is not deleted.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if opts.Partitions <= 0 {
		opts.Partitions = 3
	}
	n := seq.Add(1)
	name := fmt.Sprintf("krole-test-%d-%d-%d", os.Getpid(), time.Now().UnixNano()%1e6, n)
	cfg := fencing.Config{Topic: name + ".roles", TxnPrefix: name + "."}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := &Cluster{}
	if b := os.Getenv("KROLE_BROKERS"); b != "" {
		cfg.Brokers = strings.Split(b, ",")
	} else {
		dopts := devcluster.Options{Nodes: opts.Nodes, BrokerConfigs: opts.BrokerConfigs}
		if opts.Faults != nil {
			dopts.WrapListener = opts.Faults.Wrap
		}
		if opts.MaxVersions == nil {
			v, err := versionsFromEnv()
			if err != nil {
				t.Fatalf("%v", err)
			}
			opts.MaxVersions = v
		}
		if opts.MaxVersions != nil {
			dopts.Extra = append(dopts.Extra, kfake.MaxVersions(opts.MaxVersions))
		}
		fake, err := devcluster.Start(ctx, dopts)
		if err != nil {
			t.Fatalf("start embedded cluster: %v", err)
		}
		t.Cleanup(fake.Close)
		if opts.Faults != nil {
			// Registered after fake.Close, so it runs first: held
			// requests are dropped and the connections end before the
			// brokers stop.
			t.Cleanup(func() { _ = opts.Faults.Close() })
		}
		c.Fake = fake
		cfg.Brokers = fake.ListenAddrs()
	}
	// KROLE_TEST_PIPELINE sets the transports' Pipeline (make
	// test-pipeline runs the succession suites with "on": every commit
	// that can go behind its produce does).
	cfg.Pipeline = os.Getenv("KROLE_TEST_PIPELINE")
	c.Config = cfg.WithDefaults()
	if err := devcluster.CreateTopic(ctx, c.Config, opts.Partitions, 1); err != nil {
		t.Fatalf("create role topic: %v", err)
	}
	return c
}

// StartFaulty is [Start] on the embedded cluster with a new faultnet.Net
// between every client and every broker, which it returns for the test
// to set rules on (hold, drop, partition). It skips t when KROLE_BROKERS
// names an outside cluster, where faultnet cannot sit.
func StartFaulty(t testing.TB, opts Options) (*Cluster, *faultnet.Net) {
	t.Helper()
	if External() {
		t.Skip("needs faultnet in front of the embedded cluster; KROLE_BROKERS names an outside cluster")
	}
	opts.Faults = faultnet.New()
	return Start(t, opts), opts.Faults
}

// RequireFake skips t when the suite runs against an outside cluster and the
// test needs the embedded one (to inject faults, place coordinators, or
// rely on kfake's timing). It returns only when c.Fake is set.
func (c *Cluster) RequireFake(t testing.TB) {
	t.Helper()
	if c.Fake == nil {
		t.Skip("needs the embedded cluster's control hooks; KROLE_BROKERS names an outside cluster")
	}
}
