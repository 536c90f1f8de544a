package bench

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// With KilledRoles the first member holds that many and the others share
// the rest; the shares tile the roles with no gap and no role twice.
func TestFailoverManyShare(t *testing.T) {
	o := FailoverManyOptions{Roles: 10300, Members: 4, KilledRoles: 10000}
	type span struct{ from, count int }
	var got []span
	for i := range o.Members {
		from, count := o.share(i)
		got = append(got, span{from, count})
	}
	assert.Equal(t, []span{{0, 10000}, {10000, 100}, {10100, 100}, {10200, 100}}, got)
	o.KilledRoles = 0
	from, count := o.share(3)
	assert.Equal(t, span{7725, 2575}, span{from, count}, "no KilledRoles: K/M each")
}
