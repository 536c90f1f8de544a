package check

// The checks of the cluster itself: its versions, the role topic, its
// durability settings and the brokers' transaction timings.

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/ctxcall"
	"github.com/krabka/krole/internal/devcluster"
	"github.com/krabka/krole/processor"
)

// The role topic's settings as `krole init` and `krole dev` set them
// (devcluster.RoleTopicConfigs, their one definition).
var (
	InitSegmentMS          = devcluster.RoleTopicSegmentMS
	InitMinCompactionLagMS = devcluster.RoleTopicMinCompactionLagMS
	InitDeleteRetentionMS  = strconv.FormatInt(devcluster.DefaultRoleTopicDeleteRetain.Milliseconds(), 10)
)

// segmentWarn is the segment.ms above which the role-topic check warns:
// the cleaner compacts closed segments only, so longer segments keep every
// renewal of that long, which every new view reads.
const segmentWarn = 24 * time.Hour

// call runs a blocking sarama call within ctx.
func call[T any](ctx context.Context, fn func() (T, error)) (T, error) {
	return ctxcall.Do(ctx, nil, fn)
}

// opened returns b, connected (sarama connects lazily), within ctx: a
// broker whose connection is still opening (its ApiVersions handshake
// unanswered) holds b's lock until the client's read timeout, which would
// make the check outlast its own.
func (r *runner) opened(ctx context.Context, b *sarama.Broker) *sarama.Broker {
	_, _ = call(ctx, func() (struct{}, error) {
		if ok, _ := b.Connected(); !ok {
			_ = b.Open(r.client.Config())
		}
		return struct{}{}, nil
	})
	return b
}

// anyBroker returns a connected broker: the least loaded one.
func (r *runner) anyBroker(ctx context.Context) (*sarama.Broker, error) {
	b := r.client.LeastLoadedBroker()
	if b == nil {
		return nil, errors.New("no broker known")
	}
	return r.opened(ctx, b), nil
}

// need is a request krole sends: the oldest version that has what krole
// needs, and the newest version krole sends (-1: sarama picks it). The
// newest are those of fencing/request.go.
type need struct {
	key      int16
	name     string
	min      int16
	sends    int16
	optional string // what does not work without it; "" when krole cannot work without it
}

var needs = []need{
	{0, "Produce", 3, 9, ""},     // v3: record batches with producer id and epoch
	{1, "Fetch", 4, 11, ""},      // v4: read_committed and the last stable offset
	{2, "ListOffsets", 2, 6, ""}, // v2: isolation level
	{3, "Metadata", 1, -1, ""},
	{10, "FindCoordinator", 1, -1, ""}, // v1: the transaction coordinator
	{22, "InitProducerId", 0, 4, ""},
	{24, "AddPartitionsToTxn", 0, 3, ""},
	{26, "EndTxn", 0, 3, ""},
	{25, "AddOffsetsToTxn", 0, 3, "processor/stream's offsets in a transaction"},
	{28, "TxnOffsetCommit", 0, 2, "processor/stream's offsets in a transaction"},
	{32, "DescribeConfigs", 0, -1, "reading the brokers' transaction settings"},
	{65, "DescribeTransactions", 0, 0, "krole describe and Transport.Describe"},
}

// redpandaMaxima are the maxima of Redpanda 24.3 for the keys krole builds
// by hand (internal/testcluster.RedpandaVersions has the whole table and
// its source).
var redpandaMaxima = map[int16]int16{0: 7, 1: 11, 2: 4, 22: 3, 24: 3, 25: 1, 26: 3, 28: 3, 65: 0}

// table is a version table the suite runs under (internal/testcluster,
// RealBrokers).
type table struct {
	key    string
	maxima func(k int16) (int16, bool)
}

func tables() []table {
	v30, v40 := kversion.V3_0_0(), kversion.V4_0_0()
	return []table{
		{"kafka-3.0", v30.LookupMaxKeyVersion},
		{"kafka-4.0", v40.LookupMaxKeyVersion},
		{"redpanda", func(k int16) (int16, bool) { v, ok := redpandaMaxima[k]; return v, ok }},
	}
}

// effective is the version krole sends of n to a broker whose maximum is
// max (present false: not served).
func effective(n need, max int16, present bool) int16 {
	if !present {
		return -1
	}
	return min(n.sends, max)
}

func (r *runner) versions(ctx context.Context) Result {
	brokers := r.client.Brokers()
	sort.Slice(brokers, func(i, j int) bool { return brokers[i].ID() < brokers[j].ID() })
	var fails, warns, found []string
	silent := 0 // brokers that answered no ApiVersions
	for _, b := range brokers {
		b := r.opened(ctx, b)
		res, err := call(ctx, func() (*sarama.ApiVersionsResponse, error) {
			return b.ApiVersions(&sarama.ApiVersionsRequest{Version: 0})
		})
		if err == nil && res.ErrorCode != 0 {
			err = sarama.KError(res.ErrorCode)
		}
		if err != nil {
			fails = append(fails, fmt.Sprintf("broker %d answered no ApiVersions: %s", b.ID(), r.explain(err)))
			silent++
			continue
		}
		type rng struct{ min, max int16 }
		got := map[int16]rng{}
		kres := kmsg.NewApiVersionsResponse()
		for _, k := range res.ApiKeys {
			got[k.ApiKey] = rng{k.MinVersion, k.MaxVersion}
			ak := kmsg.NewApiVersionsResponseApiKey()
			ak.ApiKey, ak.MinVersion, ak.MaxVersion = k.ApiKey, k.MinVersion, k.MaxVersion
			kres.ApiKeys = append(kres.ApiKeys, ak)
		}
		for _, n := range needs {
			v, ok := got[n.key]
			var problem string
			switch {
			case !ok:
				problem = fmt.Sprintf("broker %d does not serve %s (key %d)", b.ID(), n.name, n.key)
			case v.max < n.min:
				problem = fmt.Sprintf("broker %d serves %s up to v%d, krole needs v%d", b.ID(), n.name, v.max, n.min)
			case n.sends >= 0 && v.min > n.sends:
				problem = fmt.Sprintf("broker %d serves %s from v%d only, krole sends up to v%d", b.ID(), n.name, v.min, n.sends)
			default:
				continue
			}
			if n.optional != "" {
				warns = append(warns, problem+": "+n.optional+" will fail")
			} else {
				fails = append(fails, problem)
			}
		}
		// Which of the suite's tables gives the same requests.
		var match []string
		for _, t := range tables() {
			same := true
			for _, n := range needs {
				if n.sends < 0 {
					continue
				}
				v, ok := got[n.key]
				tm, tok := t.maxima(n.key)
				if effective(n, v.max, ok) != effective(n, tm, tok) {
					same = false
					break
				}
			}
			if same {
				match = append(match, t.key)
			}
		}
		if len(match) == 0 {
			// franz-go's guess of the Apache Kafka release, which means
			// little for other brokers, but says where to look.
			guess := kversion.FromApiVersionsResponse(&kres).VersionGuess()
			found = append(found, fmt.Sprintf("broker %d: krole's requests match none of its tested tables (kafka-3.0, kafka-4.0, redpanda); its ApiVersions look like Apache Kafka %s", b.ID(), guess))
			continue
		}
		found = append(found, fmt.Sprintf("broker %d: krole's requests are those of its tested table %s", b.ID(), strings.Join(match, ", ")))
	}
	found = dedupBrokers(found)
	switch {
	case len(fails) > 0 && len(fails) == silent:
		return fail(NameVersions, "check the brokers named and the network to them, then run krole check again",
			"%s", strings.Join(fails, "; "))
	case len(fails) > 0:
		return fail(NameVersions, "krole needs transactions (InitProducerId, AddPartitionsToTxn, EndTxn) and read_committed fetches: use Apache Kafka 3.0 or later, Redpanda, Confluent Cloud or MSK with transactions enabled",
			"%s", strings.Join(fails, "; "))
	case len(warns) > 0:
		return warn(NameVersions, "upgrade the brokers if you need what fails", "%s; %s", strings.Join(warns, "; "), strings.Join(found, "; "))
	}
	for _, f := range found {
		if strings.Contains(f, "match none") {
			return warn(NameVersions, "", "every request krole sends is served; %s", strings.Join(found, "; "))
		}
	}
	return pass(NameVersions, "every request krole sends is served; %s", strings.Join(found, "; "))
}

// dedupBrokers folds identical findings of several brokers into one.
func dedupBrokers(found []string) []string {
	byText := map[string][]string{}
	var order []string
	for _, f := range found {
		id, rest, _ := strings.Cut(strings.TrimPrefix(f, "broker "), " ")
		if _, ok := byText[rest]; !ok {
			order = append(order, rest)
		}
		byText[rest] = append(byText[rest], id)
	}
	var out []string
	for _, rest := range order {
		ids := byText[rest]
		if len(ids) == 1 {
			out = append(out, "broker "+ids[0]+" "+rest)
		} else {
			out = append(out, "brokers "+strings.Join(ids, ",")+" "+rest)
		}
	}
	return out
}

// topicInfo is what the role-topic and durability checks read.
type topicInfo struct {
	partitions []*sarama.PartitionMetadata
	configs    map[string]string
	configErr  error
}

var topicConfigNames = []string{"cleanup.policy", "segment.ms", "min.compaction.lag.ms", "delete.retention.ms",
	"min.insync.replicas", "unclean.leader.election.enable"}

// topic reads the role topic's metadata and configuration. A missing or
// unreadable topic is an error whose text says so.
func (r *runner) topic(ctx context.Context) (*topicInfo, error) {
	topic := r.cfg.Topic
	b, err := r.anyBroker(ctx)
	if err != nil {
		return nil, err
	}
	md, err := call(ctx, func() (*sarama.MetadataResponse, error) {
		req := sarama.NewMetadataRequest(sarama.V2_8_0_0, []string{topic})
		req.AllowAutoTopicCreation = false
		return b.GetMetadata(req)
	})
	if err != nil {
		return nil, fmt.Errorf("metadata of topic %s: %s", topic, r.explain(err))
	}
	info := &topicInfo{}
	for _, t := range md.Topics {
		if t.Name != topic {
			continue
		}
		if t.Err != sarama.ErrNoError {
			return nil, topicError{topic: topic, code: t.Err}
		}
		info.partitions = t.Partitions
	}
	if info.partitions == nil {
		return nil, topicError{topic: topic, code: sarama.ErrUnknownTopicOrPartition}
	}
	res, err := call(ctx, func() (*sarama.DescribeConfigsResponse, error) {
		return b.DescribeConfigs(&sarama.DescribeConfigsRequest{Version: 1, Resources: []*sarama.ConfigResource{
			{Type: sarama.TopicResource, Name: topic, ConfigNames: topicConfigNames}}})
	})
	switch {
	case err != nil:
		info.configErr = err
	default:
		info.configs = map[string]string{}
		for _, rs := range res.Resources {
			if rs.ErrorCode != 0 {
				info.configErr = sarama.KError(rs.ErrorCode)
				info.configs = nil
				break
			}
			for _, c := range rs.Configs {
				info.configs[c.Name] = c.Value
			}
		}
	}
	return info, nil
}

// topicError is a topic the metadata does not show.
type topicError struct {
	topic string
	code  sarama.KError
}

func (e topicError) Error() string {
	switch e.code {
	case sarama.ErrUnknownTopicOrPartition:
		return fmt.Sprintf("topic %s does not exist", e.topic)
	case sarama.ErrTopicAuthorizationFailed:
		return fmt.Sprintf("not authorized: DESCRIBE on Topic %s (TOPIC_AUTHORIZATION_FAILED)", e.topic)
	}
	return fmt.Sprintf("metadata of topic %s: %s", e.topic, codeName(e.code))
}

func (r *runner) topicFix(err error) string {
	var te topicError
	if errors.As(err, &te) {
		switch te.code {
		case sarama.ErrUnknownTopicOrPartition:
			return "create it with 'krole init" + topicFlag(r.cfg.Topic) + "' (or check --topic)"
		case sarama.ErrTopicAuthorizationFailed:
			return r.aclFix("Describe", "topic", r.cfg.Topic, false)
		}
	}
	return "check the brokers' logs"
}

func topicFlag(topic string) string {
	if topic == fencing.DefaultTopic {
		return ""
	}
	return " --topic " + topic
}

func (r *runner) roleTopic(ctx context.Context) Result {
	info, err := r.topic(ctx)
	if err != nil {
		return fail(NameRoleTopic, r.topicFix(err), "%s", err)
	}
	topic := r.cfg.Topic
	if info.configs == nil {
		return warn(NameRoleTopic, fmt.Sprintf("run krole check --as operator with a principal that has DescribeConfigs on Topic %s, or check the topic with kafka-configs.sh", topic),
			"topic %s exists with %d partitions, but its configuration cannot be read (%s): compaction unchecked", topic, len(info.partitions), r.explain(info.configErr))
	}
	policy, ok := info.configs["cleanup.policy"]
	alter := fmt.Sprintf("kafka-configs.sh --bootstrap-server %s --alter --entity-type topics --entity-name %s --add-config cleanup.policy=compact", r.cfg.Brokers[0], topic)
	if !ok {
		return warn(NameRoleTopic, "check the topic's cleanup.policy with your provider's tools", "topic %s: the cluster does not report cleanup.policy: compaction unchecked", topic)
	}
	var compact, del bool
	for _, p := range strings.Split(policy, ",") {
		compact = compact || strings.TrimSpace(p) == "compact"
		del = del || strings.TrimSpace(p) == "delete"
	}
	switch {
	case !compact:
		return fail(NameRoleTopic, alter, "topic %s has cleanup.policy=%s: krole needs cleanup.policy=compact (retention would delete registrations and leases)", topic, policy)
	case del:
		return fail(NameRoleTopic, alter, "topic %s has cleanup.policy=%s: retention would delete the registrations of long-lived members; krole needs cleanup.policy=compact alone", topic, policy)
	}
	setting := func(name, init string) string {
		v, ok := info.configs[name]
		if !ok {
			return fmt.Sprintf("%s not reported (init sets %s)", name, init)
		}
		if v == init {
			return fmt.Sprintf("%s=%s (as init sets it)", name, v)
		}
		return fmt.Sprintf("%s=%s (init sets %s)", name, v, init)
	}
	detail := fmt.Sprintf("topic %s: %d partitions, cleanup.policy=%s, %s, %s, %s", topic, len(info.partitions), policy,
		setting("segment.ms", InitSegmentMS), setting("min.compaction.lag.ms", InitMinCompactionLagMS), setting("delete.retention.ms", InitDeleteRetentionMS))
	if ms, err := strconv.ParseInt(info.configs["segment.ms"], 10, 64); err == nil && time.Duration(ms)*time.Millisecond > segmentWarn {
		return warn(NameRoleTopic, fmt.Sprintf("kafka-configs.sh --bootstrap-server %s --alter --entity-type topics --entity-name %s --add-config segment.ms=%s", r.cfg.Brokers[0], topic, InitSegmentMS),
			"%s: the cleaner compacts closed segments only, so %v of renewals stay uncompacted and every new view reads them", detail, time.Duration(ms)*time.Millisecond)
	}
	return pass(NameRoleTopic, "%s", detail)
}

func (r *runner) durability(ctx context.Context) Result {
	info, err := r.topic(ctx)
	if err != nil {
		return fail(NameDurability, r.topicFix(err), "%s", err)
	}
	topic := r.cfg.Topic
	rf, isr := -1, -1
	for _, p := range info.partitions {
		if rf < 0 || len(p.Replicas) < rf {
			rf = len(p.Replicas)
		}
		if isr < 0 || len(p.Isr) < isr {
			isr = len(p.Isr)
		}
	}
	alter := func(kv string) string {
		return fmt.Sprintf("kafka-configs.sh --bootstrap-server %s --alter --entity-type topics --entity-name %s --add-config %s", r.cfg.Brokers[0], topic, kv)
	}
	unclean, uncleanOK := info.configs["unclean.leader.election.enable"]
	if uncleanOK && strings.EqualFold(unclean, "true") {
		return fail(NameDurability, alter("unclean.leader.election.enable=false"),
			"topic %s has unclean.leader.election.enable=true: an out-of-sync replica may become leader and lose a committed lease, registration or transaction marker (the fence rests on them)", topic)
	}
	minISR, minOK := -1, false
	if v, ok := info.configs["min.insync.replicas"]; ok {
		if n, err := strconv.Atoi(v); err == nil {
			minISR, minOK = n, true
		}
	}
	isrText := "min.insync.replicas not reported"
	if minOK {
		isrText = fmt.Sprintf("min.insync.replicas=%d", minISR)
	}
	uncleanText := "unclean.leader.election.enable not reported (Apache Kafka's default is false; Raft-based clusters such as Redpanda have no unclean election)"
	if uncleanOK {
		uncleanText = "unclean.leader.election.enable=" + unclean
	}
	detail := fmt.Sprintf("topic %s: replication factor %d on %d broker(s), smallest ISR %d, %s, %s", topic, rf, r.brokers, isr, isrText, uncleanText)
	switch {
	case info.configs == nil:
		return warn(NameDurability, "run krole check --as operator with DescribeConfigs on the topic", "%s; the configuration cannot be read (%s)", detail, r.explain(info.configErr))
	case rf == 1 && r.brokers > 1:
		return warn(NameDurability, "recreate the topic with 'krole init --replication-factor 3' (partitions cannot gain replicas in place without a reassignment)",
			"%s: one broker's loss loses the leases and registrations on it", detail)
	case rf >= 2 && minOK && minISR < 2:
		return warn(NameDurability, alter("min.insync.replicas=2"),
			"%s: with acks=all a write is acknowledged once one replica has it, and that broker's loss loses it", detail)
	case rf >= 2 && minOK && minISR >= rf:
		return warn(NameDurability, alter(fmt.Sprintf("min.insync.replicas=%d", rf-1)),
			"%s: one broker down refuses every lease write (no holder can renew)", detail)
	case isr < rf:
		return warn(NameDurability, "look at the under-replicated partitions before relying on krole", "%s: a partition is under-replicated now", detail)
	}
	return pass(NameDurability, "%s", detail)
}

func (r *runner) timeouts(ctx context.Context) Result {
	s := processor.Settings{LeaseDuration: r.opts.LeaseDuration}.WithDefaults()
	txn := s.TransactionTimeout
	// Within ctx: BrokerTxnSettings may wait for a connection still
	// opening, beyond ctx (see opened).
	st, err := call(ctx, func() (fencing.BrokerTxnSettings, error) { return r.main.BrokerTxnSettings(ctx) })
	if err == nil && st.MaxTxnTimeout > 0 {
		if cerr := st.CheckTxnTimeout(txn); cerr != nil {
			return fail(NameTimeouts, fmt.Sprintf("raise the brokers' %s to at least %d, or run with a shorter --lease-duration", fencing.BrokerMaxTxnTimeout, txn.Milliseconds()),
				"krole's transaction timeout %v (lease %v / 2) is longer than %s=%d: the coordinator refuses every InitProducerId (INVALID_TRANSACTION_TIMEOUT)",
				txn, s.LeaseDuration, fencing.BrokerMaxTxnTimeout, st.MaxTxnTimeout.Milliseconds())
		}
	}
	maxText := ""
	switch {
	case err != nil:
		maxText = fmt.Sprintf("%s unread (%s)", fencing.BrokerMaxTxnTimeout, r.explain(err))
	case st.MaxTxnTimeout == 0:
		maxText = fencing.BrokerMaxTxnTimeout + " not reported"
	default:
		maxText = fmt.Sprintf("%s=%d", fencing.BrokerMaxTxnTimeout, st.MaxTxnTimeout.Milliseconds())
	}
	if r.initOK {
		maxText += fmt.Sprintf("; InitProducerId with timeout %v was accepted", txn)
	}
	interval, assumed := st.AbortInterval, ""
	if interval <= 0 {
		interval, assumed = fencing.DefaultAbortInterval, " (not reported: Apache Kafka's and Redpanda's default assumed)"
	}
	stall := txn + interval
	detail := fmt.Sprintf("transaction timeout %v (lease %v / 2), %s; abort check every %v%s: a holder that crashes mid-write holds back read_committed readers of its partition for up to %v, and the other roles of that partition change hands that much later",
		txn, s.LeaseDuration, maxText, interval, assumed, stall)
	if interval > s.LeaseDuration {
		return warn(NameTimeouts, fmt.Sprintf("lower %s (Redpanda: abort_timed_out_transactions_interval_ms) to at most the lease", fencing.BrokerAbortInterval),
			"%s; the interval is longer than the lease", detail)
	}
	if err != nil && !r.initOK {
		return warn(NameTimeouts, "grant DescribeConfigs on the Cluster to read the brokers' transaction settings, or read them from the brokers' configuration", "%s", detail)
	}
	return pass(NameTimeouts, "%s", detail)
}
