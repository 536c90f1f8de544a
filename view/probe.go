package view

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/IBM/sarama"

	"github.com/krabka/krole/internal/ctxcall"
	"github.com/krabka/krole/internal/kafkalog"
)

// prober reads the ends of the role topic's partitions with read_committed
// isolation, straight from the partition leaders: what "caught up" means
// ([View.WaitCaughtUp]). A consumer never sees the offsets of transaction
// markers or aborted records, so the prober finds the last record below
// the last stable offset that a read_committed consumer is handed; once
// the view has applied it, the view is caught up.
//
// Every call of a probe returns as soon as its ctx ends (ctxcall.DoOr); an
// abandoned broker request has its broker's connections reset (conns), a
// metadata call runs on until the client's timeouts or Run's shutdown.
// inflight, when set, counts the calls still running, for Run to wait for
// (bounded) before it closes the client.
type prober struct {
	client sarama.Client
	topic  string
	// answered, when set, is called after each round trip a broker
	// answered (see health.go); it must not block.
	answered func()
	// conns, when set, is the dialer of client's connections (see above).
	conns *ctxcall.Conns
	// inflight, when set, counts the calls running (see above).
	inflight *sync.WaitGroup
}

// call runs fn, a call of the client that blocks, and returns its result
// or ctx's error as soon as ctx ends.
func call[T any](ctx context.Context, pr *prober, fn func() (T, error)) (T, error) {
	return ctxcall.Do(ctx, pr.inflight, fn)
}

// send runs fn, a request to broker b, and returns its result or ctx's
// error as soon as ctx ends; then the connections to b are reset, so the
// abandoned request ends too.
func send[T any](ctx context.Context, pr *prober, b *sarama.Broker, fn func() (T, error)) (T, error) {
	return ctxcall.DoOr(ctx, pr.inflight, fn, func() {
		if pr.conns != nil {
			pr.conns.Close(b.Addr())
		}
	})
}

// refresh refreshes the topic's metadata, bounded by ctx.
func (pr *prober) refresh(ctx context.Context) error {
	_, err := call(ctx, pr, func() (struct{}, error) { return struct{}{}, pr.client.RefreshMetadata(pr.topic) })
	return err
}

// leader returns the leader of partition p, bounded by ctx (the client
// refreshes its metadata when it does not know it).
func (pr *prober) leader(ctx context.Context, p int32) (*sarama.Broker, error) {
	return call(ctx, pr, func() (*sarama.Broker, error) { return pr.client.Leader(pr.topic, p) })
}

// answer records a broker's answer (see prober.answered).
func (pr *prober) answer() {
	if pr.answered != nil {
		pr.answered()
	}
}

// probeWindow is the first window (in offsets) read back from the last
// stable offset when looking for the last record; it grows eightfold while
// the window holds only markers and aborted records.
const probeWindow = 32

// probeMaxBytes bounds one partition's share of a probe fetch. The broker
// still returns a first batch that is larger (KIP-74).
const probeMaxBytes = 256 << 10

var errOutOfRange = errors.New("offset out of range")

// partitions returns the partition ids of the topic, refreshing metadata.
func (pr *prober) partitions(ctx context.Context) ([]int32, error) {
	if err := pr.refresh(ctx); err != nil {
		return nil, fmt.Errorf("metadata of topic %s: %w", pr.topic, err)
	}
	ps, err := pr.client.Partitions(pr.topic)
	if err != nil {
		return nil, fmt.Errorf("partitions of topic %s: %w", pr.topic, err)
	}
	return ps, nil
}

// listOffsets asks each partition's leader for an offset: sarama.OffsetNewest
// with read_committed isolation gives the last stable offset (LSO), and
// sarama.OffsetOldest gives the log start offset. One request per leader.
func (pr *prober) listOffsets(ctx context.Context, parts []int32, which int64) (map[int32]int64, error) {
	out := make(map[int32]int64, len(parts))
	todo := parts
	for attempt := 0; len(todo) > 0; attempt++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		byLeader := map[*sarama.Broker][]int32{}
		for _, p := range todo {
			b, err := pr.leader(ctx, p)
			if err != nil {
				return nil, fmt.Errorf("leader of %s/%d: %w", pr.topic, p, err)
			}
			byLeader[b] = append(byLeader[b], p)
		}
		var retry []int32
		var lastErr error
		for b, ps := range byLeader {
			req := sarama.NewOffsetRequest(pr.client.Config().Version)
			req.IsolationLevel = sarama.ReadCommitted
			for _, p := range ps {
				req.AddBlock(pr.topic, p, which, 1)
			}
			resp, err := send(ctx, pr, b, func() (*sarama.OffsetResponse, error) { return b.GetAvailableOffsets(req) })
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if err != nil {
				lastErr = fmt.Errorf("list offsets at broker %s: %w", b.Addr(), err)
				retry = append(retry, ps...)
				continue
			}
			pr.answer()
			for _, p := range ps {
				blk := resp.GetBlock(pr.topic, p)
				switch {
				case blk == nil:
					lastErr = fmt.Errorf("list offsets of %s/%d: %w", pr.topic, p, sarama.ErrIncompleteResponse)
					retry = append(retry, p)
				case !errors.Is(blk.Err, sarama.ErrNoError):
					lastErr = fmt.Errorf("list offsets of %s/%d: %w", pr.topic, p, blk.Err)
					retry = append(retry, p)
				case resp.Version == 0 && len(blk.Offsets) > 0:
					out[p] = blk.Offsets[0]
				default:
					out[p] = blk.Offset
				}
			}
		}
		if len(retry) == 0 {
			break
		}
		if attempt >= 2 {
			return nil, lastErr
		}
		_ = pr.refresh(ctx)
		todo = retry
	}
	return out, nil
}

// tail is what one read_committed fetch says about [from, until).
type tail struct {
	last    int64 // highest offset of a record a consumer is handed; -1 if none
	scanned int64 // every offset below scanned was looked at (>= from)
	end     bool  // nothing more below until is stored
}

// fetchTail fetches partition p from offset from with read_committed
// isolation and reports the highest offset in [from, until) of a record that
// a read_committed consumer is handed: not a control record (transaction
// marker) and not part of an aborted transaction.
func (pr *prober) fetchTail(ctx context.Context, p int32, from, until int64) (tail, error) {
	blk, err := pr.fetchCommitted(ctx, p, from)
	if err != nil {
		return tail{}, err
	}
	return scanBlock(blk, from, until), nil
}

// ends is what one read_committed fetch from a partition's read mark says
// of its end (see [prober.fetchEnds]).
type ends struct {
	lso, hwm int64 // the partition's last stable offset and high watermark
	tail     tail  // the records in [from, lso) the fetch held
}

// fetchEnds fetches partition p from offset from with read_committed
// isolation, in one round trip: the answer carries the partition's last
// stable offset and high watermark (Fetch v4 and later), and the records a
// read_committed consumer is handed from from up to the last stable
// offset, as far as the answer's size allows (tail.end says whether it
// reached it). An offset outside the partition (the log went backwards, or
// was deleted below from) is errOutOfRange.
func (pr *prober) fetchEnds(ctx context.Context, p int32, from int64) (ends, error) {
	blk, err := pr.fetchCommitted(ctx, p, from)
	if err != nil {
		return ends{}, err
	}
	if blk.LastStableOffset < 0 || blk.HighWaterMarkOffset < blk.LastStableOffset {
		return ends{}, fmt.Errorf("fetch %s/%d: no last stable offset in the answer (%d, high watermark %d)",
			pr.topic, p, blk.LastStableOffset, blk.HighWaterMarkOffset)
	}
	e := ends{lso: blk.LastStableOffset, hwm: blk.HighWaterMarkOffset, tail: tail{last: -1, scanned: from, end: true}}
	if from < e.lso {
		e.tail = scanBlock(blk, from, e.lso)
	}
	return e, nil
}

// fetchCommitted fetches partition p from offset from with read_committed
// isolation, without waiting, from its leader.
func (pr *prober) fetchCommitted(ctx context.Context, p int32, from int64) (*sarama.FetchResponseBlock, error) {
	b, err := pr.leader(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("leader of %s/%d: %w", pr.topic, p, err)
	}
	req := &sarama.FetchRequest{
		Version:      11,
		MaxWaitTime:  0,
		MinBytes:     0,
		MaxBytes:     probeMaxBytes,
		Isolation:    sarama.ReadCommitted,
		SessionID:    0,
		SessionEpoch: -1,
	}
	req.AddBlock(pr.topic, p, from, probeMaxBytes, -1)
	resp, err := send(ctx, pr, b, func() (*sarama.FetchResponse, error) { return b.Fetch(req) })
	if err != nil {
		return nil, fmt.Errorf("fetch %s/%d at %d: %w", pr.topic, p, from, err)
	}
	pr.answer()
	blk := resp.GetBlock(pr.topic, p)
	if blk == nil {
		return nil, fmt.Errorf("fetch %s/%d: %w", pr.topic, p, sarama.ErrIncompleteResponse)
	}
	switch {
	case errors.Is(blk.Err, sarama.ErrOffsetOutOfRange):
		return nil, errOutOfRange
	case !errors.Is(blk.Err, sarama.ErrNoError):
		return nil, fmt.Errorf("fetch %s/%d at %d: %w", pr.topic, p, from, blk.Err)
	}
	return blk, nil
}

// scanBlock walks the batches of one fetch response, dropping control
// batches and the batches of aborted transactions the way a read_committed
// consumer does (the same rule as sarama's consumer and the Java client).
func scanBlock(blk *sarama.FetchResponseBlock, from, until int64) tail {
	t := tail{last: -1, scanned: from}
	aborted := append([]*sarama.AbortedTransaction(nil), blk.AbortedTransactions...)
	sort.Slice(aborted, func(i, j int) bool { return aborted[i].FirstOffset < aborted[j].FirstOffset })
	abortedPIDs := map[int64]bool{}
	complete := 0
	for _, rs := range blk.RecordsSet {
		if rs == nil {
			continue
		}
		if rs.MsgSet != nil { // legacy format: no transactions
			if rs.MsgSet.PartialTrailingMessage && len(rs.MsgSet.Messages) == 0 {
				break
			}
			for _, mb := range rs.MsgSet.Messages {
				if mb.Offset >= from && mb.Offset < until && mb.Offset > t.last {
					t.last = mb.Offset
				}
				if mb.Offset+1 > t.scanned {
					t.scanned = mb.Offset + 1
				}
			}
			complete++
			continue
		}
		rb := rs.RecordBatch
		if rb == nil || rb.PartialTrailingRecord {
			break
		}
		if rb.FirstOffset >= until {
			t.end = true
			break
		}
		complete++
		lastOff := rb.FirstOffset + int64(rb.LastOffsetDelta)
		for len(aborted) > 0 && aborted[0].FirstOffset <= lastOff {
			abortedPIDs[aborted[0].ProducerID] = true
			aborted = aborted[1:]
		}
		if lastOff+1 > t.scanned {
			t.scanned = lastOff + 1
		}
		if rb.Control {
			if kafkalog.IsAbortMarker(rb) {
				delete(abortedPIDs, rb.ProducerID)
			}
			continue
		}
		if rb.IsTransactional && abortedPIDs[rb.ProducerID] {
			continue
		}
		for _, r := range rb.Records {
			off := rb.FirstOffset + r.OffsetDelta
			if off >= from && off < until && off > t.last {
				t.last = off
			}
		}
	}
	if complete == 0 || t.scanned >= until {
		t.end = true
	}
	return t
}

// scanRange reads [from, until) forward and returns the highest offset of a
// record a read_committed consumer is handed, or -1.
func (pr *prober) scanRange(ctx context.Context, p int32, from, until int64) (int64, error) {
	last := int64(-1)
	for from < until {
		if err := ctx.Err(); err != nil {
			return -1, err
		}
		t, err := pr.fetchTail(ctx, p, from, until)
		if err != nil {
			return -1, err
		}
		if t.last > last {
			last = t.last
		}
		if t.end || t.scanned <= from {
			break
		}
		from = t.scanned
	}
	return last, nil
}

// lastRecordBefore returns the highest offset in [floor, until) of a record
// that a read_committed consumer of partition p is handed, or -1 when
// [floor, until) holds only transaction markers and aborted records (or
// nothing). It reads backwards from until in growing windows, so its cost
// is that of the partition's tail of markers and aborted records, not of
// the partition.
func (pr *prober) lastRecordBefore(ctx context.Context, p int32, floor, until int64) (int64, error) {
	if floor < 0 {
		floor = 0
	}
	hi := until
	for w := int64(probeWindow); hi > floor; w *= 8 {
		lo := max(until-w, floor)
		last, err := pr.scanRange(ctx, p, lo, hi)
		if errors.Is(err, errOutOfRange) {
			// lo is below the log start (records deleted) or the log
			// was truncated: clamp to what the partition holds.
			starts, lerr := pr.listOffsets(ctx, []int32{p}, sarama.OffsetOldest)
			if lerr != nil {
				return -1, lerr
			}
			if s := starts[p]; s > floor {
				floor = s
				continue
			}
			return -1, err
		}
		if err != nil {
			return -1, err
		}
		if last >= 0 {
			return last, nil
		}
		hi = lo
	}
	return -1, nil
}
