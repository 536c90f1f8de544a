package fencing

import (
	"crypto/sha256"
	"crypto/sha512"

	"github.com/IBM/sarama"
	"github.com/xdg-go/scram"
)

// scramClient adapts xdg-go/scram (the SCRAM library sarama's own examples
// use) to sarama.SCRAMClient.
type scramClient struct {
	hash scram.HashGeneratorFcn
	conv *scram.ClientConversation
}

func scramSHA256() sarama.SCRAMClient { return &scramClient{hash: sha256.New} }
func scramSHA512() sarama.SCRAMClient { return &scramClient{hash: sha512.New} }

func (s *scramClient) Begin(user, password, authzID string) error {
	c, err := s.hash.NewClient(user, password, authzID)
	if err != nil {
		return err
	}
	s.conv = c.NewConversation()
	return nil
}

func (s *scramClient) Step(challenge string) (string, error) { return s.conv.Step(challenge) }

func (s *scramClient) Done() bool { return s.conv.Done() }
