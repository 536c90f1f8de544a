package main

import (
	"context"
	"net"
	"os"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestAcquire: on an embedded cluster, a member of each round's empty
// group is assigned the topic's one partition, with and without the
// client's start in the time.
func TestAcquire(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(100*time.Millisecond),
		kfake.ListenFn(func(network, _ string) (net.Listener, error) { return net.Listen(network, "127.0.0.1:0") }))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	admin, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	d := &driver{ctx: context.Background(), admin: admin, brokers: c.ListenAddrs()[0], ttl: time.Second, topic: "t", group: "g"}
	if err := d.createTopic(1); err != nil {
		t.Fatal(err)
	}
	for i, withSession := range []bool{false, false, true, true} {
		took, err := d.acquire(i, withSession)
		if err != nil {
			t.Fatal(err)
		}
		if took <= 0 {
			t.Errorf("with session %v: took %v", withSession, took)
		}
	}
	if len(d.groupsUsed) != 4 {
		t.Errorf("groups %v, want one a round", d.groupsUsed)
	}
}

// TestBalance: on an embedded cluster, 3 members share 30 partitions;
// each scenario reaches a balanced assignment and moves at most every
// partition once, and the departed members' partitions find owners.
func TestBalance(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a session timeout and several rebalances")
	}
	const members, partitions = 3, 30
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	results, err := balance(ctx, balanceConfig{members: members, partitions: partitions, ttl: 600 * time.Millisecond, pause: 50 * time.Millisecond}, null)
	if err != nil {
		t.Fatal(err)
	}
	kinds := []string{"group start", "group join", "group leave", "group kill"}
	if len(results) != len(kinds) {
		t.Fatalf("%d results, want %d", len(results), len(kinds))
	}
	for i, r := range results {
		if r.Kind != kinds[i] {
			t.Errorf("result %d is %q, want %q", i, r.Kind, kinds[i])
		}
		rd := r.Rounds[0]
		if rd["balanced_ms"] <= 0 {
			t.Errorf("%s: balanced after %v ms", r.Kind, rd["balanced_ms"])
		}
		if rd["moved"] > partitions {
			t.Errorf("%s: moved %v of %d partitions", r.Kind, rd["moved"], partitions)
		}
		if i > 0 && (rd["moved"] < 1 || len(r.SamplesMS) < 1) {
			t.Errorf("%s: moved %v, %d unowned times, want some", r.Kind, rd["moved"], len(r.SamplesMS))
		}
		if sub, ok := rd["subject_partitions"]; ok {
			if sub < 1 || rd["moved"] != sub+rd["other_moved"] || rd["owned_ms"] <= 0 {
				t.Errorf("%s: the departed member's %v partitions, moved %v, other moved %v, owned after %v ms",
					r.Kind, sub, rd["moved"], rd["other_moved"], rd["owned_ms"])
			}
		}
	}
	if join := results[1].Rounds[0]; join["moved"] < partitions/(members+1) {
		t.Errorf("join moved %v, want at least the new member's share %d", join["moved"], partitions/(members+1))
	}
}
