package cmdlog

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// The outage handler passes on warnings that are not about an outage, and
// shows a dial error, not sarama's sentence around it.
func TestUnreachableCause(t *testing.T) {
	c, ok := unreachableCause(errorString("view: probing the end of the role topic: leader of krole.roles/0: kafka: client has run out of available brokers to talk to: dial tcp 127.0.0.1:1: connect: connection refused"))
	assert.True(t, ok)
	assert.Equal(t, "dial tcp 127.0.0.1:1: connect: connection refused", c)
	_, ok = unreachableCause(errorString("fenced: another member holds role ctl"))
	assert.False(t, ok)
}

type errorString string

func (e errorString) Error() string { return string(e) }
