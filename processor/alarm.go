package processor

import (
	"container/heap"
	"sync"
	"time"
)

// alarm keeps entries by the time each is due, on one timer set to the
// earliest. The member resumes its parked roles from one (a role is due at
// the end of its wait); the member session ends its holdings from another
// (a holding is due at its local deadline).
//
// Its methods are called with mu held. The timer takes mu to take the due
// entries out, lets it go, and hands them to fire. An entry taken out is
// out of the alarm until set again.
type alarm[T alarmed] struct {
	mu   sync.Locker
	clk  Clock
	fire func(due []T)

	q       alarmQ[T]
	timer   Timer
	timerAt time.Time
	gen     uint64 // a firing of an older timer is stale
}

// alarmed is an entry of an alarm: it keeps its own place.
type alarmed interface{ alarmAt() *alarmSlot }

// alarmSlot is an entry's place in its alarm: when it is due, and its
// index in the queue plus one (0: not queued).
type alarmSlot struct {
	at  mono
	idx int
}

// set queues x to be due at at, or moves it there. It returns the entries
// due already, taken out, for the caller to act on.
func (a *alarm[T]) set(x T, at time.Time) []T {
	s := x.alarmAt()
	s.at = monoOf(at)
	if s.idx > 0 {
		heap.Fix(&a.q, s.idx-1)
	} else {
		heap.Push(&a.q, x)
	}
	return a.arm()
}

// remove takes x out, if queued. The timer may then fire for nothing, and
// is set again.
func (a *alarm[T]) remove(x T) {
	if s := x.alarmAt(); s.idx > 0 {
		heap.Remove(&a.q, s.idx-1)
		if len(a.q) == 0 {
			a.stop()
		}
	}
}

// arm takes out the entries due, and sets the timer to the earliest left
// unless it is set as early already.
func (a *alarm[T]) arm() (due []T) {
	for len(a.q) > 0 {
		now := a.clk.Now()
		at := a.q[0].alarmAt().at.at(now)
		if !now.Before(at) {
			due = append(due, heap.Pop(&a.q).(T))
			continue
		}
		if a.timer != nil && !at.Before(a.timerAt) {
			return due // it fires earlier, and is set again then
		}
		a.stop()
		a.timerAt = at
		gen := a.gen
		a.timer = a.clk.AfterFunc(at.Sub(now), func() { a.fired(gen) })
		if a.clk.Now().Before(at) {
			return due
		}
		// The clock passed at while the timer was set, which then counts
		// from later: take the entry now instead.
		a.stop()
	}
	a.stop()
	return due
}

func (a *alarm[T]) stop() {
	if a.timer != nil {
		a.timer.Stop()
		a.timer = nil
	}
	a.gen++
}

// fired is the timer.
func (a *alarm[T]) fired(gen uint64) {
	a.mu.Lock()
	if gen != a.gen {
		a.mu.Unlock()
		return
	}
	a.timer = nil
	due := a.arm()
	a.mu.Unlock()
	if len(due) > 0 {
		a.fire(due)
	}
}

// alarmQ is the alarm's heap, by due time.
type alarmQ[T alarmed] []T

func (q alarmQ[T]) Len() int           { return len(q) }
func (q alarmQ[T]) Less(i, j int) bool { return q[i].alarmAt().at < q[j].alarmAt().at }
func (q alarmQ[T]) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].alarmAt().idx, q[j].alarmAt().idx = i+1, j+1
}

func (q *alarmQ[T]) Push(x any) {
	e := x.(T)
	e.alarmAt().idx = len(*q) + 1
	*q = append(*q, e)
}

func (q *alarmQ[T]) Pop() any {
	old := *q
	e := old[len(old)-1]
	var zero T
	old[len(old)-1] = zero
	e.alarmAt().idx = 0
	*q = old[:len(old)-1]
	return e
}

// wakeAt resumes r at until (unless unwake comes first), replacing the
// time it was to be resumed at. One resumed early or twice looks again
// and parks (runner.loop).
func (m *Member) wakeAt(r *runner, until time.Time) {
	m.wakeMu.Lock()
	due := m.wake.set(r, until)
	m.wakeMu.Unlock()
	resumeAll(due)
}

// unwake takes r out of the member's alarm: it is not resumed at its
// wait's end.
func (m *Member) unwake(r *runner) {
	m.wakeMu.Lock()
	m.wake.remove(r)
	m.wakeMu.Unlock()
}

func resumeAll(rs []*runner) {
	for _, r := range rs {
		r.resume()
	}
}

func (r *runner) alarmAt() *alarmSlot { return &r.wake }
