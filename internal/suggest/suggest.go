// Package suggest names the word a user most likely meant when a command
// or flag name is misspelt: "did you mean ...?".
package suggest

import "strings"

// Closest returns the candidate nearest to s when it is near enough to be
// a likely typo (edit distance at most 2, or a prefix), else "".
func Closest(s string, candidates []string) string {
	if len(s) >= 3 {
		for _, c := range candidates {
			if strings.HasPrefix(c, s) {
				return c
			}
		}
	}
	best, bestD := "", 3
	for _, c := range candidates {
		if d := EditDistance(s, c); d < bestD && d < len(c) {
			best, bestD = c, d
		}
	}
	return best
}

// EditDistance is the Levenshtein distance between a and b, in bytes.
func EditDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
