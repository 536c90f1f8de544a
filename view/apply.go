package view

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/lovoo/goka"
	"github.com/lovoo/goka/storage"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/rolestate"
)

// update is goka's update callback: it is called for every message goka's
// read_committed consumer hands it, in offset order within a partition,
// from one goroutine per partition. It never fails on a bad record: it
// skips and counts it. A failed write to the state dir ends Run with the
// error (see failRun).
//
// A chunk message (see consumer.go, ChunkHeader) stands for the records of
// one fetch answer, which the view's consumer decoded (predecode.go): the
// callback applies each of them, in offset order, exactly as it applies a
// record handed alone, and goka then stores the chunk's last offset.
func (v *View) update(uc goka.UpdateContext, st storage.Storage, key string, value []byte) error {
	p, off := uc.Partition(), uc.Offset()
	if key == "" && value == nil {
		if first, last, ok := chunkOf(uc); ok {
			return v.updateChunk(p, first, last, st)
		}
	}
	d := &decoded{off: off}
	d.k, d.rec, d.reason, d.err = v.decode(p, []byte(key), value, &d.buf)
	batch := batchInfo{producerID: -1, epoch: -1}
	if d.reason == "" && (d.k.Kind == codec.KindLease || d.k.Kind == codec.KindSession) {
		batch = batchOf(uc)
	}
	return v.updateOne(p, d, key, value, batch, st)
}

// chunkOf returns the offsets of the chunk a message stands for, if it is
// a chunk message.
func chunkOf(uc goka.UpdateContext) (first, last int64, ok bool) {
	if h := uc.Headers(); h != nil {
		if b, ok := h[ChunkHeader]; ok {
			return decodeChunkHeader(b)
		}
	}
	return 0, 0, false
}

// updateChunk applies the records of the chunk of partition p from offset
// first to last.
func (v *View) updateChunk(p int32, first, last int64, st storage.Storage) error {
	recs, ok := v.predecode.takeChunk(p, first, last)
	if !ok { // cannot happen: the consumer hands a chunk over after pushing it
		err := fmt.Errorf("view: partition %d: the records of offsets %d to %d were not decoded", p, first, last)
		v.failRun(err)
		return err
	}
	// Each record goes through the same steps as one handed alone
	// (updateOne), in batches: the records at or below the partition's
	// last offset when the chunk starts are replays (only this goroutine
	// moves it, record by record); the others are applied to the index
	// under one hold of its lock per batch; then the partition's progress
	// moves past the batch, and skips are logged and changes written to
	// the state dir.
	from, known := v.progress.replaysTo(p)
	if !known { // cannot happen with goka: a partition the view does not know
		return nil
	}
	all := recs
	for len(recs) > 0 {
		n := min(len(recs), applyBatch)
		batch := recs[:n]
		recs = recs[n:]
		for i := range batch {
			if d := &batch[i]; d.off > from && d.reason == "" && d.k.Kind == codec.KindLease {
				d.reason, d.err, d.hold = v.checkAuthor(d.k.Role, d.rec, d.src.batch())
			} else if d.off > from && d.reason == "" && d.k.Kind == codec.KindSession {
				d.reason, d.err, d.hold = v.checkBeat(d.k.Member, d.rec, d.src.batch())
			}
		}
		v.index.applyChunk(p, batch, from)
		v.progress.done(p, batch[n-1].off)
		for i := range batch {
			d := &batch[i]
			if d.off <= from {
				continue
			}
			if d.hold && d.reason == "" && d.k.Kind == codec.KindSession {
				continue // not kept in the state dir while it waits (see session.go)
			}
			if d.hold && d.reason == "" {
				if err := v.storePending(p, d.off, string(d.src.key()), d.src.value(), st); err != nil {
					return err
				}
				continue
			}
			if err := v.finish(p, d, "", d.src.value(), st); err != nil {
				return err
			}
		}
	}
	v.predecode.release(all)
	return nil
}

// applyBatch is the number of records of a chunk applied under one hold of
// the index's lock.
const applyBatch = 256

// updateOne applies one decoded record of value value; key is its key as
// a string, or "" to take it from d.src when needed; batch is its batch
// header when it is a lease.
func (v *View) updateOne(p int32, d *decoded, key string, value []byte, batch batchInfo, st storage.Storage) error {
	off, k, rec, reason, derr := d.off, d.k, d.rec, d.reason, d.err
	hold := false
	if reason == "" && k.Kind == codec.KindLease {
		reason, derr, hold = v.checkAuthor(k.Role, rec, batch)
	}
	if reason == "" && k.Kind == codec.KindSession {
		reason, derr, hold = v.checkBeat(k.Member, rec, batch)
		if hold {
			if v.progress.replay(p, off) {
				return nil
			}
			v.index.mu.Lock()
			v.index.holdBeatLocked(p, k.Member, *rec.Heartbeat, off)
			v.index.mu.Unlock()
			v.progress.done(p, off)
			return nil
		}
	}
	if hold {
		if v.progress.replay(p, off) {
			return nil
		}
		v.index.hold(p, k.Role, *rec.Lease, off, key, value)
		v.progress.done(p, off)
		return v.storePending(p, off, key, value, st)
	}
	changed, replay, first := v.apply(p, off, k, rec, reason)
	if replay {
		return nil
	}
	d.reason, d.err, d.changed, d.first = reason, derr, changed, first
	return v.finish(p, d, key, value, st)
}

// finish logs a skipped record (d.reason), or writes an applied one that
// changed the table to the state dir; key as for updateOne.
func (v *View) finish(p int32, d *decoded, key string, value []byte, st storage.Storage) error {
	off, rec, reason, derr, changed, first := d.off, d.rec, d.reason, d.err, d.changed, d.first
	if reason == "" && (!changed || v.opts.StateDir == "") {
		return nil
	}
	if key == "" && d.src != nil {
		key = string(d.src.key())
	}
	if reason != "" {
		v.logSkip(reason, first, p, off, key, derr)
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

// storePending keeps a lease record that waits for its producer id's
// verdict in the state dir under its pending key (see author.go), so that
// a Run that ends first leaves it to the next to verify.
func (v *View) storePending(p int32, off int64, key string, value []byte, st storage.Storage) error {
	if v.opts.StateDir == "" {
		return nil
	}
	if err := st.Set(pendKeyPrefix+key, encodeStored(off, value)); err != nil {
		err = fmt.Errorf("view: writing partition %d offset %d to the state dir: %w", p, off, err)
		v.failRun(err)
		return err
	}
	return nil
}

// decode decodes a record into buf and says why it must be skipped, if it
// must. The record points into buf.
func (v *View) decode(p int32, key, value []byte, buf *codec.RecordBuf) (codec.Key, codec.Record, SkipReason, error) {
	k, err := codec.DecodeKey(key)
	if errors.Is(err, codec.ErrUnknownKind) {
		return k, codec.Record{}, SkipVersion, err
	}
	if err != nil {
		return k, codec.Record{}, SkipKey, err
	}
	if k.Kind == codec.KindSession || k.Kind == codec.KindDrain {
		if want := codec.KeyPartition(k, v.nparts); want != p {
			return k, codec.Record{}, SkipPartition, errors.New("the " + k.Kind.String() + " records of " + string(k.Member) + " belong in another partition")
		}
	} else if want := codec.Partition(k.Role, v.nparts); want != p {
		return k, codec.Record{}, SkipPartition, errors.New("role " + string(k.Role) + " belongs in another partition")
	}
	if len(value) == 0 {
		return k, codec.Record{}, "", nil // a tombstone fits any key
	}
	r, err := buf.Decode(value, k.Member)
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
// tombstone on a lease key) of role counts, by rolestate.CheckLeaseAuthor
// (the rule every reader of the role topic applies): only a lease written
// in a transaction by the producer id and epoch of its own token does;
// and only when that producer id is the role's own (rolestate.Authors):
// hold is true when that is not known yet, and the record waits for the
// verdict (see author.go). See the package doc, "Who can write what".
func (v *View) checkAuthor(role codec.Role, rec codec.Record, b batchInfo) (SkipReason, error, bool) {
	if err := rolestate.CheckLeaseAuthor(rec, rolestate.Batch{ProducerID: b.producerID, Epoch: b.epoch, Transactional: b.transactional}); err != nil {
		return SkipForged, err, false
	}
	switch v.verify.authors.Verdict(role, rec.Lease.Token.ProducerID) {
	case rolestate.Own:
		return "", nil, false
	case rolestate.NotOwn:
		return SkipForged, rolestate.NotOwnError(*rec.Lease, v.cfg.TransactionalID(string(role))), false
	}
	return "", nil, true
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
	sd := v.newSeeder(p)
	for _, sr := range recs {
		sd.add([]byte(sr.key), sr.value, sr.offset)
	}
	sd.done(offset)
}

// seeder decodes a partition's stored records as they are read from the
// state dir (each once, the bytes not kept) and loads them into the index
// a block at a time.
type seeder struct {
	v       *View
	p       int32
	n       int               // records read
	recs    []decodedRecord   // decoded, not loaded yet
	bufs    []codec.RecordBuf // recs[i] points into bufs[i]
	touched map[codec.Role]*roleEntry
	pend    []storedPend // stored leases that waited for a verdict (see author.go)
}

// storedPend is a lease of role the state dir kept while it waited for
// its producer id's verdict.
type storedPend struct {
	role codec.Role
	pl   pendLease
}

// seedBlock is the number of records a seeder loads into the index at once.
const seedBlock = 4096

func (v *View) newSeeder(p int32) *seeder {
	return &seeder{v: v, p: p, recs: make([]decodedRecord, 0, seedBlock),
		bufs: make([]codec.RecordBuf, seedBlock), touched: map[codec.Role]*roleEntry{}}
}

// add decodes one stored record; key and value may be reused afterwards.
func (sd *seeder) add(key, value []byte, offset int64) {
	sd.n++
	if k, ok := strings.CutPrefix(string(key), pendKeyPrefix); ok {
		var buf codec.RecordBuf
		if dk, rec, reason, _ := sd.v.decode(sd.p, []byte(k), value, &buf); reason == "" && dk.Kind == codec.KindLease && rec.Lease != nil {
			sd.pend = append(sd.pend, storedPend{dk.Role, pendLease{off: offset, lease: *rec.Lease, key: k, value: slices.Clone(value)}})
		}
		return
	}
	k, rec, reason, _ := sd.v.decode(sd.p, key, value, &sd.bufs[len(sd.recs)])
	if reason != "" || rec.Tombstone() {
		return
	}
	sd.recs = append(sd.recs, decodedRecord{key: k, rec: rec, offset: offset})
	if len(sd.recs) == seedBlock {
		sd.flush()
	}
}

// flush loads the decoded records into the index, which copies them out:
// recs and bufs are reused.
func (sd *seeder) flush() {
	sd.v.index.seed(sd.recs, sd.touched)
	clear(sd.recs) // the strings stay in the index only
	sd.recs = sd.recs[:0]
}

// done loads the last records into the index, ranks the roles loaded, and
// records the partition's stored offset.
func (sd *seeder) done(offset int64) {
	v, p := sd.v, sd.p
	sd.flush()
	v.index.seedDone(sd.touched)
	// A stored lease that waited for its verdict when the last Run ended
	// waits again, unless a lease after it was stored.
	for _, sp := range sd.pend {
		v.index.hold(p, sp.role, sp.pl.lease, sp.pl.off, sp.pl.key, sp.pl.value)
	}
	v.progress.seed(p, offset)
	if sd.n > 0 || offset >= 0 {
		v.log.Info("view resumed partition from state dir", "partition", p, "records", sd.n, "offset", offset)
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
