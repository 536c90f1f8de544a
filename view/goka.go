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

// This file is the glue between the view and goka v1.1.14. Three things
// are replaced:
//
//   - the consumer: built from fencing.Config.Sarama(), so it reads with
//     read_committed isolation (goka's default config reads uncommitted);
//   - the topic manager: goka's recovery reads a partition until it has been
//     handed the record at "newest offset - 1", and asks the topic manager
//     for that offset. The high watermark it would get is never reached when
//     a partition ends in a transaction marker or holds an open transaction,
//     and View.Recovered() would never turn true (and goka holds back every
//     other partition until all have recovered). tailTopicManager answers
//     with one past the last record a read_committed consumer is handed
//     below the last stable offset instead;
//   - the storage: the in-memory index is the table the lookups read; goka's
//     storage only persists it (LevelDB, with StateDir) or keeps the offset
//     (memory).
//
// goka's View closes neither its consumer nor its topic manager when Run
// returns; gokaResources does.

// gokaResources keeps what goka builds, to close it after goka's Run.
type gokaResources struct {
	mu        sync.Mutex
	consumers []sarama.Consumer
	tmgrs     []*tailTopicManager
}

func (r *gokaResources) consumerBuilder(v *View, sc *sarama.Config) goka.SaramaConsumerBuilder {
	return func(brokers []string, clientID string) (sarama.Consumer, error) {
		c := *sc
		c.ClientID = clientID
		cons, err := sarama.NewConsumer(brokers, &c)
		if err != nil {
			return nil, err
		}
		r.mu.Lock()
		r.consumers = append(r.consumers, cons)
		r.mu.Unlock()
		v.consumer.Store(&cons)
		return cons, nil
	}
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

// tailTopicManager is goka's topic manager with one answer changed: the
// newest offset of a role topic partition is one past the last record that
// a read_committed consumer is handed below the last stable offset (or the
// log start when there is none), which is what goka's recovery waits for.
type tailTopicManager struct {
	goka.TopicManager
	v      *View
	closed atomic.Bool
}

func (t *tailTopicManager) GetOffset(topic string, partition int32, which int64) (int64, error) {
	if which != sarama.OffsetNewest || topic != t.v.topic {
		return t.TopicManager.GetOffset(topic, partition, which)
	}
	ctx := t.v.runContext()
	pr := t.v.prober
	lsos, err := pr.listOffsets(ctx, []int32{partition}, sarama.OffsetNewest)
	if err != nil {
		return 0, err
	}
	last, err := pr.lastRecordBefore(ctx, partition, 0, lsos[partition])
	if err != nil {
		return 0, err
	}
	if last < 0 {
		return t.TopicManager.GetOffset(topic, partition, sarama.OffsetOldest)
	}
	return last + 1, nil
}

// Close closes the topic manager once.
func (t *tailTopicManager) Close() error {
	if !t.closed.CompareAndSwap(false, true) {
		return nil
	}
	return t.TopicManager.Close()
}

func (v *View) runContext() context.Context {
	v.mu.RLock()
	defer v.mu.RUnlock()
	if v.runCtx == nil {
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
		return &diskStore{Storage: st, v: v, p: partition}, nil
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

func (s *memStore) Open() error {
	s.v.seed(s.p, nil, -1)
	return nil
}

func (s *memStore) GetOffset(def int64) (int64, error) {
	if o := s.offset.Load(); o > 0 {
		return o - 1, nil
	}
	return def, nil
}

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
}

func (s *diskStore) Open() error {
	if err := s.Storage.Open(); err != nil {
		return err
	}
	it, err := s.Storage.Iterator()
	if err != nil {
		return fmt.Errorf("reading state of partition %d: %w", s.p, err)
	}
	var recs []storedRecord
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
		recs = append(recs, storedRecord{key: string(it.Key()), offset: off, value: append([]byte(nil), raw...)})
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
	s.v.seed(s.p, recs, off)
	return nil
}

// SetOffset records the partition's offset. goka's LevelDB storage treats
// offset 0 as "nothing stored" and never writes it, so a partition whose
// only record is at offset 0 would reread it after a restart (harmless, as
// the view ignores replays, but a reread nonetheless); write it here.
func (s *diskStore) SetOffset(o int64) error {
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

func (g gokaLogger) Print(a ...any)   { g.l.Info(strings.TrimSpace(fmt.Sprint(a...))) }
func (g gokaLogger) Println(a ...any) { g.l.Info(strings.TrimSpace(fmt.Sprintln(a...))) }
func (g gokaLogger) Printf(f string, a ...any) {
	g.l.Info(strings.TrimSpace(fmt.Sprintf(f, a...)))
}
