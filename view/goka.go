package view

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"
	"github.com/lovoo/goka/storage"
)

// This file is the glue between the view and goka v1.1.14. goka stays the
// engine (a goroutine per partition, storage, consumer restarts, the
// update callback); the view changes it only through its extension points:
//
//   - the consumer (WithViewConsumerSaramaBuilder): the view's own
//     (consumer.go), read_committed, handing goka one chunk message per
//     fetch answer; trackingConsumer tells the view where goka starts each
//     partition consumer;
//   - the topic manager (WithViewTopicManagerBuilder): tailTopicManager
//     makes goka's recovery read nothing, so one consumer per partition
//     reads for the whole Run (see the package doc, "Caught up");
//   - the storage (WithViewStorageBuilder): the in-memory index is the
//     table; goka's storage only persists it (LevelDB with StateDir, kept
//     in recovery mode, offset written every 30s and on close, until the
//     first catch-up) or keeps the offset.
//
// Chunks (predecode.go) pair with their messages: a chunk is queued before
// its message, goka hands a partition's messages in order on one goroutine,
// and the queue is emptied when goka starts a partition consumer (after the
// previous one's channels closed), so the chunk a message names is at the
// head, behind only discarded ones. The consumer drops every record's own
// headers, so neither BatchHeader nor ChunkHeader can be forged.
//
// What correctness relies on in goka v1.1.14, each guarded by a test
// (goka_test.go and the view's rebuild, catch-up and forged-lease tests):
//
//  1. goka's DefaultConfig reads uncommitted records, so the view hands
//     goka a consumer of its own.
//  2. A partition's load asks the storage's GetOffset (default -3, "not
//     stored"), then the topic manager's oldest and newest offsets; the
//     consumer starts one past the stored offset, or at the oldest.
//     diskStore answers one less than it stored, so the last stored record
//     is handed again.
//  3. Recovery reads until handed a record at newest - 1 or beyond, then
//     calls MarkRecovered (at once when the start is at or past newest); a
//     partition ending in a transaction marker is not recovered, and
//     View.Recovered() stays false, until a record after it arrives.
//  4. The update callback is called once per message, in offset order per
//     partition, from the partition's goroutine, with the message's
//     headers and its key as a string ("" for none), then SetOffset.
//  5. With WithViewAutoReconnect, an error on a partition consumer's
//     Errors (or from the topic manager starting one) makes goka
//     AsyncClose the consumer, drain both channels until closed, back off
//     and load the partition again; Messages closing without an error ends
//     the partition for good, so the view's consumer closes its channels
//     only after AsyncClose.
//  6. goka's View closes neither its consumer nor its topic manager when
//     Run returns; gokaResources does.

// gokaResources keeps what goka builds, to close it after goka's Run.
type gokaResources struct {
	mu        sync.Mutex
	consumers []sarama.Consumer
	tmgrs     []*tailTopicManager
}

func (r *gokaResources) consumerBuilder(v *View, client sarama.Client, sc *sarama.Config) goka.SaramaConsumerBuilder {
	return func(brokers []string, clientID string) (sarama.Consumer, error) {
		c := *sc
		c.ClientID = clientID
		fc := newFetchConsumer(client, &c, v.wentBackwards)
		fc.prepare = v.prepare
		fc.answered = v.contact
		var cons sarama.Consumer = fc
		r.mu.Lock()
		r.consumers = append(r.consumers, cons)
		r.mu.Unlock()
		v.glue.consumer.Store(&cons)
		return &trackingConsumer{Consumer: cons, v: v}, nil
	}
}

// trackingConsumer tells the view where goka starts each partition
// consumer.
type trackingConsumer struct {
	sarama.Consumer
	v *View
}

// ConsumePartition starts goka's partition consumer and tells the view.
func (c *trackingConsumer) ConsumePartition(topic string, partition int32, offset int64) (sarama.PartitionConsumer, error) {
	if topic == c.v.topic {
		c.v.predecode.reset(partition)
	}
	pc, err := c.Consumer.ConsumePartition(topic, partition, offset)
	if err == nil && topic == c.v.topic {
		c.v.glue.consumerStarted(partition, offset)
	}
	return pc, err
}

func (r *gokaResources) topicManagerBuilder(v *View, sc *sarama.Config) goka.TopicManagerBuilder {
	return func(brokers []string) (goka.TopicManager, error) {
		c := *sc
		c.ClientID = v.cfg.ClientID + "-view-admin"
		tm, err := goka.NewTopicManager(brokers, &c, goka.NewTopicManagerConfig())
		if err != nil {
			return nil, err
		}
		t := &tailTopicManager{TopicManager: tm, v: v}
		r.mu.Lock()
		r.tmgrs = append(r.tmgrs, t)
		r.mu.Unlock()
		return t, nil
	}
}

func (r *gokaResources) close(log *slog.Logger) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.consumers {
		if err := c.Close(); err != nil {
			log.Debug("closing the view's consumer", "err", err)
		}
	}
	for _, t := range r.tmgrs {
		if err := t.Close(); err != nil {
			log.Debug("closing the view's topic manager", "err", err)
		}
	}
	r.consumers, r.tmgrs = nil, nil
}

// tailTopicManager is goka's topic manager with one answer changed: in a
// partition's recovery phase, the newest offset is the offset recovery
// starts at, so that goka's recovery reads nothing and marks the partition
// recovered at once (see the top of this file). Afterwards it answers as
// goka's own, except that a newest offset below the offset the view has
// read is an error (the offsets went backwards; see rebuild.go).
type tailTopicManager struct {
	goka.TopicManager
	v      *View
	closed atomic.Bool
}

// GetOffset answers goka's questions about offsets.
func (t *tailTopicManager) GetOffset(topic string, partition int32, which int64) (int64, error) {
	if which != sarama.OffsetNewest || topic != t.v.topic {
		return t.TopicManager.GetOffset(topic, partition, which)
	}
	if off, ok := t.v.glue.recoveryEnd(partition); ok {
		return off, nil
	}
	end, err := t.TopicManager.GetOffset(topic, partition, which)
	if err != nil {
		return end, err
	}
	// goka asks this when it starts the partition's consumer. An end below
	// what the view has read means the offsets went backwards: goka would
	// start the consumer at the end and never read what lies below it (see
	// rebuild.go). The error makes goka start over, after the reset.
	if last := t.v.progress.lastOf(partition); end < last+1 {
		e := &OffsetsWentBackwardsError{Topic: topic, Partition: partition, Offset: last + 1, End: end}
		t.v.wentBackwards(e)
		return 0, e
	}
	return end, nil
}

// Close closes the topic manager once.
func (t *tailTopicManager) Close() error {
	if !t.closed.CompareAndSwap(false, true) {
		return nil
	}
	return t.TopicManager.Close()
}

// gokaGlue is what goka tells the view about its partitions: where each
// partition's storage reported its offset, whether goka's recovery phase
// has ended, and where goka started the consumer that follows the topic.
// Every field of a gokaPart is guarded by mu; gv and consumer are set once
// by Run and its builders.
type gokaGlue struct {
	gv       atomic.Pointer[goka.View] // for tests: goka's own Recovered()
	consumer atomic.Pointer[sarama.Consumer]

	mu    sync.Mutex
	parts map[int32]*gokaPart
}

// gokaPart is goka's side of one partition.
type gokaPart struct {
	recovered bool          // goka's recovery phase has ended (it reads nothing)
	reported  int64         // the offset the storage last reported to goka
	from      int64         // where the consumer that follows the topic started; -1 before
	consuming chan struct{} // closed once that consumer has started
	consumers int           // consumers goka started for the partition (each ConsumePartition)
	reset     bool          // the offsets went backwards: the storage resets at goka's next GetOffset
	resets    int           // resets taken; equals the progress's count outside resetPartition
}

func newGokaGlue() *gokaGlue { return &gokaGlue{parts: map[int32]*gokaPart{}} }

func (g *gokaGlue) addPartitions(parts []int32) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, p := range parts {
		g.parts[p] = &gokaPart{reported: -1, from: -1, consuming: make(chan struct{})}
	}
}

// recoveryEnd is the newest offset goka's recovery of partition p is given
// (see tailTopicManager): one past the offset its storage reported, which
// is where recovery starts, or 0. ok is false once p has recovered.
func (g *gokaGlue) recoveryEnd(p int32) (off int64, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	gp := g.parts[p]
	if gp == nil || gp.recovered {
		return 0, false
	}
	return max(gp.reported+1, 0), true
}

// reportedOffset records the offset partition p's storage gave goka.
func (g *gokaGlue) reportedOffset(p int32, off int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if gp := g.parts[p]; gp != nil {
		gp.reported = off
	}
}

// markRecovered records that goka's recovery phase of partition p has
// ended.
func (g *gokaGlue) markRecovered(p int32) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if gp := g.parts[p]; gp != nil {
		gp.recovered = true
	}
}

// consumerStarted records that goka started a consumer of partition p at
// offset. Only a consumer started after the recovery phase follows the
// topic (recovery reads nothing, but would close its consumer).
func (g *gokaGlue) consumerStarted(p int32, offset int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	gp := g.parts[p]
	if gp == nil {
		return
	}
	gp.consumers++
	if !gp.recovered {
		return
	}
	if gp.from < 0 {
		close(gp.consuming)
	}
	gp.from = offset
}

// waitConsumer waits until goka has started the consumer that follows
// partition p (after its recovery phase) and returns its start offset. It
// gives ErrStopped once done is closed.
func (g *gokaGlue) waitConsumer(ctx context.Context, done <-chan struct{}, p int32) (int64, error) {
	g.mu.Lock()
	gp := g.parts[p]
	g.mu.Unlock()
	select {
	case <-gp.consuming:
	case <-done:
		return 0, ErrStopped
	case <-ctx.Done():
		return 0, notCaughtUp(ctx)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return gp.from, nil
}

// markReset marks partition p for a reset (see rebuild.go) unless one is
// pending, or, when resets is not negative, the partition was reset since
// its reset count was resets; it reports whether it marked.
func (g *gokaGlue) markReset(p int32, resets int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	gp := g.parts[p]
	if gp == nil || gp.reset || (resets >= 0 && gp.resets != resets) {
		return false
	}
	gp.reset = true
	return true
}

// takeReset reports whether partition p was marked for a reset, and
// unmarks it.
func (g *gokaGlue) takeReset(p int32) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	gp := g.parts[p]
	if gp == nil || !gp.reset {
		return false
	}
	gp.reset = false
	gp.resets++
	return true
}

// state is partition p's goka side, for tests.
func (g *gokaGlue) state(p int32) gokaPart {
	g.mu.Lock()
	defer g.mu.Unlock()
	return *g.parts[p]
}

func (v *View) runContext() context.Context {
	if v.runCtx == nil { // set by Run before goka starts
		return context.Background()
	}
	return v.runCtx
}

// storageBuilder returns goka's storage for one partition: LevelDB under
// StateDir, or an offset-only store in memory.
func (v *View) storageBuilder() storage.Builder {
	if v.opts.StateDir == "" {
		return func(topic string, partition int32) (storage.Storage, error) {
			return &memStore{v: v, p: partition}, nil
		}
	}
	ldb := storage.DefaultBuilder(v.opts.StateDir)
	return func(topic string, partition int32) (storage.Storage, error) {
		st, err := ldb(topic, partition)
		if err != nil {
			return nil, fmt.Errorf("state dir %s: %w", v.opts.StateDir, err)
		}
		d := &diskStore{Storage: st, v: v, p: partition}
		v.storesMu.Lock()
		if v.disksClosed { // Run has closed the storages: this one comes too late
			v.storesMu.Unlock()
			_ = st.Close()
			return nil, fmt.Errorf("state dir %s: the view has stopped", v.opts.StateDir)
		}
		v.stores[partition] = st
		v.disks = append(v.disks, d)
		v.storesMu.Unlock()
		return d, nil
	}
}

// memStore is the storage of a view without StateDir: the values live in
// the view's index only, so goka keeps nothing but the partition's offset
// (needed when goka reconnects).
type memStore struct {
	storage.Null
	v      *View
	p      int32
	offset atomic.Int64 // offset+1; 0 = none stored
}

// Open registers the partition with the view: nothing is stored.
func (s *memStore) Open() error {
	s.v.seed(s.p, nil, -1)
	return nil
}

// GetOffset gives goka the offset of the last record handed to it in this
// Run, so that a reconnect resumes after it; def before the first.
//
// After the partition's offsets went backwards it forgets the offset
// first (see rebuild.go).
func (s *memStore) GetOffset(def int64) (int64, error) {
	if s.v.resetPartition(s.p) {
		s.offset.Store(0)
	}
	off := def
	if o := s.offset.Load(); o > 0 {
		off = o - 1
	}
	s.v.glue.reportedOffset(s.p, off)
	return off, nil
}

// MarkRecovered records the end of goka's recovery phase, which reads
// nothing (see tailTopicManager).
func (s *memStore) MarkRecovered() error {
	s.v.glue.markRecovered(s.p)
	return nil
}

// SetOffset keeps the offset of the record goka has just handed over.
func (s *memStore) SetOffset(o int64) error {
	s.offset.Store(o + 1)
	return nil
}

// diskStore is goka's LevelDB storage; on Open it loads the stored table
// into the view's index.
type diskStore struct {
	storage.Storage
	v *View
	p int32

	// steady: goka's storage has been marked recovered, so it writes the
	// offset with every message (a chunk's: its last record's). cleared: the storage was emptied after the
	// partition's offsets went backwards, and no offset was set since.
	// Only goka's partition goroutine uses them.
	steady, cleared bool

	closeOnce sync.Once
	closeErr  error
}

// Close closes the storage once: goka closes the partitions it ran, and
// Run closes, when goka has returned, any it built and never closed (a
// Run that ended while goka was still setting partitions up), which
// would otherwise keep its LevelDB open.
func (s *diskStore) Close() error {
	s.closeOnce.Do(func() { s.closeErr = s.Storage.Close() })
	return s.closeErr
}

// closeDisks closes every state-dir storage goka built in this Run that
// is still open, and makes the builder close at once any built later (a
// partition's setup that outlived goka's Run).
func (v *View) closeDisks() {
	v.storesMu.Lock()
	disks := v.disks
	v.disks, v.disksClosed = nil, true
	v.storesMu.Unlock()
	for _, d := range disks {
		if err := d.Close(); err != nil {
			v.log.Debug("closing a state-dir storage", "partition", d.p, "err", err)
		}
	}
}

// clear deletes every key of the partition's database, the offset too.
func (s *diskStore) clear() error {
	it, err := s.Storage.Iterator()
	if err != nil {
		return fmt.Errorf("clearing state of partition %d: %w", s.p, err)
	}
	var keys []string
	for it.Next() {
		keys = append(keys, string(it.Key()))
	}
	err = it.Err()
	it.Release()
	if err != nil {
		return fmt.Errorf("clearing state of partition %d: %w", s.p, err)
	}
	for _, k := range append(keys, gokaOffsetKey) {
		if err := s.Storage.Delete(k); err != nil {
			return fmt.Errorf("clearing state of partition %d: %w", s.p, err)
		}
	}
	return nil
}

// GetOffset gives goka the stored offset minus one, so that the consumer
// starts at the last record it read and hands it again (a replay, which
// the view does not apply twice): the view's first catch-up takes that
// record as proof that the consumer is fetching (see catchUpPartition).
//
// After the partition's offsets went backwards it deletes everything
// stored first, and answers def until goka sets an offset again (see
// rebuild.go).
func (s *diskStore) GetOffset(def int64) (int64, error) {
	if s.v.resetPartition(s.p) {
		if err := s.clear(); err != nil {
			return 0, err
		}
		s.cleared = true
	}
	if s.cleared {
		s.v.glue.reportedOffset(s.p, def)
		return def, nil
	}
	off, err := s.Storage.GetOffset(def)
	if err != nil {
		return 0, err
	}
	if off >= 0 {
		off--
	}
	s.v.glue.reportedOffset(s.p, off)
	return off, nil
}

// MarkRecovered records the end of goka's recovery phase, which reads
// nothing (see tailTopicManager). goka's storage stays in its recovery
// mode until the view's first catch-up: see SetOffset.
func (s *diskStore) MarkRecovered() error {
	s.v.glue.markRecovered(s.p)
	return nil
}

// Open opens the LevelDB database and loads the stored table into the
// view's index.
func (s *diskStore) Open() error {
	if err := s.Storage.Open(); err != nil {
		return err
	}
	it, err := s.Storage.Iterator()
	if err != nil {
		return fmt.Errorf("reading state of partition %d: %w", s.p, err)
	}
	sd := s.v.newSeeder(s.p)
	for it.Next() {
		val, err := it.Value()
		if err != nil {
			it.Release()
			return fmt.Errorf("reading state of partition %d: %w", s.p, err)
		}
		off, raw, ok := decodeStored(val)
		if !ok {
			continue
		}
		sd.add(it.Key(), raw, off) // decoded at once: the iterator reuses its bytes
	}
	err = it.Err()
	it.Release()
	if err != nil {
		return fmt.Errorf("reading state of partition %d: %w", s.p, err)
	}
	off, err := s.Storage.GetOffset(-1)
	if err != nil {
		return fmt.Errorf("reading offset of partition %d: %w", s.p, err)
	}
	sd.done(off)
	return nil
}

// SetOffset records the partition's offset. goka's LevelDB storage treats
// offset 0 as "nothing stored" and never writes it, so a partition whose
// only record is at offset 0 would reread it after a restart (harmless, as
// the view ignores replays, but a reread nonetheless); write it here.
//
// Until the view's first catch-up, goka's storage is left in its recovery
// mode, where it keeps the offset in memory and writes it every 30s and on
// close: a restore does not write the offset a million times. A restart
// after a crash may then reread records the state dir already holds, which
// the view does not apply twice. The first message after the first
// catch-up switches the storage to writing the offset with every message
// (for a chunk message, its last record's offset).
func (s *diskStore) SetOffset(o int64) error {
	s.cleared = false
	if !s.steady && s.v.isReady() {
		s.steady = true
		if err := s.Storage.MarkRecovered(); err != nil {
			return err
		}
	}
	if err := s.Storage.SetOffset(o); err != nil {
		return err
	}
	if o == 0 {
		return s.Storage.Set(gokaOffsetKey, []byte("0"))
	}
	return nil
}

// gokaOffsetKey is where goka's LevelDB storage keeps the offset.
const gokaOffsetKey = "__offset"

// storedRecord is one record as the state dir keeps it.
type storedRecord struct {
	key    string
	offset int64
	value  []byte
}

// The state dir stores a record's value as a format byte (1), its offset
// (8 bytes, big-endian) and the value as read from the topic, so that a
// restart can rank candidates by offset again.
const storedFormat = 1

func encodeStored(offset int64, value []byte) []byte {
	b := make([]byte, 9+len(value))
	b[0] = storedFormat
	binary.BigEndian.PutUint64(b[1:9], uint64(offset))
	copy(b[9:], value)
	return b
}

func decodeStored(b []byte) (int64, []byte, bool) {
	if len(b) < 9 || b[0] != storedFormat {
		return 0, nil, false
	}
	return int64(binary.BigEndian.Uint64(b[1:9])), b[9:], true
}

// gokaLogger sends goka's log lines to slog at info level.
type gokaLogger struct{ l *slog.Logger }

// Print logs goka's line at info level.
func (g gokaLogger) Print(a ...any) { g.l.Info(strings.TrimSpace(fmt.Sprint(a...))) }

// Println logs goka's line at info level.
func (g gokaLogger) Println(a ...any) { g.l.Info(strings.TrimSpace(fmt.Sprintln(a...))) }

// Printf logs goka's formatted line at info level.
func (g gokaLogger) Printf(f string, a ...any) {
	g.l.Info(strings.TrimSpace(fmt.Sprintf(f, a...)))
}
