package check

import (
	"time"

	"github.com/krabka/krole/codec"
)

// WithScratch returns o with role as the scratch role of the run.
func WithScratch(o Options, role codec.Role) Options {
	o.scratch = role
	return o
}

// WithClock returns o with now as the local clock the clock check reads.
func WithClock(o Options, now func() time.Time) Options {
	o.now = now
	return o
}
