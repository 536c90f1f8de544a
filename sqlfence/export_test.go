package sqlfence

// WithoutCheck makes the Fence let every holding through, whatever the row
// holds: the mutant that shows the tests catch a missing check.
func WithoutCheck() Option { return func(c *config) { c.check = false } }

// WithOnRetry calls fn with each conflict that Do retries before fn runs.
func WithOnRetry(fn func(error)) Option { return func(c *config) { c.onRetry = fn } }

// IsConflict exposes isConflict.
var IsConflict = isConflict
