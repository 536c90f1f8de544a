package suggest

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestEditDistanceAndClosest(t *testing.T) {
	require.Equal(t, 0, EditDistance("a", "a"))
	require.Equal(t, 1, EditDistance("records", "recrds"))
	require.Equal(t, 2, EditDistance("recrods", "records"))
	assert.Equal(t, "records", Closest("recrods", []string{"register", "records"}))
	assert.Equal(t, "", Closest("zzzzzz", []string{"register", "records"}))
	assert.Equal(t, "describe", Closest("desc", []string{"describe", "dev"}))
}
