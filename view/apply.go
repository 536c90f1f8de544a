package view

import (
	"errors"
	"fmt"
	"github.com/krabka/krole/rolestate"
	"log/slog"

	"github.com/lovoo/goka"
	"github.com/lovoo/goka/storage"

	"github.com/krabka/krole/codec"
)

// update is goka's update callback: it is called for every record a
// read_committed consumer is handed, in offset order within a partition,
// from one goroutine per partition. It never fails on a bad record: it
// skips and counts it. A failed write to the state dir ends Run with the
// error (see failRun).
func (v *View) update(uc goka.UpdateContext, st storage.Storage, key string, value []byte) error {
	p, off := uc.Partition(), uc.Offset()
	v.health.contact(v.opts.Clock())
	k, rec, reason, derr := v.decode(p, []byte(key), value)
	changed, replay, first := v.apply(p, off, k, rec, reason)
	if replay {
		return nil
	}
	if reason != "" {
		v.logSkip(reason, first, p, off, key, derr)
		return nil
	}
	if !changed || v.opts.StateDir == "" {
		return nil
	}
	var err error
	if rec.Tombstone() {
		err = st.Delete(key)
	} else {
		err = st.Set(key, encodeStored(off, value))
	}
	if err != nil {
		err = fmt.Errorf("view: writing partition %d offset %d to the state dir: %w", p, off, err)
		v.failRun(err)
	}
	return err
}

// decode decodes a record and says why it must be skipped, if it must.
func (v *View) decode(p int32, key, value []byte) (codec.Key, codec.Record, SkipReason, error) {
	k, err := codec.DecodeKey(key)
	if err != nil {
		return k, codec.Record{}, SkipKey, err
	}
	if want := codec.Partition(k.Role, v.nparts); want != p {
		return k, codec.Record{}, SkipPartition, errors.New("role " + string(k.Role) + " belongs in another partition")
	}
	r, err := codec.DecodeRecord(value)
	if err != nil {
		var uv *codec.UnknownVersionError
		if errors.As(err, &uv) {
			return k, r, SkipVersion, err
		}
		return k, r, SkipValue, err
	}
	if err := codec.CheckPair(k, r); err != nil {
		return k, r, SkipMismatch, err
	}
	return k, r, "", nil
}

// apply folds one record handed to the view into the index. A record at or
// below the partition's last offset is a replay (goka reconnected, or the
// consumer started at the last record restored from the state dir) and is
// not applied again. It reports whether the table changed, and for a skipped
// record whether it is the first of its reason.
func (v *View) apply(p int32, off int64, k codec.Key, rec codec.Record, reason SkipReason) (changed, replay, first bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	ps := v.parts[p]
	if ps == nil { // not a partition the view knows: cannot happen with goka
		return false, true, false
	}
	v.handed(ps, p, off)
	if off <= ps.last {
		return false, true, false
	}
	ps.last = off
	if reason != "" {
		v.skipped[reason]++
		return false, false, v.skipped[reason] == 1
	}
	v.applied++
	e := v.roles[k.Role]
	isNew := e == nil
	if isNew {
		e = &roleEntry{leaseOffset: -1, lastOffset: -1}
	}
	var before rolestate.State
	if v.needsBefore(k.Role) {
		before = e.state(k.Role)
	}
	if !applyTo(e, k, rec, off) {
		return false, false, false
	}
	v.leaseApplied(e, k)
	switch {
	case e.empty():
		delete(v.roles, k.Role)
	case isNew:
		v.roles[k.Role] = e
	}
	v.publish(k.Role, before, off)
	return true, false, false
}

// seed loads a partition's stored table into the index (recs in any order)
// and records the partition's stored offset. It is called once per
// partition, when goka opens the partition's storage.
func (v *View) seed(p int32, recs []storedRecord, offset int64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	touched := map[codec.Role]*roleEntry{}
	for _, sr := range recs {
		k, rec, reason, _ := v.decode(p, []byte(sr.key), sr.value)
		if reason != "" || rec.Tombstone() {
			continue
		}
		e := v.roles[k.Role]
		if e == nil {
			e = &roleEntry{leaseOffset: -1, lastOffset: -1}
			v.roles[k.Role] = e
		}
		touched[k.Role] = e
		switch {
		case rec.Lease != nil:
			e.setLease(*rec.Lease, sr.offset)
			v.leaseApplied(e, k)
		case rec.Registration != nil:
			e.cands = append(e.cands, rolestate.Candidate{Member: k.Member, Offset: sr.offset, RegisteredAt: rec.Registration.RegisteredAt})
		}
		if sr.offset > e.lastOffset {
			e.lastOffset = sr.offset
		}
	}
	for role, e := range touched {
		e.sortCands()
		if v.needsBefore(role) {
			v.publish(role, rolestate.State{Role: role, LeaseOffset: -1}, e.lastOffset)
		}
	}
	ps := v.parts[p]
	if ps == nil || ps.seeded {
		return
	}
	ps.seeded = true
	if offset > ps.last {
		ps.last = offset
	}
	v.nseeded++
	if v.nseeded == len(v.parts) {
		close(v.seeded)
	}
	if len(recs) > 0 || offset >= 0 {
		v.log.Info("view resumed partition from state dir", "partition", p, "records", len(recs), "offset", offset)
	}
}

// logSkip logs a skipped record: the first of each reason at warn level,
// the others at debug level.
func (v *View) logSkip(reason SkipReason, first bool, p int32, off int64, key string, err error) {
	if len(key) > 80 {
		key = key[:80] + "..."
	}
	lvl := slog.LevelDebug
	msg := "view skipped a record"
	if first {
		lvl = slog.LevelWarn
		msg = "view skipped a record (first of its kind; later ones are logged at debug level and counted in Stats)"
	}
	v.log.Log(v.runContext(), lvl, msg, "reason", string(reason), "partition", p, "offset", off, "key", key, "err", err)
}
