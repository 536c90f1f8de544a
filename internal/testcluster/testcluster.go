// Package testcluster gives integration tests a Kafka-protocol cluster over
// TCP: the one KROLE_BROKERS names when it is set (so the suite runs against
// Apache Kafka or Redpanda), or an embedded kfake cluster started for the
// test and closed when it ends.
package testcluster

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/devcluster"
)

// Cluster is what a test gets: a config naming a fresh topic and a fresh
// transactional-id prefix (so tests never see each other's roles), and the
// embedded cluster when there is one (nil for an external cluster).
type Cluster struct {
	Config fencing.Config
	Fake   *devcluster.Cluster
}

// Options of [Start].
type Options struct {
	Nodes      int   // brokers of the embedded cluster; default 1
	Partitions int32 // partitions of the role topic; default 3
	// BrokerConfigs for the embedded cluster only.
	BrokerConfigs map[string]string
}

var seq atomic.Int64

// External reports whether KROLE_BROKERS names an outside cluster.
func External() bool { return os.Getenv("KROLE_BROKERS") != "" }

// Start returns a cluster for t, with a compacted role topic of its own.
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
		fake, err := devcluster.Start(ctx, devcluster.Options{Nodes: opts.Nodes, BrokerConfigs: opts.BrokerConfigs})
		if err != nil {
			t.Fatalf("start embedded cluster: %v", err)
		}
		t.Cleanup(fake.Close)
		c.Fake = fake
		cfg.Brokers = fake.ListenAddrs()
	}
	c.Config = cfg.WithDefaults()
	if err := devcluster.CreateTopic(ctx, c.Config, opts.Partitions, 1); err != nil {
		t.Fatalf("create role topic: %v", err)
	}
	return c
}

// RequireFake skips t when the suite runs against an outside cluster and the
// test needs the embedded one (to inject faults or place coordinators).
func (c *Cluster) RequireFake(t testing.TB) {
	t.Helper()
	if c.Fake == nil {
		t.Skip("needs the embedded cluster's control hooks; KROLE_BROKERS names an outside cluster")
	}
}
