package check

import "github.com/krabka/krole/codec"

// WithScratch returns o with role as the scratch role of the run.
func WithScratch(o Options, role codec.Role) Options {
	o.scratch = role
	return o
}
