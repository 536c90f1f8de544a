package main

import (
	"context"
	"net"
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
	if err := d.createTopic(); err != nil {
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
