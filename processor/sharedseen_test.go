package processor

import (
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/rolestate"
)

// Roles reading the same session record share one copy of it; a record
// that differs in any field is another.
func TestSharedSeenSharesOnlyTheSameRecord(t *testing.T) {
	// sameSeen compares every field: a new one must be added there.
	assert.Equal(t, 3, reflect.TypeOf(rolestate.SessionSeen{}).NumField())
	assert.Equal(t, 9, reflect.TypeOf(codec.Heartbeat{}).NumField())

	m := &Member{}
	se := rolestate.SessionSeen{Offset: 7, SeenAt: t0, Heartbeat: codec.Heartbeat{Member: "a", GrantedAt: 1, Excluded: []codec.Role{"x"}}}
	p := m.sharedSeen("a", se)
	again := se
	again.Heartbeat.Excluded = []codec.Role{"x"}
	assert.Same(t, p, m.sharedSeen("a", again), "the same record, read again")
	other := again
	other.Heartbeat.Excluded = []codec.Role{"y"}
	assert.NotSame(t, p, m.sharedSeen("a", other))
	later := se
	later.SeenAt = t0.Add(time.Millisecond)
	assert.NotSame(t, p, m.sharedSeen("a", later))
	assert.Equal(t, later, *m.sharedSeen("a", later))
}
