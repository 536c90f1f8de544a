package view

import (
	"errors"
	"fmt"
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
	var k codec.Key
	var rec codec.Record
	var reason SkipReason
	var derr error
	if d, ok := v.predecoded(p, off); ok {
		k, rec, reason, derr = d.k, d.rec, d.reason, d.err
	} else {
		k, rec, reason, derr = v.decode(p, []byte(key), value)
	}
	if reason == "" && k.Kind == codec.KindLease {
		reason, derr = checkAuthor(rec, batchOf(uc))
	}
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

// batchOf returns the batch header the view's consumer set on the record
// (see consumer.go); a record without one counts as a plain append.
func batchOf(uc goka.UpdateContext) batchInfo {
	if h := uc.Headers(); h != nil {
		if b, ok := decodeBatchInfo(h[BatchHeader]); ok {
			return b
		}
	}
	return batchInfo{producerID: -1, epoch: -1}
}

// checkAuthor decides whether a lease record (a lease, a release, or a
// tombstone on a lease key) counts: only a lease written in a transaction
// by the producer id and epoch of its own token does. krole never writes a
// lease tombstone, and a tombstone names no token, so none counts. See the
// package doc, "Who can write what".
func checkAuthor(rec codec.Record, b batchInfo) (SkipReason, error) {
	switch {
	case rec.Lease == nil:
		return SkipForged, errors.New("a tombstone on a lease key: krole never writes one, and it names no token")
	case !b.transactional:
		return SkipForged, fmt.Errorf("lease of %s under token %d/%d not written in a transaction (batch producer id %d)",
			rec.Lease.Member, rec.Lease.Token.ProducerID, rec.Lease.Token.Epoch, b.producerID)
	case b.producerID != rec.Lease.Token.ProducerID || b.epoch != rec.Lease.Token.Epoch:
		return SkipForged, fmt.Errorf("lease of %s names token %d/%d but was written by producer id %d epoch %d",
			rec.Lease.Member, rec.Lease.Token.ProducerID, rec.Lease.Token.Epoch, b.producerID, b.epoch)
	}
	return "", nil
}

// apply passes one record handed to the view through the catch-up
// protocol and the index. A record at or below the partition's last offset
// is a replay (goka reconnected, or the consumer started at the last
// record restored from the state dir) and is not applied again. Otherwise
// the record is folded into the index (or counted as skipped) before the
// partition's progress moves past it, so that a catch-up waiter woken by
// the record finds it in the table. It reports whether the table changed,
// and for a skipped record whether it is the first of its reason. Only
// partition p's goroutine calls it for p.
func (v *View) apply(p int32, off int64, k codec.Key, rec codec.Record, reason SkipReason) (changed, replay, first bool) {
	if v.progress.replay(p, off) {
		return false, true, false
	}
	if reason != "" {
		first = v.index.skip(reason)
	} else {
		changed = v.index.apply(p, k, rec, off)
	}
	v.progress.done(p, off)
	return changed, false, first
}

// seed loads a partition's stored table into the index (recs in any order)
// and records the partition's stored offset. It is called once per
// partition, when goka opens the partition's storage.
func (v *View) seed(p int32, recs []storedRecord, offset int64) {
	decoded := make([]decodedRecord, 0, len(recs))
	for _, sr := range recs {
		k, rec, reason, _ := v.decode(p, []byte(sr.key), sr.value)
		if reason != "" {
			continue
		}
		decoded = append(decoded, decodedRecord{key: k, rec: rec, offset: sr.offset})
	}
	v.index.seed(decoded)
	v.progress.seed(p, offset)
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
