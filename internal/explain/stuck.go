package explain

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/IBM/sarama"

	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/ctxcall"
	"github.com/krabka/krole/internal/render"
)

// A view that has not caught up within a command's --timeout either got
// no answer from the brokers, or got answers but could not confirm it
// read the topic: the error says which it saw, and when a transaction
// stays open in the topic (a partition's last stable offset behind its
// high watermark), that it holds read_committed readers back.

// StuckProbeTimeout bounds the look at the partitions' ends that names
// an open transaction, after --timeout passed with the brokers answering.
const StuckProbeTimeout = time.Second

// PartitionEnds is one partition's last stable offset and high watermark.
type PartitionEnds struct {
	Partition int32
	LSO, HWM  int64
}

// ViewStuck is the error of a view that did not catch up within Timeout.
type ViewStuck struct {
	Topic   string
	Brokers []string
	Timeout time.Duration
	// LastAnswer is when a broker last answered the view; zero when none
	// did since it started.
	LastAnswer time.Time
	// Open are the partitions whose last stable offset stays behind the
	// high watermark: a transaction open there.
	Open []PartitionEnds
}

func (e *ViewStuck) Error() string {
	if e.LastAnswer.IsZero() {
		return fmt.Sprintf("no answer from the brokers at %s within --timeout %v (%s)", strings.Join(e.Brokers, ","), e.Timeout, SilentBroker)
	}
	msg := fmt.Sprintf("the view did not catch up with topic %s within --timeout %v, though the brokers answer (last at %s)",
		e.Topic, e.Timeout, render.Clock(e.LastAnswer))
	if len(e.Open) > 0 {
		p := e.Open[0]
		msg += fmt.Sprintf(": a transaction open in partition %d since offset %d (its high watermark is %d) holds "+
			"read_committed readers back until it commits, aborts or times out", p.Partition, p.LSO, p.HWM)
	}
	return msg
}

// OpenTransactions returns the partitions of cfg's topic whose last
// stable offset is behind their high watermark, as one read_committed
// fetch of each partition's start says, within ctx.
func OpenTransactions(ctx context.Context, cfg fencing.Config) ([]PartitionEnds, error) {
	sc, err := cfg.Sarama()
	if err != nil {
		return nil, err
	}
	sc.Net.DialTimeout, sc.Net.ReadTimeout, sc.Net.WriteTimeout = StuckProbeTimeout, StuckProbeTimeout, StuckProbeTimeout
	client, err := ctxcall.Do(ctx, nil, func() (sarama.Client, error) { return sarama.NewClient(cfg.Brokers, sc) })
	if err != nil {
		return nil, err
	}
	defer client.Close()
	parts, err := client.Partitions(cfg.Topic)
	if err != nil {
		return nil, err
	}
	var open []PartitionEnds
	for _, p := range parts {
		b, err := client.Leader(cfg.Topic, p)
		if err != nil {
			return nil, err
		}
		req := &sarama.FetchRequest{Version: 11, MaxWaitTime: 0, MinBytes: 0, MaxBytes: 1,
			Isolation: sarama.ReadCommitted, SessionEpoch: -1}
		req.AddBlock(cfg.Topic, p, 0, 1, -1)
		resp, err := ctxcall.Do(ctx, nil, func() (*sarama.FetchResponse, error) { return b.Fetch(req) })
		if err != nil {
			return nil, err
		}
		blk := resp.GetBlock(cfg.Topic, p)
		if blk == nil || blk.Err != sarama.ErrNoError || blk.LastStableOffset < 0 {
			continue // a log that no longer starts at 0 says nothing here
		}
		if blk.LastStableOffset < blk.HighWaterMarkOffset {
			open = append(open, PartitionEnds{Partition: p, LSO: blk.LastStableOffset, HWM: blk.HighWaterMarkOffset})
		}
	}
	return open, nil
}
