package fencing

import "context"

// LeaderMovedCodes exposes leaderMovedCodes to the tests.
var LeaderMovedCodes = leaderMovedCodes

// LogStart exposes logStart, the list-offsets path, to the tests.
func (t *BrokerTransport) LogStart(ctx context.Context, topic string, partition int32) (int64, error) {
	return t.logStart(ctx, topic, partition)
}
