package view

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/lovoo/goka/storage"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/rolestate"
)

// The lease-author check's second half (see the package doc, "Who can
// write what"): a lease record that passes rolestate.CheckLeaseAuthor
// counts only when its producer id is the role's own, the one the role's
// transactional id has at its coordinator (rolestate.Authors). A producer
// id the view has not settled is asked about off the record-apply loop:
// the record waits in its role's entry (roleEntry.pending), as if not read
// yet, while the verifier asks the coordinator (DescribeTransactions on
// the role's transactional id, once per new (role, producer id)), and is
// then applied (own) or skipped as forged (not own). Lookups meanwhile
// show the role as it was before the record; Confirm and WaitCaughtUp
// wait for it.

// pendLease is a lease record waiting for its producer id's verdict.
type pendLease struct {
	off   int64
	lease codec.Lease
	key   string
	value []byte // the record's value as read, for the state dir
	dups  int64  // earlier records of the same producer id it replaced, which share its verdict
}

// pendKeyPrefix prefixes, in the state dir, the key of a role's latest
// lease record that waits for its producer id's verdict, so that a Run
// that ends before the verdict leaves it for the next one to verify
// (goka stores the partition's offset past it). It is no krole key, so
// nothing else reads it.
const pendKeyPrefix = "\x00krole-pending/"

// maxPend bounds the records a role keeps waiting (the latest of each
// producer id); past it the oldest is dropped.
const maxPend = 64

// verifier asks the coordinators about producer ids for the view.
type verifier struct {
	v       *View
	authors *rolestate.Authors
	mu      sync.Mutex
	queue   map[codec.Role]map[int64]struct{} // asked, not answered
	wake    chan struct{}                     // capacity 1
	denied  bool                              // the principal may not Describe a role's transactional id
	kept    uint64                            // leases applied unverified because Describe was denied

	tMu sync.Mutex
	t   *fencing.BrokerTransport // built at the first question when Options.Describe is nil
}

func newVerifier(v *View, a *rolestate.Authors) *verifier {
	if a == nil {
		a = rolestate.NewAuthors()
	}
	return &verifier{v: v, authors: a, queue: map[codec.Role]map[int64]struct{}{}, wake: make(chan struct{}, 1)}
}

// ask queues role's producer id pid for a verdict.
func (vf *verifier) ask(role codec.Role, pid int64) {
	vf.mu.Lock()
	q := vf.queue[role]
	if q == nil {
		q = map[int64]struct{}{}
		vf.queue[role] = q
	}
	q[pid] = struct{}{}
	vf.mu.Unlock()
	select {
	case vf.wake <- struct{}{}:
	default:
	}
}

// verifyWorkers is the number of roles asked about one at a time, at once.
const verifyWorkers = 4

// run answers the queue until ctx ends.
func (vf *verifier) run(ctx context.Context) {
	defer func() {
		vf.tMu.Lock()
		if vf.t != nil {
			_ = vf.t.Close()
		}
		vf.tMu.Unlock()
	}()
	pause := 100 * time.Millisecond
	for {
		select {
		case <-ctx.Done():
			return
		case <-vf.wake:
		}
		vf.mu.Lock()
		batch := vf.queue
		vf.queue = map[codec.Role]map[int64]struct{}{}
		vf.mu.Unlock()
		failed := vf.answer(ctx, batch)
		for r, err := range failed {
			vf.v.log.Warn("view cannot verify the authors of lease records yet; they wait, unapplied, and are asked about again",
				"role", string(r), "err", err, "in", pause)
			for pid := range batch[r] {
				vf.ask(r, pid)
			}
		}
		if len(failed) == 0 {
			pause = 100 * time.Millisecond
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
		pause = min(2*pause, 10*vf.v.opts.ReconnectBackoff)
	}
}

// answer settles batch's roles and returns those it could not ask about.
// Roles the view's own transport describes are asked about together
// (describeMany); sessions, roles of Options.Describe and any role without
// an answer there, one at a time.
func (vf *verifier) answer(ctx context.Context, batch map[codec.Role]map[int64]struct{}) map[codec.Role]error {
	var many, one []codec.Role
	for r, pids := range batch {
		if vf.v.opts.Describe == nil && r.Validate() == nil && !vf.known(r, pids) { // a session's key is no valid role
			many = append(many, r)
		} else {
			one = append(one, r)
		}
	}
	if len(many) > 1 {
		got := vf.describeMany(ctx, many)
		for _, r := range many {
			d, ok := got[r]
			if !ok {
				one = append(one, r)
				continue
			}
			cur := int64(-1)
			if d.Held {
				cur = d.Token.ProducerID
			}
			_ = vf.settle(ctx, r, batch[r], &cur)
		}
	} else {
		one = append(one, many...)
	}
	roles := make(chan codec.Role, len(one))
	for _, r := range one {
		roles <- r
	}
	close(roles)
	var wg sync.WaitGroup
	var mu sync.Mutex
	failed := map[codec.Role]error{}
	for range min(verifyWorkers, len(one)) {
		wg.Go(func() {
			for r := range roles {
				if err := vf.settle(ctx, r, batch[r], nil); err != nil {
					mu.Lock()
					failed[r] = err
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return failed
}

// known reports whether every producer id of pids has its verdict.
func (vf *verifier) known(role codec.Role, pids map[int64]struct{}) bool {
	for pid := range pids {
		if vf.authors.Verdict(role, pid) == rolestate.Unverified {
			return false
		}
	}
	return true
}

// settle hands the verdict on each of role's producer ids pids to the
// index, asking the coordinator (one Describe) when any is unsettled,
// unless current is the producer id it just answered (-1 for none).
func (vf *verifier) settle(ctx context.Context, role codec.Role, pids map[int64]struct{}, current *int64) error {
	for pid := range pids {
		verdict := vf.authors.Verdict(role, pid)
		if verdict == rolestate.Unverified {
			if current == nil {
				cur, err := vf.describe(ctx, role)
				if fencing.IsNotAuthorized(err) {
					vf.deny(role, err)
					vf.v.resolve(role, pid, rolestate.Own, true)
					continue
				}
				if err != nil {
					return err
				}
				current = &cur
			}
			verdict = vf.authors.Learn(role, pid, *current)
		}
		vf.v.resolve(role, pid, verdict, false)
	}
	return nil
}

// describeMany asks about roles with one DescribeTransactions to each
// broker, sent by the view's transport: a broker answers only for the
// roles it coordinates, so no coordinator is looked up. A role missing
// from the result got no answer, and is then asked about alone.
func (vf *verifier) describeMany(ctx context.Context, roles []codec.Role) map[codec.Role]fencing.Described {
	t, err := vf.transport()
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 2*vf.v.cfg.RequestTimeout)
	defer cancel()
	got, _ := t.DescribeAtEachBroker(ctx, roles)
	return got
}

// transport returns the view's own transport, built at its first use.
func (vf *verifier) transport() (*fencing.BrokerTransport, error) {
	vf.tMu.Lock()
	defer vf.tMu.Unlock()
	if vf.t == nil {
		t, err := fencing.NewBrokerTransport(vf.v.cfg)
		if err != nil {
			return nil, err
		}
		vf.t = t
	}
	return vf.t, nil
}

// deny notes that the principal may not Describe role's transactional id,
// logging it once.
func (vf *verifier) deny(role codec.Role, err error) {
	vf.mu.Lock()
	first := !vf.denied
	vf.denied = true
	vf.kept++
	vf.mu.Unlock()
	if first {
		vf.v.log.Warn("view cannot verify lease authors: the principal may not Describe the role's transactional id; "+
			"leases count by their record batch alone, so one committed under another transactional id would count (grant Describe on the TransactionalId prefix)",
			"role", string(role), "refused", err.Error()) // a string: not a refusal that stops a command (internal/cli's authzStop)
	}
}

// describe returns the producer id role's transactional id has at its
// coordinator, -1 for none.
func (vf *verifier) describe(ctx context.Context, role codec.Role) (int64, error) {
	d := vf.v.opts.Describe
	if d == nil {
		t, err := vf.transport()
		if err != nil {
			return -1, err
		}
		d = t.Describe
	}
	cctx, cancel := context.WithTimeout(ctx, 2*vf.v.cfg.RequestTimeout)
	defer cancel()
	tok, ok, err := d(cctx, role)
	if err != nil {
		return -1, err
	}
	if !ok {
		return -1, nil
	}
	return tok.ProducerID, nil
}

// resolve applies the verdict on role's producer id pid to the records of
// it that wait: own, the latest of them is applied now (unless a later
// lease was applied meanwhile) and written to the state dir; not own, they
// are skipped and counted as forged. unverified marks an own verdict taken
// without the coordinator (Describe denied).
func (v *View) resolve(role codec.Role, pid int64, verdict rolestate.Verdict, unverified bool) {
	if member, ok := rolestate.SessionMember(role); ok {
		v.resolveBeat(member, pid, verdict)
		return
	}
	ix := v.index
	type skipped struct {
		off   int64
		key   string
		lease codec.Lease
	}
	var forged []skipped
	var store *pendLease
	var storeP int32
	var unstore []string // pending keys to delete from the state dir
	ix.mu.Lock()
	for _, roles := range []map[codec.Role]*roleEntry{ix.roles, ix.rebuild} {
		e := roles[role]
		if e == nil || len(e.pends()) == 0 {
			continue
		}
		pend := e.pends()
		keep, n := pend[:0], len(pend)
		var own *pendLease
		for i := range pend {
			pl := pend[i]
			if pl.lease.Token.ProducerID != pid {
				keep = append(keep, pl)
				continue
			}
			unstore = append(unstore, pendKeyPrefix+pl.key)
			if verdict == rolestate.Own {
				own = &pl
			} else {
				ix.skipped[SkipForged] += 1 + pl.dups
				forged = append(forged, skipped{pl.off, pl.key, pl.lease})
			}
		}
		clear(pend[len(keep):n]) // the records settled: nothing may keep their values
		pend = keep
		if own != nil {
			// Records of other producer ids before it are superseded.
			pend = slices.DeleteFunc(pend, func(pl pendLease) bool { return pl.off < own.off })
		}
		e.setPends(pend)
		if own != nil {
			p := codec.Partition(role, ix.nparts)
			live := !(len(ix.rebuilding) > 0 && ix.rebuilding[p]) && ix.subscribed()
			var before rolestate.State
			if live && ix.needsBefore(role) {
				before = e.state(role)
			}
			if e.setLease(own.lease, own.off) {
				e.seeLease(ix.clock())
				if own.off > e.lastOffset {
					e.lastOffset = own.off
				}
				if live {
					ix.publish(role, before, own.off)
				}
				store, storeP = own, p
			}
		}
		if e.empty() {
			delete(roles, role)
		}
	}
	ix.moves.settle(role, pid, verdict == rolestate.Own)
	ix.notePendLocked(role)
	// Under ix.mu, so that a later lease of the role, which the
	// partition's goroutine stores after applying it, is stored after this
	// one. Not once Run is ending (goka closes the storage then): the
	// pending key stays, and the next Run verifies the lease again.
	if v.opts.StateDir != "" && len(unstore) > 0 && v.runCtx != nil && v.runCtx.Err() == nil {
		if st := v.storeOf(codec.Partition(role, ix.nparts)); st != nil {
			var err error
			if store != nil {
				err = st.Set(store.key, encodeStored(store.off, store.value))
			}
			for _, k := range unstore {
				if err == nil {
					err = st.Delete(k)
				}
			}
			if err != nil && v.runCtx.Err() == nil {
				v.failRun(fmt.Errorf("view: writing partition %d to the state dir: %w", storeP, err))
			}
		}
	}
	ix.mu.Unlock()
	for _, f := range forged {
		v.logSkip(SkipForged, v.firstForged.CompareAndSwap(false, true), codec.Partition(role, v.nparts), f.off, f.key,
			rolestate.NotOwnError(f.lease, v.cfg.TransactionalID(string(role))))
	}
	_ = unverified // counted by the verifier (verifier.kept)
}

// holdLease keeps lease record l of role at off waiting for its producer
// id's verdict, and asks for it. ix.mu must be held.
func (ix *index) holdLease(e *roleEntry, role codec.Role, l codec.Lease, off int64, key string, value []byte) {
	pid := l.Token.ProducerID
	var dups int64
	pend := slices.DeleteFunc(e.pends(), func(pl pendLease) bool {
		if pl.lease.Token.ProducerID == pid {
			dups += 1 + pl.dups
			return true
		}
		return false
	})
	if len(pend) >= maxPend {
		pend = slices.Delete(pend, 0, 1)
	}
	e.setPends(append(pend, pendLease{off: off, lease: l, key: key, value: slices.Clone(value), dups: dups}))
	ix.settlePendLocked(role) // older records may have gone
	ix.pendRoles[role] = struct{}{}
	if ix.ask != nil {
		ix.ask(role, pid)
	}
}

// notePendLocked keeps pendRoles in step with role's waiting records and
// wakes the waiters of verdicts. ix.mu must be held.
func (ix *index) notePendLocked(role codec.Role) {
	ix.settlePendLocked(role)
	if e := ix.roles[role]; e != nil && len(e.pends()) > 0 {
		return
	}
	if e := ix.rebuild[role]; e != nil && len(e.pends()) > 0 {
		return
	}
	delete(ix.pendRoles, role)
	close(ix.pendChanged)
	ix.pendChanged = make(chan struct{})
}

// awaitVerified waits until no lease record of role (of every role when
// all) below offset below (any offset when below < 0) waits for its
// producer id's verdict, or ctx ends. For every role, it waits only for
// the records waiting when it was called: records read later, however
// many a stranger writes under new producer ids, do not hold it back.
// The waiter is checked only when one of its roles' waiting records
// change (settlePendLocked), so a catch-up with many roles waiting costs
// each verdict one check.
func (v *View) awaitVerified(ctx context.Context, role codec.Role, all bool, below int64) error {
	ix := v.index
	w := &pendWaiter{done: make(chan struct{})}
	ix.mu.Lock()
	wait := func(r codec.Role, upTo int64) {
		if ix.firstPendLocked(r) <= upTo {
			ix.pendWaits[r] = append(ix.pendWaits[r], pendWait{w: w, upTo: upTo})
			w.left++
		}
	}
	if all {
		for r := range ix.pendRoles {
			wait(r, ix.lastPendLocked(r))
		}
	} else if _, ok := ix.pendRoles[role]; ok {
		upTo := ix.lastPendLocked(role)
		if below >= 0 {
			upTo = min(upTo, below-1)
		}
		wait(role, upTo)
	}
	left := w.left
	ix.mu.Unlock()
	if left == 0 {
		return nil
	}
	err := v.waitChan(ctx, w.done)
	if err != nil {
		ix.mu.Lock()
		for r, ws := range ix.pendWaits {
			ws = slices.DeleteFunc(ws, func(pw pendWait) bool { return pw.w == w })
			if len(ws) == 0 {
				delete(ix.pendWaits, r)
			} else {
				ix.pendWaits[r] = ws
			}
		}
		ix.mu.Unlock()
	}
	return err
}

// pendWaiter is one awaitVerified call: left counts its roles whose
// records it still waits for; done is closed when none is left.
type pendWaiter struct {
	left int
	done chan struct{}
}

// pendWait is a waiter's wait on one role: until no record of the role
// at or below upTo waits for a verdict.
type pendWait struct {
	w    *pendWaiter
	upTo int64
}

// settlePendLocked releases role's waiters whose records no longer wait.
// It runs wherever role's waiting records may have gone. ix.mu must be
// held.
func (ix *index) settlePendLocked(role codec.Role) {
	ws, ok := ix.pendWaits[role]
	if !ok {
		return
	}
	first := ix.firstPendLocked(role)
	ws = slices.DeleteFunc(ws, func(pw pendWait) bool {
		if first <= pw.upTo {
			return false
		}
		if pw.w.left--; pw.w.left == 0 {
			close(pw.w.done)
		}
		return true
	})
	if len(ws) == 0 {
		delete(ix.pendWaits, role)
	} else {
		ix.pendWaits[role] = ws
	}
}

// firstPendLocked and lastPendLocked return the lowest and highest offset
// of role's records waiting for a verdict, in either table; MaxInt64 and
// -1 when none waits. ix.mu must be held.
func (ix *index) firstPendLocked(role codec.Role) int64 {
	first := int64(math.MaxInt64)
	for _, roles := range []map[codec.Role]*roleEntry{ix.roles, ix.rebuild} {
		if e := roles[role]; e != nil {
			for _, pl := range e.pends() {
				first = min(first, pl.off)
			}
		}
	}
	return first
}

func (ix *index) lastPendLocked(role codec.Role) int64 {
	last := int64(-1)
	for _, roles := range []map[codec.Role]*roleEntry{ix.roles, ix.rebuild} {
		if e := roles[role]; e != nil {
			for _, pl := range e.pends() {
				last = max(last, pl.off)
			}
		}
	}
	return last
}

// storeOf returns partition p's state-dir storage, nil when none is open.
func (v *View) storeOf(p int32) storage.Storage {
	v.storesMu.Lock()
	defer v.storesMu.Unlock()
	return v.stores[p]
}
