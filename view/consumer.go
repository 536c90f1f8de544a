package view

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"

	"github.com/krabka/krole/internal/kafkalog"
)

// This file is the view's own sarama.Consumer, handed to goka through
// goka.WithViewConsumerSaramaBuilder (goka.go says why and what goka relies
// on): raw read_committed Fetch requests on a connection per partition, each
// record tagged with [BatchHeader] or [ChunkHeader] from its batch header (a
// record's own headers are dropped, so neither can be forged). How it reads,
// recovers and closes: docs/DESIGN.md, "The view: its consumer".

// BatchHeader is the name of the header that the view's consumer sets on
// every record it hands to goka alone (not in a chunk message, see
// ChunkHeader): the record's batch producer id (8 bytes,
// big-endian), producer epoch (2 bytes) and flags (1 byte; bit 0: the
// batch is transactional). A plain, non-idempotent append has producer id
// -1.
const BatchHeader = "krole.batch"

// ChunkHeader is the name of the header of a chunk message: the message
// the view's consumer hands goka, in place of the records of one fetch
// answer, when the prepare hook has taken those records whole (see
// predecode.go). Its value is the offsets of the chunk's first and last
// records (8 bytes each, big-endian); the message's offset is the last
// one's, and it has no key and no value. Records never carry it: the
// consumer drops their own headers.
const ChunkHeader = "krole.chunk"

// fetched is one record of a fetch answer, as take leaves it: its offset
// and where sarama decoded it (a record of a batch, or a legacy message),
// from which the record handed to goka is made, or which the prepare hook
// reads.
type fetched struct {
	off int64
	rb  *sarama.RecordBatch  // the record's batch; nil for a legacy message
	r   *sarama.Record       // the record, in rb
	mb  *sarama.MessageBlock // the legacy message, when rb is nil
}

func (f *fetched) key() []byte {
	if f.rb == nil {
		return f.mb.Msg.Key
	}
	return f.r.Key
}

func (f *fetched) value() []byte {
	if f.rb == nil {
		return f.mb.Msg.Value
	}
	return f.r.Value
}

// batch is the record's batch header; a legacy message counts as a plain
// append.
func (f *fetched) batch() batchInfo {
	if f.rb == nil {
		return batchInfo{producerID: -1, epoch: -1}
	}
	return batchInfo{producerID: f.rb.ProducerID, epoch: f.rb.ProducerEpoch, transactional: f.rb.IsTransactional}
}

// timestamps are the record's timestamp and its batch's.
func (f *fetched) timestamps() (ts, block time.Time) {
	if f.rb == nil {
		return f.mb.Msg.Timestamp, time.Time{}
	}
	ts = f.rb.FirstTimestamp.Add(f.r.TimestampDelta)
	if f.rb.LogAppendTime {
		ts = f.rb.MaxTimestamp
	}
	return ts, f.rb.MaxTimestamp
}

// message is the record as goka is handed it, its batch header hdr (see
// BatchHeader) its only header.
func (f *fetched) message(topic string, partition int32, hdr []*sarama.RecordHeader) *sarama.ConsumerMessage {
	ts, block := f.timestamps()
	return &sarama.ConsumerMessage{Topic: topic, Partition: partition, Offset: f.off,
		Key: f.key(), Value: f.value(), Timestamp: ts, BlockTimestamp: block, Headers: hdr}
}

// fetchedChunk is the records of one fetch answer, on their way from
// fetchLoop to deliverLoop.
type fetchedChunk struct {
	recs []fetched
}

// chunkMessage is the chunk message of recs (at least one record).
func chunkMessage(topic string, partition int32, recs []fetched) *sarama.ConsumerMessage {
	first, last := &recs[0], &recs[len(recs)-1]
	b := make([]byte, 16)
	binary.BigEndian.PutUint64(b[0:8], uint64(first.off))
	binary.BigEndian.PutUint64(b[8:16], uint64(last.off))
	ts, block := last.timestamps()
	return &sarama.ConsumerMessage{Topic: topic, Partition: partition, Offset: last.off,
		Timestamp: ts, BlockTimestamp: block,
		Headers: []*sarama.RecordHeader{{Key: []byte(ChunkHeader), Value: b}}}
}

// decodeChunkHeader returns the offsets a chunk message's header names.
func decodeChunkHeader(v []byte) (first, last int64, ok bool) {
	if len(v) != 16 {
		return 0, 0, false
	}
	return int64(binary.BigEndian.Uint64(v[0:8])), int64(binary.BigEndian.Uint64(v[8:16])), true
}

// batchInfo is what the view learns from a record's batch header.
type batchInfo struct {
	producerID    int64
	epoch         int16
	transactional bool
}

func encodeBatchInfo(rb *sarama.RecordBatch) []*sarama.RecordHeader {
	b := make([]byte, 11)
	binary.BigEndian.PutUint64(b[0:8], uint64(rb.ProducerID))
	binary.BigEndian.PutUint16(b[8:10], uint16(rb.ProducerEpoch))
	if rb.IsTransactional {
		b[10] = 1
	}
	return []*sarama.RecordHeader{{Key: []byte(BatchHeader), Value: b}}
}

func decodeBatchInfo(v []byte) (batchInfo, bool) {
	if len(v) != 11 {
		return batchInfo{}, false
	}
	return batchInfo{
		producerID:    int64(binary.BigEndian.Uint64(v[0:8])),
		epoch:         int16(binary.BigEndian.Uint16(v[8:10])),
		transactional: v[10]&1 != 0,
	}, true
}

const (
	// consumerFetchVersion: read_committed, LSO, aborted transactions, log
	// start offset (Kafka 2.3+; the config says 2.8).
	consumerFetchVersion = 11
	// consumerFetchMaxBytes bounds a fetch answer; a partition's share is
	// consumerPartitionMaxBytes, a Kafka consumer's default: smaller
	// answers keep fetching, decoding and applying side by side, and cost
	// the broker less to assemble. A first batch that is larger still
	// comes whole (KIP-74).
	consumerFetchMaxBytes     = 16 << 20
	consumerPartitionMaxBytes = 1 << 20
	// fetchFailuresReported: failed fetches in a row after which the error
	// is also sent on Errors.
	fetchFailuresReported = 3
	fetchRetryMin         = 50 * time.Millisecond
	fetchRetryMax         = time.Second
)

var errConsumerClosed = errors.New("view: the consumer is closed")

// fetchConsumer is the view's sarama.Consumer (see the top of this file).
type fetchConsumer struct {
	client     sarama.Client
	conf       *sarama.Config
	backwards  func(*OffsetsWentBackwardsError)                          // may be nil
	prepare    func(topic string, partition int32, chunk []fetched) bool // may be nil; see predecode.go
	answered   func()                                                    // may be nil; called for each fetch answer (see health.go)
	mu         sync.Mutex
	partitions map[string]map[int32]*fetchPartition
	closed     bool
}

func newFetchConsumer(client sarama.Client, conf *sarama.Config, backwards func(*OffsetsWentBackwardsError)) *fetchConsumer {
	return &fetchConsumer{client: client, conf: conf, backwards: backwards, partitions: map[string]map[int32]*fetchPartition{}}
}

// Topics returns the cluster's topics, from the client's metadata.
func (c *fetchConsumer) Topics() ([]string, error) { return c.client.Topics() }

// Partitions returns the topic's partition ids, from the client's metadata.
func (c *fetchConsumer) Partitions(topic string) ([]int32, error) { return c.client.Partitions(topic) }

// ConsumePartition starts reading topic/partition at offset (or at
// sarama.OffsetOldest / sarama.OffsetNewest, resolved with one ListOffsets
// round trip). It does not block on the broker otherwise: a leader that
// cannot be reached shows as errors on Errors. A second consumer of the
// same partition gives sarama.ConfigurationError, as sarama's does.
func (c *fetchConsumer) ConsumePartition(topic string, partition int32, offset int64) (sarama.PartitionConsumer, error) {
	if offset == sarama.OffsetOldest || offset == sarama.OffsetNewest {
		o, err := c.client.GetOffset(topic, partition, offset)
		if err != nil {
			return nil, err
		}
		offset = o
	}
	if offset < 0 {
		return nil, sarama.ErrOffsetOutOfRange
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, errConsumerClosed
	}
	if c.partitions[topic][partition] != nil {
		return nil, sarama.ConfigurationError("that topic/partition is already being consumed")
	}
	pc := &fetchPartition{
		c:         c,
		topic:     topic,
		partition: partition,
		next:      offset,
		messages:  make(chan *sarama.ConsumerMessage, messagesBuffer(c)),
		errors:    make(chan *sarama.ConsumerError, c.conf.ChannelBufferSize),
		chunks:    make(chan fetchedChunk, 2),
		dying:     make(chan struct{}),
		ended:     make(chan struct{}),
		resume:    make(chan struct{}, 1),
		rewound:   make(chan *OffsetsWentBackwardsError, 1),
	}
	pc.hwm.Store(-1)
	if c.partitions[topic] == nil {
		c.partitions[topic] = map[int32]*fetchPartition{}
	}
	c.partitions[topic][partition] = pc
	pc.wg.Add(2)
	go pc.fetchLoop()
	go pc.deliverLoop()
	go func() {
		pc.wg.Wait()
		// Leave the map before Messages and Errors close, as sarama's
		// consumer does: goka drains both after AsyncClose and then, at
		// once, consumes the same partition again.
		c.mu.Lock()
		if c.partitions[topic][partition] == pc {
			delete(c.partitions[topic], partition)
		}
		c.mu.Unlock()
		close(pc.messages)
		close(pc.errors)
		close(pc.ended)
	}()
	return pc, nil
}

// messagesBuffer is the capacity of a partition consumer's Messages: the
// config's ChannelBufferSize when records are handed one by one, and
// chunkMessagesBuffer when the prepare hook takes them in chunks (a
// message is then a whole fetch answer, decoded: a few keep goka busy, and
// more would only hold the table's records in memory ahead of it).
func messagesBuffer(c *fetchConsumer) int {
	if c.prepare != nil {
		return chunkMessagesBuffer
	}
	return c.conf.ChannelBufferSize
}

const chunkMessagesBuffer = 2

// HighWaterMarks returns each partition consumer's high watermark, as its
// latest fetch answer gave it (partitions not fetched yet are absent).
func (c *fetchConsumer) HighWaterMarks() map[string]map[int32]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]map[int32]int64, len(c.partitions))
	for t, ps := range c.partitions {
		out[t] = make(map[int32]int64, len(ps))
		for p, pc := range ps {
			if h := pc.hwm.Load(); h >= 0 {
				out[t][p] = h
			}
		}
	}
	return out
}

// Close closes every partition consumer still open and waits for them. It
// does not close the client.
func (c *fetchConsumer) Close() error {
	c.mu.Lock()
	c.closed = true
	var pcs []*fetchPartition
	for _, ps := range c.partitions {
		for _, pc := range ps {
			pcs = append(pcs, pc)
		}
	}
	c.mu.Unlock()
	for _, pc := range pcs {
		pc.AsyncClose()
		go func() { // goka may have stopped reading: drain for it
			for range pc.messages {
			}
		}()
		go func() {
			for range pc.errors {
			}
		}()
	}
	for _, pc := range pcs {
		<-pc.ended
	}
	return nil
}

func (c *fetchConsumer) each(f func(*fetchPartition)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ps := range c.partitions {
		for _, pc := range ps {
			f(pc)
		}
	}
}

// Pause stops fetching the given partitions after their fetch in flight.
func (c *fetchConsumer) Pause(tps map[string][]int32) {
	c.each(func(pc *fetchPartition) {
		for _, p := range tps[pc.topic] {
			if p == pc.partition {
				pc.Pause()
			}
		}
	})
}

// Resume resumes the given partitions.
func (c *fetchConsumer) Resume(tps map[string][]int32) {
	c.each(func(pc *fetchPartition) {
		for _, p := range tps[pc.topic] {
			if p == pc.partition {
				pc.Resume()
			}
		}
	})
}

// PauseAll pauses every partition consumer.
func (c *fetchConsumer) PauseAll() { c.each(func(pc *fetchPartition) { pc.Pause() }) }

// ResumeAll resumes every partition consumer.
func (c *fetchConsumer) ResumeAll() { c.each(func(pc *fetchPartition) { pc.Resume() }) }

// fetchPartition is one partition consumer. fetchLoop owns next and the
// aborted-producer set; deliverLoop owns messages.
type fetchPartition struct {
	c         *fetchConsumer
	topic     string
	partition int32

	next int64 // the next offset to fetch
	// conn is this consumer's own connection to the leader; nil when none.
	// fetchLoop opens it; AsyncClose closes it too, so that a fetch in
	// flight ends at once.
	conn atomic.Pointer[sarama.Broker]

	messages chan *sarama.ConsumerMessage
	errors   chan *sarama.ConsumerError
	chunks   chan fetchedChunk // fetchLoop to deliverLoop
	dying    chan struct{}     // closed by AsyncClose
	ended    chan struct{}     // closed when both loops have ended
	closing  sync.Once
	wg       sync.WaitGroup
	hwm      atomic.Int64
	paused   atomic.Bool
	resume   chan struct{} // capacity 1
	// rewound carries a probe's finding that the partition's offsets went
	// backwards (see fetchConsumer.rewind); capacity 1.
	rewound chan *OffsetsWentBackwardsError

	// The latest fetch answer, for View.ConfirmRecent (confirm_recent.go).
	recent   atomic.Pointer[answer]
	sentAt   time.Time // fetchLoop only: when the fetch in flight was sent
	handedTo int64     // fetchLoop only: past the last record handed over; 0 none
}

// AsyncClose stops the partition consumer: the fetch in flight is cut
// short (its connection is closed), then Messages and Errors are closed.
// It does not block.
func (pc *fetchPartition) AsyncClose() {
	pc.closing.Do(func() {
		close(pc.dying)
		pc.disconnect()
	})
}

// Close stops the partition consumer and waits until it has stopped,
// draining Messages; it returns the errors left on Errors as
// sarama.ConsumerErrors, or nil.
func (pc *fetchPartition) Close() error {
	pc.AsyncClose()
	go func() {
		for range pc.messages {
		}
	}()
	var errs sarama.ConsumerErrors
	for e := range pc.errors {
		errs = append(errs, e)
	}
	<-pc.ended
	if len(errs) > 0 {
		return errs
	}
	return nil
}

// Messages returns the records, in offset order. It is closed after
// AsyncClose or Close.
func (pc *fetchPartition) Messages() <-chan *sarama.ConsumerMessage { return pc.messages }

// Errors returns the errors (see the top of this file). It is closed after
// AsyncClose or Close.
func (pc *fetchPartition) Errors() <-chan *sarama.ConsumerError { return pc.errors }

// HighWaterMarkOffset is the high watermark of the latest fetch answer, or
// -1 before the first.
func (pc *fetchPartition) HighWaterMarkOffset() int64 { return pc.hwm.Load() }

// Pause stops fetching after the fetch in flight.
func (pc *fetchPartition) Pause() { pc.paused.Store(true) }

// Resume resumes fetching.
func (pc *fetchPartition) Resume() {
	pc.paused.Store(false)
	select {
	case pc.resume <- struct{}{}:
	default:
	}
}

// IsPaused reports whether the partition consumer is paused.
func (pc *fetchPartition) IsPaused() bool { return pc.paused.Load() }

// deliverLoop hands the fetched records to goka, in order, until the
// consumer is closed.
func (pc *fetchPartition) deliverLoop() {
	defer pc.wg.Done()
	for {
		select {
		case <-pc.dying:
			return
		case chunk, ok := <-pc.chunks:
			if !ok { // the fetcher ended, which it does only when closed
				<-pc.dying
				return
			}
			// The hook runs here, not on the fetch goroutine, so that the
			// next fetch is under way while it decodes.
			if pc.c.prepare != nil && pc.c.prepare(pc.topic, pc.partition, chunk.recs) {
				select {
				case pc.messages <- chunkMessage(pc.topic, pc.partition, chunk.recs):
				case <-pc.dying:
					return
				}
				continue
			}
			var rb *sarama.RecordBatch // the batch of hdr
			var hdr []*sarama.RecordHeader
			for i := range chunk.recs {
				f := &chunk.recs[i]
				switch {
				case f.rb == nil:
					hdr, rb = []*sarama.RecordHeader{{Key: []byte(BatchHeader), Value: plainBatch}}, nil
				case f.rb != rb || hdr == nil:
					hdr, rb = encodeBatchInfo(f.rb), f.rb // shared by the batch's records
				}
				m := f.message(pc.topic, pc.partition, hdr)
				select { // most sends find room: no select over two channels
				case pc.messages <- m:
					continue
				default:
				}
				select {
				case pc.messages <- m:
				case <-pc.dying:
					return
				}
			}
		}
	}
}

func (pc *fetchPartition) isDying() bool {
	select {
	case <-pc.dying:
		return true
	default:
		return false
	}
}

// pause waits for d, or until the consumer is closed (false).
func (pc *fetchPartition) pause(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-pc.dying:
		return false
	}
}

// fetchLoop fetches until the consumer is closed or the partition's
// offsets went backwards.
func (pc *fetchPartition) fetchLoop() {
	defer pc.wg.Done()
	defer close(pc.chunks)
	defer pc.disconnect()
	aborted := map[int64]bool{}
	failures := 0
	backoff := fetchRetryMin
	fail := func(err error) bool {
		if pc.isDying() {
			return false
		}
		failures++
		pc.disconnect()
		_ = pc.c.client.RefreshMetadata(pc.topic)
		if failures >= fetchFailuresReported {
			pc.report(err)
		}
		if !pc.pause(backoff) {
			return false
		}
		backoff = min(2*backoff, fetchRetryMax)
		return true
	}
	for !pc.isDying() {
		if pc.paused.Load() {
			select {
			case <-pc.resume:
			case <-pc.dying:
				return
			case <-time.After(fetchMaxWait):
			}
			continue
		}
		if pc.wentBackwards() {
			return
		}
		blk, err := pc.fetch()
		if pc.wentBackwards() {
			return
		}
		if err != nil {
			if !fail(err) {
				return
			}
			continue
		}
		switch {
		case errors.Is(blk.Err, sarama.ErrNoError):
		case errors.Is(blk.Err, sarama.ErrOffsetOutOfRange):
			ok, err := pc.outOfRange()
			if err != nil {
				if !fail(err) {
					return
				}
				continue
			}
			if !ok { // the offsets went backwards: reported; goka closes us
				<-pc.dying
				return
			}
			clear(aborted)
			continue
		default:
			if !fail(fmt.Errorf("fetch %s/%d at offset %d: %w", pc.topic, pc.partition, pc.next, blk.Err)) {
				return
			}
			continue
		}
		failures, backoff = 0, fetchRetryMin
		pc.hwm.Store(blk.HighWaterMarkOffset)
		chunk := pc.take(blk, aborted)
		pc.noteAnswer(blk, chunk)
		if len(chunk) == 0 {
			continue
		}
		select {
		case pc.chunks <- fetchedChunk{recs: chunk}:
		case <-pc.dying:
			return
		}
	}
}

// wentBackwards reports whether a probe found the partition's offsets
// gone backwards (fetchConsumer.rewind); if so, it does what outOfRange
// does on finding it, tells the view and sends the error on Errors, and
// waits for goka to close the consumer.
func (pc *fetchPartition) wentBackwards() bool {
	select {
	case e := <-pc.rewound:
		if pc.c.backwards != nil {
			pc.c.backwards(e)
		}
		pc.report(e)
		<-pc.dying
		return true
	default:
		return false
	}
}

// rewind tells the consumer of topic/partition, if any, that a probe
// found the partition's offsets gone backwards (its end below what the
// view had read): it stops fetching and reports it as when a fetch is
// answered OFFSET_OUT_OF_RANGE. Without this, a partition written past
// the view's next offset before the consumer's next fetch (a member's
// heartbeats, every heartbeat interval) is never found gone backwards by the
// consumer, goka never resets it, and the partition stays marked rewound
// (see rebuild.go). The fetch in flight is cut short.
func (c *fetchConsumer) rewind(e *OffsetsWentBackwardsError) {
	c.mu.Lock()
	pc := c.partitions[e.Topic][e.Partition]
	c.mu.Unlock()
	if pc == nil {
		return
	}
	select {
	case pc.rewound <- e:
	default: // one is on its way already
	}
	pc.disconnect()
}

// report sends err on Errors unless the consumer is closing or nobody reads.
func (pc *fetchPartition) report(err error) {
	select {
	case pc.errors <- &sarama.ConsumerError{Topic: pc.topic, Partition: pc.partition, Err: err}:
	case <-pc.dying:
	default: // Errors is full: goka restarts on the first one anyway
	}
}

// fetch sends one read_committed fetch at pc.next to the partition leader
// on this consumer's own connection, opening it when needed.
func (pc *fetchPartition) fetch() (*sarama.FetchResponseBlock, error) {
	b := pc.conn.Load()
	if b == nil {
		leader, err := pc.c.client.Leader(pc.topic, pc.partition)
		if err != nil {
			return nil, fmt.Errorf("leader of %s/%d: %w", pc.topic, pc.partition, err)
		}
		b = sarama.NewBroker(leader.Addr())
		if err := b.Open(pc.c.conf); err != nil {
			return nil, fmt.Errorf("connecting to %s: %w", leader.Addr(), err)
		}
		if !pc.conn.CompareAndSwap(nil, b) || pc.isDying() {
			_ = b.Close()
			return nil, errConsumerClosed
		}
	}
	req := &sarama.FetchRequest{
		Version:      consumerFetchVersion,
		MaxWaitTime:  int32(pc.c.conf.Consumer.MaxWaitTime.Milliseconds()),
		MinBytes:     1,
		MaxBytes:     consumerFetchMaxBytes,
		Isolation:    sarama.ReadCommitted,
		SessionID:    0,
		SessionEpoch: -1, // no fetch session: a full fetch each time
	}
	req.AddBlock(pc.topic, pc.partition, pc.next, consumerPartitionMaxBytes, -1)
	pc.sentAt = time.Now()
	resp, err := b.Fetch(req)
	if err != nil {
		return nil, fmt.Errorf("fetch %s/%d at offset %d from %s: %w", pc.topic, pc.partition, pc.next, b.Addr(), err)
	}
	if pc.c.answered != nil {
		pc.c.answered()
	}
	blk := resp.GetBlock(pc.topic, pc.partition)
	if blk == nil {
		return nil, fmt.Errorf("fetch %s/%d: %w", pc.topic, pc.partition, sarama.ErrIncompleteResponse)
	}
	return blk, nil
}

func (pc *fetchPartition) disconnect() {
	if b := pc.conn.Swap(nil); b != nil {
		_ = b.Close()
	}
}

// outOfRange handles OFFSET_OUT_OF_RANGE at pc.next: below the log start
// it moves pc.next there and returns true; past the high watermark it
// reports that the offsets went backwards and returns false.
func (pc *fetchPartition) outOfRange() (bool, error) {
	_ = pc.c.client.RefreshMetadata(pc.topic)
	start, err := pc.c.client.GetOffset(pc.topic, pc.partition, sarama.OffsetOldest)
	if err != nil {
		return false, fmt.Errorf("log start of %s/%d: %w", pc.topic, pc.partition, err)
	}
	end, err := pc.c.client.GetOffset(pc.topic, pc.partition, sarama.OffsetNewest)
	if err != nil {
		return false, fmt.Errorf("log end of %s/%d: %w", pc.topic, pc.partition, err)
	}
	switch {
	case pc.next < start:
		pc.next = start
		return true, nil
	case pc.next > end:
		e := &OffsetsWentBackwardsError{Topic: pc.topic, Partition: pc.partition, Offset: pc.next, End: end}
		if pc.c.backwards != nil {
			pc.c.backwards(e)
		}
		pc.report(e)
		return false, nil
	default:
		return true, nil // the range moved between the two answers: fetch again
	}
}

// take turns the batches of one fetch answer into records for goka,
// dropping control batches and aborted transactions, and moves pc.next
// past every batch. aborted holds the producers inside an aborted
// transaction at pc.next; it carries over from one fetch to the next.
func (pc *fetchPartition) take(blk *sarama.FetchResponseBlock, aborted map[int64]bool) []fetched {
	abortedTxns := append([]*sarama.AbortedTransaction(nil), blk.AbortedTransactions...)
	kafkalog.SortAborted(abortedTxns)
	n := 0
	for _, rs := range blk.RecordsSet {
		switch {
		case rs == nil:
		case rs.RecordBatch != nil:
			n += len(rs.RecordBatch.Records)
		case rs.MsgSet != nil:
			n += len(rs.MsgSet.Messages)
		}
	}
	out := make([]fetched, 0, n)
	for _, rs := range blk.RecordsSet {
		if rs == nil {
			continue
		}
		rb := rs.RecordBatch
		if rb == nil { // the legacy format (magic < 2): Kafka 0.11+ writes batches
			if rs.MsgSet != nil {
				for _, mb := range rs.MsgSet.Messages {
					if mb.Offset >= pc.next && mb.Msg != nil {
						out = append(out, fetched{off: mb.Offset, mb: mb})
						pc.next = mb.Offset + 1
					}
				}
			}
			continue
		}
		if rb.PartialTrailingRecord {
			break
		}
		last := rb.FirstOffset + int64(rb.LastOffsetDelta)
		if last < pc.next {
			continue
		}
		for len(abortedTxns) > 0 && abortedTxns[0].FirstOffset <= last {
			aborted[abortedTxns[0].ProducerID] = true
			abortedTxns = abortedTxns[1:]
		}
		switch {
		case rb.Control:
			if kafkalog.IsAbortMarker(rb) {
				delete(aborted, rb.ProducerID)
			}
		case rb.IsTransactional && aborted[rb.ProducerID]:
			// aborted data: never handed over
		default:
			for _, r := range rb.Records {
				if off := rb.FirstOffset + r.OffsetDelta; off >= pc.next {
					out = append(out, fetched{off: off, rb: rb, r: r})
				}
			}
		}
		pc.next = last + 1
	}
	return out
}

// plainBatch is the batch header of a record in the legacy format: no
// producer, not transactional.
var plainBatch = func() []byte {
	b := make([]byte, 11)
	binary.BigEndian.PutUint64(b[0:8], ^uint64(0))
	binary.BigEndian.PutUint16(b[8:10], ^uint16(0))
	return b
}()
