package check

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/IBM/sarama"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/kafkalog"
)

// rolePartitions reads every partition of the role topic (read_committed,
// from its log start to its last stable offset) and fails when a role's
// records lie in a partition other than the one codec.Partition gives the
// role for the topic's partition count now. Then the count changed: the
// role's records, and its fencing numbers (offsets of its first leases),
// started again in another partition, and a target that stores the
// highest number it has seen refuses the new, smaller ones. Records of
// krole check's own scratch roles, which hold no lease, are not counted.
func (r *runner) rolePartitions(ctx context.Context) Result {
	info, err := r.topic(ctx)
	if err != nil {
		return fail(NameRolePartitions, r.topicFix(err), "%s", err)
	}
	topic, n := r.cfg.Topic, int32(len(info.partitions))
	type misplaced struct {
		role     codec.Role
		in, want int32
	}
	var found []misplaced
	seen := map[codec.Role]bool{}
	records := 0
	for p := int32(0); p < n; p++ {
		err := r.scan(ctx, p, func(k codec.Key) {
			records++
			if k.Kind == codec.KindSession || k.Kind == codec.KindDrain || seen[k.Role] || strings.HasPrefix(string(k.Role), ScratchPrefix) {
				return
			}
			if want := codec.Partition(k.Role, n); want != p {
				seen[k.Role] = true
				found = append(found, misplaced{role: k.Role, in: p, want: want})
			}
		})
		if errors.Is(err, sarama.ErrTopicAuthorizationFailed) {
			return fail(NameRolePartitions, r.aclFix("Read", "topic", topic, false),
				"missing: READ on Topic %s (TOPIC_AUTHORIZATION_FAILED): its partitions cannot be read", topic)
		}
		if err != nil {
			return fail(NameRolePartitions, "check the brokers' logs", "reading partition %d of topic %s: %s", p, topic, r.explain(err))
		}
	}
	if len(found) == 0 {
		return pass(NameRolePartitions, "topic %s: each role's records lie in the partition it maps to among %d (%d record(s) read)", topic, n, records)
	}
	f, more := found[0], ""
	if len(found) > 1 {
		more = fmt.Sprintf(" (%d other role(s) too)", len(found)-1)
	}
	return fail(NameRolePartitions,
		"the role topic's partition count must not change: reset whatever stores these roles' fencing numbers (a database's fence table refuses the new, smaller ones), see docs/CHECK.md",
		"role %s has records in partition %d of topic %s but maps to partition %d of its %d now: the topic's partition count changed, and the role's fencing numbers started again%s",
		f.role, f.in, topic, f.want, n, more)
}

// scan reads partition p of the role topic from its log start to the last
// stable offset its first answer gives, read_committed (aborted batches
// dropped as fencing's reads drop them), and calls fn with the key of each
// record that has a krole key.
func (r *runner) scan(ctx context.Context, p int32, fn func(codec.Key)) error {
	topic := r.cfg.Topic
	leader, err := call(ctx, func() (*sarama.Broker, error) { return r.client.Leader(topic, p) })
	if err != nil {
		return err
	}
	leader = r.opened(ctx, leader)
	next, end := int64(0), int64(-1)
	aborted := map[int64]bool{}
	reset := false
	for {
		res, err := call(ctx, func() (*sarama.FetchResponse, error) {
			req := &sarama.FetchRequest{Version: 11, MaxWaitTime: 0, MinBytes: 1, MaxBytes: 1 << 20,
				Isolation: sarama.ReadCommitted, SessionEpoch: -1}
			req.AddBlock(topic, p, next, 1<<20, -1)
			return leader.Fetch(req)
		})
		if err != nil {
			return err
		}
		blk := res.GetBlock(topic, p)
		switch {
		case blk == nil:
			return errors.New("the leader answered without the partition")
		case blk.Err == sarama.ErrOffsetOutOfRange && !reset && blk.LogStartOffset > next:
			// The log no longer starts at next (records were deleted).
			reset, next = true, blk.LogStartOffset
			continue
		case blk.Err != sarama.ErrNoError:
			return blk.Err
		}
		if end < 0 {
			if end = blk.LastStableOffset; end < 0 {
				end = blk.HighWaterMarkOffset
			}
		}
		if next >= end {
			return nil
		}
		start := next
		txns := append([]*sarama.AbortedTransaction(nil), blk.AbortedTransactions...)
		kafkalog.SortAborted(txns)
		for _, recs := range blk.RecordsSet {
			rb := recs.RecordBatch
			if rb == nil || rb.FirstOffset >= end {
				continue
			}
			if rb.LastOffset() < next {
				continue
			}
			for len(txns) > 0 && txns[0].FirstOffset <= rb.LastOffset() {
				aborted[txns[0].ProducerID] = true
				txns = txns[1:]
			}
			switch {
			case rb.Control:
				if kafkalog.IsAbortMarker(rb) {
					delete(aborted, rb.ProducerID)
				}
			case rb.IsTransactional && aborted[rb.ProducerID]:
			default:
				for _, rec := range rb.Records {
					if off := rb.FirstOffset + rec.OffsetDelta; off < next || off >= end {
						continue
					}
					if k, err := codec.DecodeKey(rec.Key); err == nil {
						fn(k)
					}
				}
			}
			next = rb.LastOffset() + 1
		}
		if next == start || next >= end {
			return nil
		}
	}
}
