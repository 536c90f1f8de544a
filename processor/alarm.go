package processor

import (
	"container/heap"
	"time"
)

// The parked roles' waits end on one timer per member: the roles queue by
// the end of their waits (wakeQ, a heap), and the timer is set to the
// earliest. At it every role whose wait has ended is resumed; one resumed
// early or twice looks again and parks (runner.loop).

// wakeQ is the heap of parked roles by runner.wake, under Member.wakeMu.
type wakeQ []*runner

func (q wakeQ) Len() int           { return len(q) }
func (q wakeQ) Less(i, j int) bool { return q[i].wake < q[j].wake }
func (q wakeQ) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].wakeIdx, q[j].wakeIdx = i+1, j+1
}

func (q *wakeQ) Push(x any) {
	r := x.(*runner)
	r.wakeIdx = len(*q) + 1
	*q = append(*q, r)
}

func (q *wakeQ) Pop() any {
	old := *q
	r := old[len(old)-1]
	old[len(old)-1] = nil
	r.wakeIdx = 0
	*q = old[:len(old)-1]
	return r
}

// wakeAt resumes r at until (unless unwake comes first), replacing the
// time it was to be resumed at.
func (m *Member) wakeAt(r *runner, until time.Time) {
	m.wakeMu.Lock()
	r.wake = monoOf(until)
	if r.wakeIdx > 0 {
		heap.Fix(&m.wakeQ, r.wakeIdx-1)
	} else {
		heap.Push(&m.wakeQ, r)
	}
	due := m.armWakeLocked(nil)
	m.wakeMu.Unlock()
	for _, d := range due {
		d.resume()
	}
}

// unwake takes r out of the queue: it is not resumed at its wait's end.
// The timer may then fire for nothing, and is set again.
func (m *Member) unwake(r *runner) {
	m.wakeMu.Lock()
	if r.wakeIdx > 0 {
		heap.Remove(&m.wakeQ, r.wakeIdx-1)
		if len(m.wakeQ) == 0 {
			m.stopWakeLocked()
		}
	}
	m.wakeMu.Unlock()
}

// armWakeLocked takes out the roles whose wait has ended, appending them
// to due (to resume once wakeMu is let go), and sets the timer to the
// earliest end left unless it is set as early already. wakeMu is held.
func (m *Member) armWakeLocked(due []*runner) []*runner {
	for len(m.wakeQ) > 0 {
		now := m.clk.Now()
		at := m.wakeQ[0].wake.at(now)
		if !now.Before(at) {
			due = append(due, heap.Pop(&m.wakeQ).(*runner))
			continue
		}
		if m.wakeTimer != nil && !at.Before(m.wakeTimerAt) {
			return due // it fires earlier, and is set again then
		}
		m.stopWakeLocked()
		m.wakeTimerAt = at
		gen := m.wakeGen
		m.wakeTimer = m.clk.AfterFunc(at.Sub(now), func() { m.wakeDue(gen) })
		return due
	}
	m.stopWakeLocked()
	return due
}

func (m *Member) stopWakeLocked() {
	if m.wakeTimer != nil {
		m.wakeTimer.Stop()
		m.wakeTimer = nil
	}
	m.wakeGen++ // a firing already under way is stale
}

// wakeDue is the timer: it resumes the roles whose wait has ended, and
// sets itself to the next end.
func (m *Member) wakeDue(gen uint64) {
	m.wakeMu.Lock()
	if gen != m.wakeGen {
		m.wakeMu.Unlock()
		return
	}
	m.wakeTimer = nil
	due := m.armWakeLocked(nil)
	m.wakeMu.Unlock()
	for _, r := range due {
		r.resume()
	}
}
