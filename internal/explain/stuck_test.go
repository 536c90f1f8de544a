package explain

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/krabka/krole/internal/render"
)

// TestViewStuckSaysWhatItSaw: the words for each cause.
func TestViewStuckSaysWhatItSaw(t *testing.T) {
	at := time.Date(2026, 12, 3, 10, 0, 0, 0, time.Local)
	e := &ViewStuck{Topic: "krole.roles", Brokers: []string{"k1:9092", "k2:9092"}, Timeout: 3 * time.Second}
	assert.Equal(t, "no answer from the brokers at k1:9092,k2:9092 within --timeout 3s ("+SilentBroker+")", e.Error())
	e.LastAnswer = at
	assert.Equal(t, "the view did not catch up with topic krole.roles within --timeout 3s, though the brokers answer (last at "+
		render.Clock(at)+")", e.Error())
	e.Open = []PartitionEnds{{Partition: 2, LSO: 40, HWM: 43}}
	assert.Equal(t, "the view did not catch up with topic krole.roles within --timeout 3s, though the brokers answer (last at "+
		render.Clock(at)+"): a transaction open in partition 2 since offset 40 (its high watermark is 43) holds read_committed "+
		"readers back until it commits, aborts or times out", e.Error())
}
