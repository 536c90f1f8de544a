package runner

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
)

// GroupRoles names the roles of every pattern in the order given, and
// refuses a role named twice and more than MaxGroupRoles in all.
func TestGroupRoles(t *testing.T) {
	roles, err := GroupRoles([]string{"s{08..10}", "hot"})
	require.NoError(t, err)
	assert.Equal(t, []codec.Role{"s08", "s09", "s10", "hot"}, roles)

	roles, err = GroupRoles([]string{"a-{0..511}", "b-{0..511}"})
	require.NoError(t, err)
	assert.Len(t, roles, MaxGroupRoles)

	_, err = GroupRoles([]string{"a-{0..511}", "b-{0..512}"})
	assert.EqualError(t, err, "--roles a-{0..511},b-{0..512} names more than 1024 roles, the most one krole run takes: "+
		"a member alone in the group runs a CMD for each (a larger group: package processor)")
	_, err = GroupRoles([]string{"s-{0..3}", "s-{3..4}"})
	assert.EqualError(t, err, `--roles: role s-3 is named twice (by "s-{0..3}" and by "s-{3..4}")`)
	_, err = GroupRoles(nil)
	assert.Error(t, err)
}
