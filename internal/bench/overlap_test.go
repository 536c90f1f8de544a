package bench

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/krabka/krole/codec"
)

func ev(kind string, role codec.Role, at int64) Line { return Line{Event: kind, Role: role, AtUS: at} }

// A member's holdings run from its Elected to its Revoked event; one it
// never saw end (a member SIGKILLed prints no Revoked) ends at the end
// given.
func TestHoldings(t *testing.T) {
	hs := Holdings("a", []Line{ev("elected", "r1", 10), ev("elected", "r2", 20), ev("revoked", "r1", 50),
		ev("revoked", "r3", 60), ev("elected", "r1", 70)}, 100)
	assert.ElementsMatch(t, []Holding{
		{Member: "a", Role: "r1", FromUS: 10, ToUS: 50},
		{Member: "a", Role: "r2", FromUS: 20, ToUS: 100},
		{Member: "a", Role: "r1", FromUS: 70, ToUS: 100},
	}, hs, "a Revoked of a role it was not seen to hold makes no holding")
}

func TestLongestOverlap(t *testing.T) {
	// The killed member holds r1 and r2 until it dies at 1,000; the
	// survivors take them after, one touching the death exactly.
	clean := append(Holdings("dead", []Line{ev("elected", "r1", 0), ev("elected", "r2", 0)}, 1000),
		Holdings("s1", []Line{ev("elected", "own1", 5), ev("elected", "r1", 1000), ev("elected", "r2", 1200)}, 9000)...)
	clean = append(clean, Holdings("s2", []Line{ev("elected", "own2", 5)}, 9000)...)
	ov, n := LongestOverlap(clean)
	assert.Zero(t, n, "one holder at a time: %+v", ov)
	assert.Zero(t, ov.US)

	// r2 won twice: s2 elected at 1,300 while s1 held it from 1,200, s1
	// revoked (fenced) at 1,450: 150 µs of two workers. r1: s2 held it
	// 990-995, before the dead member's end: 5 µs. A member's own two
	// holdings of one role are not an overlap.
	racy := append(clean,
		Holding{Member: "s2", Role: "r2", FromUS: 1300, ToUS: 9000},
		Holding{Member: "s2", Role: "r1", FromUS: 990, ToUS: 995},
		Holding{Member: "s1", Role: "own1", FromUS: 6, ToUS: 8})
	for i := range racy {
		if racy[i].Member == "s1" && racy[i].Role == "r2" {
			racy[i].ToUS = 1450
		}
	}
	ov, n = LongestOverlap(racy)
	assert.Equal(t, 2, n, "r1 and r2")
	assert.Equal(t, Overlap{Role: "r2", Members: [2]codec.MemberID{"s1", "s2"}, FromUS: 1300, US: 150}, ov)
}
