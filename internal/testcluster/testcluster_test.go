package testcluster

import (
	"testing"

	"github.com/IBM/sarama"
)

func TestStartCreatesCompactedTopic(t *testing.T) {
	c := Start(t, Options{Nodes: 3, Partitions: 4})
	sc, err := c.Config.Sarama()
	if err != nil {
		t.Fatal(err)
	}
	admin, err := sarama.NewClusterAdmin(c.Config.Brokers, sc)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	entries, err := admin.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: c.Config.Topic})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range entries {
		if e.Name == "cleanup.policy" {
			found = true
			if e.Value != "compact" {
				t.Fatalf("cleanup.policy = %q, want compact", e.Value)
			}
		}
	}
	if !found {
		t.Fatal("no cleanup.policy in topic config")
	}
}
