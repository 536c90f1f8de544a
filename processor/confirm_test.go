package processor_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/rolestate"
	"github.com/krabka/krole/view"
)

// confirmSource is a view as a member's processor.Source, with a Confirm
// of its own: ListOffsets at the partition's leader for the last stable
// offset (read_committed) and the high watermark (read_uncommitted); when
// they differ, the producer id of the transactional batch at the last
// stable offset (the open transaction that holds readers back), read
// with read_uncommitted; then the view's WaitCaughtUp and the role's
// state. It is what (*view.View).Confirm does (written in parallel in
// package view); once that is in, the integration tests can hand the
// view to the member as it is.
type confirmSource struct {
	*view.View
	client sarama.Client
	topic  string
}

// source wraps v for a member, with a sarama client of its own closed
// when the test ends.
func (e *env) source(v *view.View) *confirmSource {
	e.t.Helper()
	client, err := sarama.NewClient(e.c.Config.Brokers, e.c.Sarama(e.t))
	require.NoError(e.t, err)
	e.t.Cleanup(func() { _ = client.Close() })
	return &confirmSource{View: v, client: client, topic: e.c.Config.Topic}
}

func (s *confirmSource) Confirm(ctx context.Context, role codec.Role) (rolestate.Confirmed, error) {
	open, err := s.openProducer(role)
	if err != nil {
		return rolestate.Confirmed{}, err
	}
	if err := s.View.WaitCaughtUp(ctx); err != nil {
		return rolestate.Confirmed{}, err
	}
	st, err := s.View.Role(ctx, role)
	if err != nil {
		return rolestate.Confirmed{}, err
	}
	return rolestate.Confirmed{State: st, OpenProducerID: open}, nil
}

// openProducer returns the producer id of the open transaction that
// holds role's partition's last stable offset below its high watermark,
// or -1.
func (s *confirmSource) openProducer(role codec.Role) (int64, error) {
	parts, err := s.client.Partitions(s.topic)
	if err != nil {
		return 0, err
	}
	p := codec.Partition(role, int32(len(parts)))
	b, err := s.client.Leader(s.topic, p)
	if err != nil {
		return 0, err
	}
	lso, err := s.offset(b, p, sarama.ReadCommitted)
	if err != nil {
		return 0, err
	}
	hw, err := s.offset(b, p, sarama.ReadUncommitted)
	if err != nil {
		return 0, err
	}
	if lso >= hw {
		return -1, nil
	}
	req := &sarama.FetchRequest{Version: 11, MaxBytes: 1 << 20, Isolation: sarama.ReadUncommitted, SessionEpoch: -1}
	req.AddBlock(s.topic, p, lso, 1<<20, -1)
	resp, err := b.Fetch(req)
	if err != nil {
		return 0, err
	}
	blk := resp.GetBlock(s.topic, p)
	if blk == nil || !errors.Is(blk.Err, sarama.ErrNoError) {
		return 0, fmt.Errorf("fetch at the last stable offset %d: %v", lso, blk)
	}
	for _, rs := range blk.RecordsSet {
		if rb := rs.RecordBatch; rb != nil && rb.FirstOffset+int64(rb.LastOffsetDelta) >= lso {
			if rb.IsTransactional && !rb.Control {
				return rb.ProducerID, nil
			}
			return -1, nil
		}
	}
	return -1, nil
}

func (s *confirmSource) offset(b *sarama.Broker, p int32, iso sarama.IsolationLevel) (int64, error) {
	req := sarama.NewOffsetRequest(s.client.Config().Version)
	req.IsolationLevel = iso
	req.AddBlock(s.topic, p, sarama.OffsetNewest, 1)
	resp, err := b.GetAvailableOffsets(req)
	if err != nil {
		return 0, err
	}
	blk := resp.GetBlock(s.topic, p)
	if blk == nil || !errors.Is(blk.Err, sarama.ErrNoError) {
		return 0, fmt.Errorf("list offsets of partition %d: %v", p, blk)
	}
	return blk.Offset, nil
}
