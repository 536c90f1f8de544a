package chaos

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/faultnet"
)

// errDropped is what a drop control returns: kfake closes the connection.
var errDropped = errors.New("chaos: connection dropped")

// The request keys faults target, and the error codes real brokers
// answer each with.
var faultKeys = []struct {
	key      kmsg.Key
	topLevel bool
	codes    []*kerr.Error
}{
	{kmsg.InitProducerID, true, []*kerr.Error{kerr.ConcurrentTransactions, kerr.NotCoordinator, kerr.CoordinatorLoadInProgress}},
	{kmsg.AddPartitionsToTxn, false, []*kerr.Error{kerr.ConcurrentTransactions, kerr.NotCoordinator, kerr.CoordinatorLoadInProgress}},
	{kmsg.EndTxn, true, []*kerr.Error{kerr.ConcurrentTransactions, kerr.NotCoordinator, kerr.CoordinatorLoadInProgress}},
	{kmsg.Produce, false, []*kerr.Error{kerr.NotEnoughReplicas, kerr.InvalidProducerEpoch, kerr.NotLeaderForPartition}},
	{kmsg.Fetch, false, []*kerr.Error{kerr.NotLeaderForPartition, kerr.UnknownServerError}},
}

// clientIDOf is the prefix of the client ids of member's process: its
// transport's, which the driver passes it (-client-id), and its view's,
// which add to it. The dot ends the name, so that no member's prefix is
// another's.
func clientIDOf(member string) string { return clientIDPrefix + member + "." }

// clientIDPrefix begins the client id of every member's connections.
const clientIDPrefix = "chaos-"

// inject picks a fault at random and injects it. A fault that lasts
// (a stopped or killed member, an error, delay or drop window, a removed
// node) is undone on its own goroutine, which pending tracks.
func (d *driver) inject(pending *sync.WaitGroup) {
	r := d.rnd
	lease := d.cfg.Lease
	span := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(r.Int64N(int64(hi-lo)+1)) }
	n := r.IntN(100)
	switch d.cfg.Only {
	case "member":
		n = n * 45 / 100
	case "request":
		n = 45 + n*35/100
	case "cluster":
		n = 80 + n*20/100
	}
	switch {
	case n < 45: // a member fault
		var free []*proc
		busy := 0
		for _, m := range d.members {
			m.mu.Lock()
			if m.busy {
				busy++
			} else {
				free = append(free, m)
			}
			m.mu.Unlock()
		}
		if busy >= 2 || len(free) == 0 { // keep three members up
			return
		}
		// Three times in four, a member that holds a role now (by the
		// event logs), so that most member faults cause a failover.
		if holders := d.holders(free); len(holders) > 0 && r.IntN(4) > 0 {
			free = holders
		}
		m := free[r.IntN(len(free))]
		m.mu.Lock()
		m.busy = true
		m.mu.Unlock()
		start := now()
		off := d.offset()
		switch k := r.IntN(5); k {
		case 4:
			d.crashMidHeartbeat(m, span(lease/2, 3*lease), off, pending)
		case 0:
			down := span(lease/2, 3*lease)
			m.signal(syscall.SIGKILL)
			d.logf("kill %s, restart in %s", m.name, down)
			pending.Go(func() {
				m.mu.Lock()
				done := m.done
				m.mu.Unlock()
				<-done
				time.Sleep(down)
				d.record(Fault{Kind: FaultKill, Target: m.name, Start: start, End: now()})
				d.restart(m, off)
			})
		case 1:
			held := span(lease+lease/4, 2*lease)
			m.signal(syscall.SIGSTOP)
			d.logf("stop %s for %s", m.name, held)
			pending.Go(func() {
				time.Sleep(held)
				m.signal(syscall.SIGCONT)
				d.record(Fault{Kind: FaultStop, Target: m.name, Start: start, End: now()})
				m.mu.Lock()
				m.busy = false
				m.mu.Unlock()
			})
		case 2:
			// Cut off both ways while it runs on, longer than a lease
			// (as a stop is), so that every role it holds fails over;
			// what it sent meanwhile is delivered at the heal
			// (faultnet.DeliverOnClose), under the token it held then.
			cut := span(lease+lease/4, 2*lease)
			heal := d.net.Partition(clientIDOf(m.name))
			d.logf("partition %s for %s", m.name, cut)
			pending.Go(func() {
				time.Sleep(cut)
				heal()
				d.record(Fault{Kind: FaultPartition, Target: m.name, Start: start, End: now()})
				m.mu.Lock()
				m.busy = false
				m.mu.Unlock()
			})
		default:
			d.logf("restart %s", m.name)
			pending.Go(func() {
				m.stop(5 * time.Second)
				d.record(Fault{Kind: FaultRestart, Target: m.name, Start: start, End: now()})
				d.restart(m, off)
			})
		}
	case n < 75: // a request key answered with an error, delayed or dropped
		fk := faultKeys[r.IntN(len(faultKeys))]
		how := r.IntN(3)
		dur := span(100*time.Millisecond, lease)
		start := now()
		switch how {
		case 0:
			code := fk.codes[r.IntN(len(fk.codes))]
			f := kfake.Fault{Keys: []kmsg.Key{fk.key}, Err: code, Count: -1, TopLevel: fk.topLevel}
			if fk.key == kmsg.Produce {
				// Not the driver's own input: only krole's writes.
				f.When = func(req kmsg.Request) bool {
					for _, t := range req.(*kmsg.ProduceRequest).Topics {
						if t.Topic == inTopic {
							return false
						}
					}
					return true
				}
			}
			h := d.cl.Fault(f)
			d.logf("error %s on %s for %s", code.Message, fk.key.Name(), dur)
			pending.Go(func() {
				time.Sleep(dur)
				h.Remove()
				d.record(Fault{Kind: FaultError, Detail: fmt.Sprintf("%s %s (%d answered)", fk.key.Name(), code.Message, h.Hits()), Start: start, End: now()})
			})
		case 1:
			hold := span(50*time.Millisecond, d.cfg.RequestTimeout*3/2)
			var active atomic.Bool
			active.Store(true)
			d.cl.ControlKey(int16(fk.key), func(kmsg.Request) (kmsg.Response, error, bool) {
				if !active.Load() {
					d.cl.DropControl()
					return nil, nil, false
				}
				d.cl.SleepControl(func() { time.Sleep(hold) })
				return nil, nil, false
			})
			d.logf("delay %s by %s for %s", fk.key.Name(), hold, dur)
			pending.Go(func() {
				time.Sleep(dur)
				active.Store(false)
				// The last request held is answered hold later.
				d.record(Fault{Kind: FaultDelay, Detail: fmt.Sprintf("%s by %s", fk.key.Name(), hold), Start: start, End: now() + hold.Milliseconds()})
			})
		default:
			var active atomic.Bool
			active.Store(true)
			d.cl.ControlKey(int16(fk.key), func(kmsg.Request) (kmsg.Response, error, bool) {
				if !active.Load() {
					d.cl.DropControl()
					return nil, nil, false
				}
				d.cl.KeepControl()
				return nil, errDropped, true
			})
			d.logf("drop %s for %s", fk.key.Name(), dur)
			pending.Go(func() {
				time.Sleep(dur)
				active.Store(false)
				d.record(Fault{Kind: FaultDrop, Detail: fk.key.Name(), Start: start, End: now()})
			})
		}
	case n < 80:
		// A stall: every Produce of the members, on every broker, held back
		// once, for about a second, shorter than the heartbeat deadline
		// (HeartbeatDeadline, 4/5 of the lease): the requests that arrive while
		// it lasts (and those behind them on their connections) are
		// delivered at its end, those the client gave up on too. The
		// driver's own input (client id "kgo") is not held.
		hold := span(lease*3/10, lease/2)
		start := now()
		held := d.net.Hold(faultnet.Rule{APIKey: int16(kmsg.Produce), Node: faultnet.AnyNode, ClientID: clientIDPrefix})
		d.logf("stall every member's Produce for %s", hold)
		pending.Go(func() {
			time.Sleep(hold)
			held.Release()
			d.record(Fault{Kind: FaultStall, Detail: fmt.Sprintf("Produce held %s (%d requests)", hold, held.Count()), Start: start, End: now()})
		})
	default: // a cluster operation
		start := now()
		switch k := r.IntN(4); k {
		case 0:
			d.cl.RehashCoordinators()
			d.logf("RehashCoordinators")
			d.record(Fault{Kind: FaultCluster, Detail: "RehashCoordinators", Start: start, End: now()})
		case 1:
			topics := []string{roleTopic, outTopic, inTopic, streamOut}
			t := topics[r.IntN(len(topics))]
			p := r.Int32N(topicParts[t])
			node := d.liveNode()
			err := d.cl.MoveTopicPartition(t, p, node)
			d.logf("MoveTopicPartition %s/%d to %d (err %v)", t, p, node, err)
			d.record(Fault{Kind: FaultCluster, Detail: fmt.Sprintf("MoveTopicPartition %s/%d to %d", t, p, node), Start: start, End: now()})
		case 2:
			d.cl.ShufflePartitionLeaders()
			d.logf("ShufflePartitionLeaders")
			d.record(Fault{Kind: FaultCluster, Detail: "ShufflePartitionLeaders", Start: start, End: now()})
		default:
			d.faultMu.Lock()
			anyAway := len(d.away) > 0 || len(d.nodes)-len(d.away) < 3
			d.faultMu.Unlock()
			if anyAway {
				return // one node away at a time
			}
			node := d.liveNode()
			if err := d.cl.RemoveNode(node); err != nil {
				d.logf("RemoveNode %d: %v", node, err)
				return
			}
			d.faultMu.Lock()
			d.away[node] = true
			d.faultMu.Unlock()
			away := span(lease/2, 2*lease)
			d.logf("RemoveNode %d, another node in %s", node, away)
			pending.Go(func() {
				time.Sleep(away)
				// A new node, with a new id and port: kfake keeps a
				// removed node's connections open and answering, and
				// clients that find the same id at the same address
				// again stay on those (sarama's consumer stalls, kgo's
				// produce hangs), which no real broker does.
				id, port, err := d.cl.AddNode(-1, 0)
				d.record(Fault{Kind: FaultCluster, Detail: fmt.Sprintf("RemoveNode %d, AddNode %d on port %d (err %v)", node, id, port, err), Start: start, End: now()})
				d.faultMu.Lock()
				delete(d.away, node)
				if err == nil {
					d.nodes = append(d.nodes, id)
				}
				d.faultMu.Unlock()
			})
		}
	}
}

// midHeartbeat is the Detail of a kill mid-heartbeat.
const midHeartbeat = " mid-heartbeat"

// crashMidHeartbeat SIGKILLs m while a transaction of its member session
// is open: the next EndTxn of m's session transactional id that reaches
// its coordinator (a heartbeat's commit, after its record was produced)
// is not processed; m is killed and the request's connection closed
// instead. The transaction stays open, holding back the readers of the
// session's partition of the role topic (and every role's lease there)
// until the coordinator aborts it at the transaction timeout. The fault
// is recorded as a kill (Detail "mid-heartbeat"), from the SIGKILL, and
// m starts again down later. If m sends no session EndTxn within three
// leases (it is not in a session yet, say), the fault is abandoned and
// nothing is recorded.
func (d *driver) crashMidHeartbeat(m *proc, down, off time.Duration, pending *sync.WaitGroup) {
	tid := fencing.Config{TxnPrefix: txnPrefix}.SessionTransactionalID(codec.MemberID(m.name))
	const (
		armed = iota
		fired
		abandoned
	)
	var state atomic.Int32
	var killedAt atomic.Int64
	killed := make(chan struct{})
	m.mu.Lock()
	done := m.done
	m.mu.Unlock()
	d.cl.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if state.Load() == abandoned {
			d.cl.DropControl()
			return nil, nil, false
		}
		if req.(*kmsg.EndTxnRequest).TransactionalID != tid || !state.CompareAndSwap(armed, fired) {
			return nil, nil, false
		}
		m.signal(syscall.SIGKILL)
		killedAt.Store(now())
		close(killed)
		return nil, errDropped, true // the connection closes; the EndTxn is never processed
	})
	d.logf("crash %s mid-heartbeat (SIGKILL at its session's next EndTxn), restart in %s", m.name, down)
	pending.Go(func() {
		select {
		case <-killed:
		case <-time.After(3 * d.cfg.Lease):
			if state.CompareAndSwap(armed, abandoned) {
				d.logf("crash %s mid-heartbeat: no session EndTxn within %s; abandoned", m.name, 3*d.cfg.Lease)
				m.mu.Lock()
				m.busy = false
				m.mu.Unlock()
				return
			}
			<-killed
		}
		<-done
		time.Sleep(down)
		d.record(Fault{Kind: FaultKill, Target: m.name, Detail: midHeartbeat, Start: killedAt.Load(), End: now()})
		d.restart(m, off)
	})
}

// liveNode is a node of the cluster now (not removed), at random.
func (d *driver) liveNode() int32 {
	d.faultMu.Lock()
	defer d.faultMu.Unlock()
	var live []int32
	for _, n := range d.nodes {
		if !d.away[n] && n != d.ctrl {
			live = append(live, n)
		}
	}
	return live[d.rnd.IntN(len(live))]
}

// restart starts m again after a kill or restart, with clock offset off,
// and frees it.
func (d *driver) restart(m *proc, off time.Duration) {
	if err := d.start(m, off); err != nil {
		d.logf("starting %s again: %v", m.name, err)
	}
	m.mu.Lock()
	m.busy = false
	m.mu.Unlock()
}

func (d *driver) logf(format string, args ...any) {
	fmt.Fprintf(d.cfg.Log, "%s %s\n", stamp(now()), fmt.Sprintf(format, args...))
}

// holders are the members of ms that hold a role now, by their event logs.
func (d *driver) holders(ms []*proc) []*proc {
	var h History
	for _, m := range ms {
		evs, _ := ReadEvents(m.events)
		h.Events = append(h.Events, evs...)
	}
	open := map[string]bool{}
	for _, hd := range holdings(h) {
		if hd.until > now() {
			open[hd.member] = true
		}
	}
	var out []*proc
	for _, m := range ms {
		if open[m.name] {
			out = append(out, m)
		}
	}
	return out
}
