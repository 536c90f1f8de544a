package processor_test

// Succession benchmarks: Members wired to the real view and BrokerTransport
// against the embedded kfake cluster (or KROLE_BROKERS), over TCP. They
// measure wall-clock time from a cause to the Elected event that ends it,
// as the member's OnEvent receives it (so the new lease is committed).
// Setup and teardown are outside the timer. Run them with a small
// -benchtime, for example:
//
//	go test -run '^$' -bench Succession -benchtime 5x ./processor/
//
// See docs/BENCHMARKS.md for figures and what dominates each one.

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/processor"
	"github.com/krabka/krole/rolestate"
)

// viewWarmup is how long a new view is given after its first catch-up
// before a benchmark relies on its latency: for a partition that held no
// record, the view's consumer may still be opening its connection when the
// first catch-up returns, and a record committed then reaches the table a
// round trip or two late (docs/DESIGN.md, "The view: catching up"). It
// affects a view's first moments only; 300ms leaves a wide margin.
const viewWarmup = 300 * time.Millisecond

// elections returns an OnEvent that sends every Elected event on ch.
func elections(ch chan<- stamped) func(processor.Event) {
	return func(ev processor.Event) {
		if ev.Kind == processor.Elected {
			ch <- stamped{Event: ev, Got: time.Now()}
		}
	}
}

// reportElections makes a node's members report their Elected events on
// ch (and nothing to the recorder).
func reportElections(ch chan<- stamped) nodeOption {
	return withOptions(func(o *processor.Options) { o.OnEvent = elections(ch) })
}

func waitElected(b *testing.B, ch <-chan stamped, d time.Duration) stamped {
	b.Helper()
	select {
	case ev := <-ch:
		return ev
	case <-time.After(d):
		b.Fatalf("no Elected within %v", d)
	}
	panic("unreachable")
}

// A member that registers for a role nobody holds and takes it: from Run
// to Elected. Each iteration is a new role (a new member on the same
// transport and view), so every acquire is uncontended: one registration
// (a plain append), one InitProducerId, one lease transaction
// (AddPartitionsToTxn, Produce, EndTxn).
func BenchmarkSuccessionAcquire(b *testing.B) {
	e := newEnv(b, itTxnTimeout)
	ch := make(chan stamped, 1)
	n := e.node("node-a", reportElections(ch))
	time.Sleep(viewWarmup) // no record to wait for: the topic is empty
	s := itSettings()
	s.KeepOnExit = true // leaving writes nothing: teardown stays cheap
	var worst time.Duration
	var phases [len(acquirePhases)]time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		role := codec.Role(fmt.Sprintf("acquire-%d", i))
		e.member(n, []codec.Role{role}, s)
		start := time.Now()
		b.StartTimer()
		n.run(nil)
		ev := waitElected(b, ch, 10*time.Second)
		b.StopTimer()
		worst = max(worst, ev.Got.Sub(start))
		for j, d := range e.rec.acquisition(role, ev, start) {
			phases[j] += d
		}
		n.stop(b)()
	}
	b.ReportMetric(float64(worst.Microseconds())/1000, "max-ms")
	for j, name := range acquirePhases {
		b.ReportMetric(float64(phases[j].Microseconds())/1000/float64(b.N), name+"-ms/op")
	}
}

// acquirePhases name the parts of an uncontended acquire, in order:
//
//	start:    from Run to the Register call (goroutine start, the view's
//	          Follow and lookup);
//	register: the registration's append;
//	decide:   from its ack to the AcquireEpoch call;
//	epoch:    the InitProducerId round trip;
//	lease:    from the token to the lease transaction's ack
//	          (AddPartitionsToTxn, Produce, EndTxn);
//	event:    from the ack to the Elected event's receipt.
var acquirePhases = [...]string{"start", "register", "decide", "epoch", "lease", "event"}

// acquisition splits an acquire of role (Run called at start, ending with
// el) into acquirePhases.
func (r *recorder) acquisition(role codec.Role, el stamped, start time.Time) [len(acquirePhases)]time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	var reg, lease write
	for _, w := range r.registers {
		if w.Role == role {
			reg = w
			break
		}
	}
	for _, w := range r.writes {
		if w.Role == role && w.Token == el.Token {
			lease = w
			break
		}
	}
	var acq acquire
	for _, a := range r.acquires {
		if a.Role == role && a.Token == el.Token {
			acq = a
		}
	}
	return [...]time.Duration{
		reg.Start.Sub(start), reg.End.Sub(reg.Start), acq.Start.Sub(reg.End), acq.At.Sub(acq.Start),
		lease.End.Sub(acq.At), el.Got.Sub(lease.End),
	}
}

// The holder resigns (Member.Resign) with a second member waiting: from
// the Resign call to the second member's Elected. What it takes: the
// release transaction, the waiting member's view receiving it (the
// consumer's fetch is already waiting at the broker, which answers on the
// commit), one InitProducerId and one lease transaction. The members swap
// roles every iteration; between iterations (untimed) the one that
// resigned registers again and the other's view shows it.
func BenchmarkSuccessionHandover(b *testing.B) {
	e := newEnv(b, itTxnTimeout)
	role := codec.Role("handover")
	s := itSettings()
	type mem struct {
		n  *node
		ch chan stamped
	}
	ms := map[codec.MemberID]*mem{}
	for _, id := range []codec.MemberID{"node-a", "node-b"} {
		ch := make(chan stamped, 4)
		n := e.node(id, reportElections(ch))
		e.member(n, []codec.Role{role}, s)
		ms[id] = &mem{n: n, ch: ch}
	}
	// A member started on a view in its first moments may miss a lease
	// written meanwhile and challenge a live holder (safely, but it would
	// disturb the setup): warm the views first.
	time.Sleep(viewWarmup)
	ms["node-a"].n.run(nil)
	waitElected(b, ms["node-a"].ch, 10*time.Second)
	// node-b may start while its view has not yet shown node-a's lease: it
	// ranks itself only once its view shows its own registration, which
	// comes after that lease, so it does not challenge.
	ms["node-b"].n.run(nil)
	holder, other := codec.MemberID("node-a"), codec.MemberID("node-b")
	// resigned is when each member last resigned: it deregisters and
	// registers again after its release, and Resign may return before
	// that, so the next round waits for its new registration (without
	// that wait, a round could resign the holder while the other member
	// is between its deregistration and its new registration: the holder
	// is then the only candidate and takes the role back).
	resigned := map[codec.MemberID]time.Time{}
	registeredSince := func(m codec.MemberID, since time.Time) (int64, bool) {
		e.rec.mu.Lock()
		defer e.rec.mu.Unlock()
		off, ok := int64(-1), false
		for _, w := range e.rec.registers {
			if w.Role == role && w.Member == m && w.Start.After(since) {
				off, ok = w.Offset, true
			}
		}
		return off, ok
	}
	ready := func() {
		// Both views show both candidates (the other member's registration
		// made after its last resignation), and the holder's lease.
		await(b, 10*time.Second, "both members see each other", func() bool {
			off, ok := registeredSince(other, resigned[other])
			if !ok {
				return false
			}
			for _, m := range ms {
				st, err := m.n.src.Role(e.ctx(5*time.Second), role)
				require.NoError(b, err)
				if len(st.Candidates) != 2 || st.Lease == nil || st.Lease.Member != holder || st.Lease.Released() {
					return false
				}
				if !slices.ContainsFunc(st.Candidates, func(c rolestate.Candidate) bool { return c.Member == other && c.Offset == off }) {
					return false
				}
			}
			return true
		})
	}
	ready()
	var worst time.Duration
	// The phases of a handover, summed over the iterations (see
	// handoverPhases).
	var phases [len(handoverPhases)]time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		resigned[holder] = start
		require.NoError(b, ms[holder].n.m.Resign(e.ctx(10*time.Second), role))
		ev := waitElected(b, ms[other].ch, 10*time.Second)
		b.StopTimer()
		require.Equal(b, other, ev.Member)
		worst = max(worst, ev.Got.Sub(start))
		for j, d := range e.rec.handover(role, holder, ev, start) {
			phases[j] += d
		}
		holder, other = other, holder
		ready()
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(float64(worst.Microseconds())/1000, "max-ms")
	for j, name := range handoverPhases {
		b.ReportMetric(float64(phases[j].Microseconds())/1000/float64(b.N), name+"-ms/op")
	}
	e.rec.checkFence(b)
}

// handoverPhases name the parts of a graceful handover, in order:
//
//	release: from the Resign call to the release transaction's commit
//	         acknowledged (the resigning member stops and writes);
//	notice:  from then to the next member's AcquireEpoch call (its view
//	         receives the release and it decides); negative when the
//	         commit reaches the waiting view's fetch before the writer
//	         has read its own ack;
//	epoch:   the InitProducerId round trip;
//	lease:   from the token to the lease transaction's ack;
//	event:   from the ack to the Elected event's receipt.
var handoverPhases = [...]string{"release", "notice", "epoch", "lease", "event"}

// handover splits the handover from old to el (Resign called at start)
// into handoverPhases.
func (r *recorder) handover(role codec.Role, old codec.MemberID, el stamped, start time.Time) [len(handoverPhases)]time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	var rel, lease write
	for _, w := range r.writes {
		switch {
		case w.Role == role && w.Member == old && w.Lease.Released() && w.Start.After(start):
			rel = w
		case w.Role == role && w.Member == el.Member && w.Token == el.Token && lease.End.IsZero():
			lease = w
		}
	}
	var acq acquire
	for _, a := range r.acquires {
		if a.Role == role && a.Token == el.Token {
			acq = a
		}
	}
	return [...]time.Duration{
		rel.End.Sub(start), acq.Start.Sub(rel.End), acq.At.Sub(acq.Start),
		lease.End.Sub(acq.At), el.Got.Sub(lease.End),
	}
}

// The holder crashes (its context ends with KeepOnExit: it writes nothing
// and stops renewing) with a candidate waiting: from the crash to the
// candidate's Elected. By design this is the rest of the holder's lease
// (between LeaseDuration - HeartbeatInterval and LeaseDuration after the
// crash), then one InitProducerId and one lease transaction; the
// after-deadline metric is the part beyond the crashed holder's deadline.
// Every iteration starts a new candidate (a node with its own transport
// and view) and crashes the current holder.
func BenchmarkSuccessionCrashFailover(b *testing.B) {
	for _, lease := range []time.Duration{time.Second, 2 * time.Second} {
		b.Run(fmt.Sprintf("lease=%v", lease), func(b *testing.B) {
			s := processor.Settings{LeaseDuration: lease, KeepOnExit: true}.WithDefaults()
			e := newEnv(b, s.TransactionTimeout)
			role := codec.Role("failover")
			ch := make(chan stamped, 4)
			seq := 0
			start := func() (codec.MemberID, *node) {
				seq++
				id := codec.MemberID(fmt.Sprintf("node-%d", seq))
				n := e.node(id, reportElections(ch))
				e.member(n, []codec.Role{role}, s)
				since := time.Now().UnixMilli()
				n.run(nil)
				// Its view is past its first moments: it shows the
				// member's own registration and, when the role has a
				// holder, a heartbeat of the holder's session granted
				// since.
				await(b, 10*time.Second, fmt.Sprintf("%s sees itself as a candidate, and the holder live", id), func() bool {
					st, err := n.src.Role(e.ctx(5*time.Second), role)
					require.NoError(b, err)
					live := st.Lease == nil || st.Session != nil && !st.Session.Heartbeat.End && st.Session.Heartbeat.GrantedAt > since
					return st.Rank(id) >= 0 && live
				})
				return id, n
			}
			holderID, holder := start()
			waitElected(b, ch, 10*time.Second)
			var afterDeadline, worst time.Duration
			var phases [len(failoverPhases)]time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				nextID, next := start()
				// Crash at a random point of the renewal cycle.
				time.Sleep(rand.N(s.HeartbeatInterval))
				crashed := time.Now()
				b.StartTimer()
				holder.stop(b)()
				ev := waitElected(b, ch, 3*lease+10*time.Second)
				b.StopTimer()
				require.Equal(b, nextID, ev.Member)
				last, ok := e.rec.lastWrite(role, holderID)
				require.True(b, ok)
				deadline := time.UnixMilli(last.Lease.Deadline)
				afterDeadline += ev.Got.Sub(deadline)
				ph := e.rec.failover(role, ev, deadline)
				for j, d := range ph {
					phases[j] += d
				}
				if testing.Verbose() {
					b.Logf("elected %v after the crash, %v after the deadline %v", ev.Got.Sub(crashed).Round(time.Millisecond), ev.Got.Sub(deadline), ph)
				}
				worst = max(worst, ev.Got.Sub(crashed))
				holderID, holder = nextID, next
			}
			b.ReportMetric(float64(afterDeadline.Microseconds())/1000/float64(b.N), "after-deadline-ms/op")
			for j, name := range failoverPhases {
				b.ReportMetric(float64(phases[j].Microseconds())/1000/float64(b.N), name+"-ms/op")
			}
			b.ReportMetric(float64(worst.Microseconds())/1000, "max-ms")
			e.rec.checkFence(b)
		})
	}
}

// failoverPhases name the parts of a failover after the crashed holder's
// lease deadline, in order:
//
//	notice: from the deadline (its millisecond) to the candidate's
//	        AcquireEpoch call (its timer fires at the deadline);
//	epoch:  the InitProducerId round trip;
//	lease:  from the token to the lease transaction's ack;
//	event:  from the ack to the Elected event's receipt.
var failoverPhases = [...]string{"notice", "epoch", "lease", "event"}

// failover splits the part of a failover after the deadline into
// failoverPhases.
func (r *recorder) failover(role codec.Role, el stamped, deadline time.Time) [len(failoverPhases)]time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	var lease write
	for _, w := range r.writes {
		if w.Role == role && w.Token == el.Token {
			lease = w
			break
		}
	}
	var acq acquire
	for _, a := range r.acquires {
		if a.Role == role && a.Token == el.Token {
			acq = a
		}
	}
	return [...]time.Duration{acq.Start.Sub(deadline), acq.At.Sub(acq.Start), lease.End.Sub(acq.At), el.Got.Sub(lease.End)}
}

// One member takes 100 roles that nobody holds: from Run to the 100th
// Elected. Each role runs on its own goroutine, so the registrations,
// InitProducerIds and lease transactions of different roles overlap; the
// transport sends them over one connection per broker. Each iteration is a
// new set of roles.
func BenchmarkSuccessionManyRoles(b *testing.B) {
	const n = 100
	e := newEnv(b, itTxnTimeout)
	ch := make(chan stamped, n)
	s := itSettings()
	s.KeepOnExit = true
	var worst time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		// A member id of its own each time: a new process under the last
		// one's id would first watch its session, left behind by
		// KeepOnExit, for a lease of silence.
		nd := e.node(codec.MemberID(fmt.Sprintf("node-%d", i)), reportElections(ch))
		time.Sleep(viewWarmup) // no record to wait for: the topic is empty
		roles := make([]codec.Role, n)
		for j := range roles {
			roles[j] = codec.Role(fmt.Sprintf("many-%d-%03d", i, j))
		}
		e.member(nd, roles, s)
		start := time.Now()
		b.StartTimer()
		nd.run(nil)
		var got []codec.Role
		for range n {
			got = append(got, waitElected(b, ch, 30*time.Second).Role)
		}
		b.StopTimer()
		worst = max(worst, time.Since(start))
		slices.Sort(got)
		require.Equal(b, roles, got)
		nd.stop(b)()
	}
	b.ReportMetric(float64(worst.Microseconds())/1000, "max-ms")
}
