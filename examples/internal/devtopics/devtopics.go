// Package devtopics creates the topics the examples read and write. It is
// not part of the patterns they show: it lets them run against `krole dev`,
// which creates only the role topic.
package devtopics

import (
	"errors"
	"fmt"

	"github.com/IBM/sarama"

	"github.com/krabka/krole/fencing"
)

// Create creates each topic in names that does not exist yet, with 3
// partitions, one replica and cleanup.policy=delete.
func Create(cfg fencing.Config, names ...string) error {
	sc, err := cfg.Sarama()
	if err != nil {
		return err
	}
	admin, err := sarama.NewClusterAdmin(cfg.Brokers, sc)
	if err != nil {
		return fmt.Errorf("connecting to %v: %w", cfg.Brokers, err)
	}
	defer admin.Close()
	del := "delete"
	for _, name := range names {
		err := admin.CreateTopic(name, &sarama.TopicDetail{
			NumPartitions: 3, ReplicationFactor: 1,
			ConfigEntries: map[string]*string{"cleanup.policy": &del},
		}, false)
		var te *sarama.TopicError
		if err != nil && !(errors.As(err, &te) && te.Err == sarama.ErrTopicAlreadyExists) {
			return fmt.Errorf("creating topic %s: %w", name, err)
		}
	}
	return nil
}
