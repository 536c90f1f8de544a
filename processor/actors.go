package processor

import (
	"runtime"
	"sync"
)

// actors bounds how many of a member's roles act at once on goroutines of
// their own while they do not hold: in a mass acquisition every role has
// something to do, most of it waiting for a call slot (limiter), and each
// goroutine would leave its record behind for good (the runtime keeps
// the records of exited goroutines for reuse). A role that finds every
// place taken waits its turn in a queue, without a goroutine; a goroutine
// whose role parks runs the next one queued.
//
// A held role, and every role once Run's context ended, never queues: the
// member session drops a held role whose runner does not check in, and a
// leaving role waits for the others to stop (session.awaitFinish), so
// close starts every role queued then on a goroutine of its own.
type actors struct {
	mu     sync.Mutex
	width  int
	busy   int       // places taken
	q      []*runner // waiting for a place, first come first served
	closed bool
}

// actorsWidth is how many roles act at once on the member's places: a few
// times its call slots, so that the limiter always has callers queued,
// and a few times the processors.
func actorsWidth(s Settings) int {
	return max(4*s.MaxInFlight, 4*runtime.GOMAXPROCS(0))
}

// run runs r's loop: on a place when one is free, queued for the next one
// otherwise, or on a goroutine of its own when r holds or is leaving.
// r.running is set; it never blocks.
func (a *actors) run(r *runner) {
	own := r.holds.Load() || r.ctx().Err() != nil
	a.mu.Lock()
	switch {
	case own || a.closed:
		a.mu.Unlock()
		go r.loop()
	case a.busy < a.width:
		a.busy++
		a.mu.Unlock()
		go a.serve(r)
	default:
		a.q = append(a.q, r)
		a.mu.Unlock()
	}
}

// serve runs r's loop on a place, then each queued role's in turn, until
// none is queued.
func (a *actors) serve(r *runner) {
	for r != nil {
		r.loop()
		r = a.next()
	}
}

// next takes the first queued role, or gives the place back.
func (a *actors) next() *runner {
	a.mu.Lock()
	defer a.mu.Unlock()
	r, ok := popFront(&a.q)
	if !ok {
		a.busy--
	}
	return r
}

// close makes every role act on a goroutine of its own from now on, the
// queued ones first (Run's context ended).
func (a *actors) close() {
	a.mu.Lock()
	a.closed = true
	q := a.q
	a.q = nil
	a.mu.Unlock()
	for _, r := range q {
		go r.loop()
	}
}
