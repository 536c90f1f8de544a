// Package processor holds the succession rules and the long-running member
// that runs them.
package processor
