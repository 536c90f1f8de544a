package testcluster

import (
	"testing"
)

func TestStartCreatesCompactedTopic(t *testing.T) {
	c := Start(t, Options{Nodes: 3, Partitions: 4})
	if got := cleanupPolicy(t, c, c.Config.Topic); got != "compact" {
		t.Fatalf("cleanup.policy = %q, want compact", got)
	}
}
