package rolestate

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestAuthors: a producer id is settled once per role: minted or named by
// the coordinator, it is the role's own for good (also after the role's
// transactional id gets another one); one the coordinator did not name
// is not the role's; with no producer id at the coordinator, nothing is
// remembered (kfake gives an expired transactional id its old producer
// id back).
func TestAuthors(t *testing.T) {
	a := NewAuthors()
	assert.Equal(t, Unverified, a.Verdict("r", 7))
	a.Own("r", 7)
	assert.Equal(t, Own, a.Verdict("r", 7))
	assert.Equal(t, Unverified, a.Verdict("q", 7), "per role")
	assert.Equal(t, NotOwn, a.Learn("r", 9, 7), "the coordinator named another")
	assert.Equal(t, NotOwn, a.Verdict("r", 9))
	assert.Equal(t, Own, a.Learn("r", 11, 11), "a new producer id after expiry")
	assert.Equal(t, Own, a.Verdict("r", 7), "an own producer id stays own")
	assert.Equal(t, NotOwn, a.Learn("r", 12, -1))
	assert.Equal(t, Unverified, a.Verdict("r", 12), "no current producer id: not remembered")
	for pid := int64(100); pid < 100+maxNotOwn+1; pid++ {
		a.Learn("r", pid, 11)
	}
	assert.Equal(t, Own, a.Verdict("r", 11))
	assert.Equal(t, NotOwn, a.Verdict("r", 100+maxNotOwn), "the latest is remembered after the set is forgotten")
}
