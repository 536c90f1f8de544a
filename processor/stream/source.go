package stream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"github.com/krabka/krole/internal/ctxcall"
)

// OffsetFetch retries.
const (
	offsetFetchBackoffFirst = 10 * time.Millisecond
	offsetFetchBackoffMax   = 250 * time.Millisecond
	// versionOffsetFetch is the first version with RequireStable (KIP-447,
	// Kafka 2.5). A broker older than that cannot serve Run.
	versionOffsetFetch = 7
)

// committed returns, for each partition in parts, the offset to start
// reading at: the group's committed offset, or sarama.OffsetOldest when
// the group has none. It asks the group coordinator with RequireStable,
// so a transaction that still carries offsets for the group makes the
// coordinator answer UNSTABLE_OFFSET_COMMIT, and the question is asked
// again until it has ended. Retries are bounded by ctx and by the
// transport's transaction and request timeouts (a pending transaction
// ends within the transaction timeout); a failure after them ends Run.
func (r *runner) committed(ctx context.Context, client sarama.Client, parts []int32) (map[int32]int64, error) {
	cfg := r.tr.Config()
	budget := time.Now().Add(cfg.TxnTimeout + cfg.RequestTimeout)
	backoff := offsetFetchBackoffFirst
	for {
		offs, again, err := r.fetchOffsets(ctx, client, parts)
		if err == nil {
			return offs, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if !again || time.Now().Add(backoff).After(budget) {
			return nil, fmt.Errorf("stream: committed offsets of group %s: %w", r.cfg.Group, err)
		}
		if err := ctxcall.Sleep(ctx, backoff); err != nil {
			return nil, err
		}
		backoff = min(2*backoff, offsetFetchBackoffMax)
	}
}

// fetchOffsets sends one OffsetFetch and reports whether a failure is
// worth another try.
func (r *runner) fetchOffsets(ctx context.Context, client sarama.Client, parts []int32) (map[int32]int64, bool, error) {
	group, input := r.cfg.Group, r.cfg.Input
	coord, err := call(ctx, func() (*sarama.Broker, error) { return client.Coordinator(group) })
	if err != nil {
		return nil, true, fmt.Errorf("finding the coordinator: %w", err)
	}
	req := &sarama.OffsetFetchRequest{Version: versionOffsetFetch, ConsumerGroup: group, RequireStable: true}
	for _, p := range parts {
		req.AddPartition(input, p)
	}
	res, err := call(ctx, func() (*sarama.OffsetFetchResponse, error) { return coord.FetchOffset(req) })
	if err != nil {
		_, _ = call(ctx, func() (struct{}, error) { return struct{}{}, client.RefreshCoordinator(group) })
		return nil, true, fmt.Errorf("coordinator %s: %w", coord.Addr(), err)
	}
	offs := make(map[int32]int64, len(parts))
	switch res.Err {
	case sarama.ErrNoError:
	case sarama.ErrGroupIDNotFound:
		// No offset was ever committed for the group (real Kafka answers
		// -1 offsets instead; some brokers answer this).
		for _, p := range parts {
			offs[p] = sarama.OffsetOldest
		}
		return offs, false, nil
	case sarama.ErrNotCoordinatorForConsumer, sarama.ErrConsumerCoordinatorNotAvailable:
		_, _ = call(ctx, func() (struct{}, error) { return struct{}{}, client.RefreshCoordinator(group) })
		return nil, true, res.Err
	case sarama.ErrOffsetsLoadInProgress:
		return nil, true, res.Err
	default:
		return nil, false, res.Err
	}
	for _, p := range parts {
		blk := res.GetBlock(input, p)
		if blk == nil {
			return nil, true, fmt.Errorf("the coordinator answered without %s/%d", input, p)
		}
		switch blk.Err {
		case sarama.ErrNoError:
		case sarama.ErrUnstableOffsetCommit:
			return nil, true, fmt.Errorf("%s/%d: %w", input, p, blk.Err)
		default:
			return nil, false, fmt.Errorf("%s/%d: %w", input, p, blk.Err)
		}
		if blk.Offset < 0 {
			offs[p] = sarama.OffsetOldest
		} else {
			offs[p] = blk.Offset
		}
	}
	return offs, false, nil
}

// source reads the input partitions with read_committed isolation through
// sarama's consumer and merges them into one stream, keeping the order of
// each partition.
type source struct {
	cons sarama.Consumer
	pcs  []sarama.PartitionConsumer
	msgs chan *sarama.ConsumerMessage
	dead chan error // a partition consumer that stopped on its own
	stop chan struct{}
	wg   sync.WaitGroup
	log  *slog.Logger
}

// openSource starts a partition consumer at offsets[p] for every p.
// A start offset the partition no longer has is an error that resuming
// cannot cure; other failures are retriable.
func openSource(ctx context.Context, client sarama.Client, topic string, offsets map[int32]int64, buffer int, log *slog.Logger, bg *sync.WaitGroup) (*source, error) {
	cons, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		return nil, retriable{fmt.Errorf("stream: consumer: %w", err)}
	}
	s := &source{
		cons: cons,
		msgs: make(chan *sarama.ConsumerMessage, buffer),
		dead: make(chan error, len(offsets)),
		stop: make(chan struct{}),
		log:  log,
	}
	for p, off := range offsets {
		// Not abandoned on ctx (bounded by the client's timeouts), so a
		// partition consumer is never left open.
		pc, err := cons.ConsumePartition(topic, p, off)
		if err != nil {
			s.close(bg)
			if errors.Is(err, sarama.ErrOffsetOutOfRange) {
				return nil, fmt.Errorf("stream: %s/%d has no offset %d any more (deleted before it was processed?): %w", topic, p, off, err)
			}
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, retriable{fmt.Errorf("stream: consuming %s/%d from offset %d: %w", topic, p, off, err)}
		}
		s.pcs = append(s.pcs, pc)
		s.wg.Add(1)
		go s.forward(topic, p, pc)
	}
	return s, nil
}

// forward moves pc's messages into s.msgs until s.stop closes, and
// reports pc stopping on its own (an offset out of range) on s.dead.
func (s *source) forward(topic string, p int32, pc sarama.PartitionConsumer) {
	defer s.wg.Done()
	msgs, errs := pc.Messages(), pc.Errors()
	var last error
	for {
		select {
		case m, ok := <-msgs:
			if !ok {
				if last == nil {
					last = errors.New("no error reported")
				}
				s.dead <- fmt.Errorf("stream: the consumer of %s/%d stopped: %w", topic, p, last)
				return
			}
			select {
			case s.msgs <- m:
			case <-s.stop:
				return
			}
		case e, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			last = e.Err
			s.log.Warn("stream: input consumer", "topic", topic, "partition", p, "err", e.Err)
		case <-s.stop:
			return
		}
	}
}

// next returns the next batch: at least one record, at most limit, waiting
// up to linger after the first for more. It returns ctx.Err() when ctx
// ends first, and the error of a partition consumer that stopped.
func (s *source) next(ctx context.Context, limit int, linger time.Duration) ([]*sarama.ConsumerMessage, error) {
	var batch []*sarama.ConsumerMessage
	select {
	case m := <-s.msgs:
		batch = append(batch, m)
	case err := <-s.dead:
		return nil, err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if linger <= 0 {
		for len(batch) < limit {
			select {
			case m := <-s.msgs:
				batch = append(batch, m)
			default:
				return batch, nil
			}
		}
		return batch, nil
	}
	t := time.NewTimer(linger)
	defer t.Stop()
	for len(batch) < limit {
		select {
		case m := <-s.msgs:
			batch = append(batch, m)
		case <-t.C:
			return batch, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return batch, nil
}

// close stops the forwarding at once and closes the consumers in the
// background, counted in bg: a partition consumer stops only once its
// fetch in flight is answered, up to the consumer's fetch wait (500 ms)
// later, and the caller need not wait for that.
func (s *source) close(bg *sync.WaitGroup) {
	close(s.stop)
	s.wg.Wait()
	bg.Add(1)
	go func() {
		defer bg.Done()
		for _, pc := range s.pcs {
			pc.AsyncClose()
		}
		for _, pc := range s.pcs {
			_ = pc.Close() // waits until pc has stopped
		}
		_ = s.cons.Close()
	}()
}
