package chaos

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// sentinelKey marks the record the driver appends to every partition once
// the members are gone: a reader that has reached it in every partition
// has read everything committed before.
const sentinelKey = "chaos/end"

// writeSentinels appends a plain (non-transactional) sentinel record to
// every partition of the topics, with franz-go's kgo.
func writeSentinels(ctx context.Context, brokers []string, topics map[string]int32) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return err
	}
	defer cl.Close()
	var recs []*kgo.Record
	for t, n := range topics {
		for p := range n {
			recs = append(recs, &kgo.Record{Topic: t, Partition: p, Key: []byte(sentinelKey)})
		}
	}
	return cl.ProduceSync(ctx, recs...).FirstErr()
}

// readAll reads every committed record of the topics with read_committed
// isolation through franz-go's kgo (nothing of krole's read path), from
// the start of each partition until its sentinel, and returns them per
// topic in offset order per partition, sentinels left out. It blocks
// until then or until ctx ends.
func readAll(ctx context.Context, brokers []string, topics map[string]int32) (map[string][]*kgo.Record, error) {
	parts := map[string]map[int32]kgo.Offset{}
	left := 0
	for t, n := range topics {
		parts[t] = map[int32]kgo.Offset{}
		for p := range n {
			parts[t][p] = kgo.NewOffset().AtStart()
			left++
		}
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(brokers...),
		kgo.ConsumePartitions(parts),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	out := map[string][]*kgo.Record{}
	done := map[string]map[int32]bool{}
	for left > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("reading the topics: %d partitions not read to their end: %w", left, ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			if done[r.Topic] == nil {
				done[r.Topic] = map[int32]bool{}
			}
			if done[r.Topic][r.Partition] {
				return
			}
			if string(r.Key) == sentinelKey {
				done[r.Topic][r.Partition] = true
				left--
				return
			}
			out[r.Topic] = append(out[r.Topic], r)
		})
	}
	return out, nil
}

// endOffsets returns the high watermark of each partition of topic (n
// partitions), asking each partition's leader with kgo.
func endOffsets(ctx context.Context, brokers []string, topic string, n int32) (map[int32]int64, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	for p := range n {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp = p, -1
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	ends := map[int32]int64{}
	for _, sh := range cl.RequestSharded(ctx, req) {
		if sh.Err != nil {
			return nil, sh.Err
		}
		for _, t := range sh.Resp.(*kmsg.ListOffsetsResponse).Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					return nil, fmt.Errorf("end offset of %s/%d: %w", topic, p.Partition, err)
				}
				ends[p.Partition] = p.Offset
			}
		}
	}
	if len(ends) != int(n) {
		return nil, fmt.Errorf("end offsets of %s: %d of %d partitions answered", topic, len(ends), n)
	}
	return ends, nil
}

// controller asks the cluster, with kgo, which node is its controller.
func controller(ctx context.Context, brokers []string) (int32, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	resp, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
	if err != nil {
		return 0, fmt.Errorf("asking for the controller: %w", err)
	}
	return resp.ControllerID, nil
}
