package check

// The ACL checks: each permission a member, an operator or a viewer needs,
// tried with the request that needs it, on the scratch role.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/IBM/sarama"

	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/rolestate"
)

// NameACLTopicDescribeConfigs is the operator's check of DescribeConfigs
// on the role topic.
const NameACLTopicDescribeConfigs = "acl.topic.describe-configs"

// principal is the principal the ACLs name: User:<SASL user>, or a
// placeholder when the principal comes from a client certificate.
func (r *runner) principal() string {
	if r.cfg.SASL.User != "" {
		return "User:" + r.cfg.SASL.User
	}
	return "User:<your principal>"
}

// aclFix is the kafka-acls.sh command that adds op on a resource
// ("topic" or "transactional-id"), by its prefix when prefixed.
func (r *runner) aclFix(op, resource, name string, prefixed bool) string {
	cmd := fmt.Sprintf("add the ACL: kafka-acls.sh --bootstrap-server %s --command-config admin.properties --add --allow-principal %s --operation %s --%s %s",
		r.cfg.Brokers[0], r.principal(), op, resource, name)
	if prefixed {
		cmd += " --resource-pattern-type prefixed"
	}
	return cmd + " (on Confluent Cloud or Redpanda, their own command: see docs/CHECK.md)"
}

// txnFix is aclFix for op on the transactional ids of every role.
func (r *runner) txnFix(op string) string {
	return r.aclFix(op, "transactional-id", r.cfg.TxnPrefix, true)
}

// refused returns the result of a probe the cluster refused for want of
// an ACL, nil when err is no refusal.
func refused(name, fix string, err error) *Result {
	var ae *fencing.AuthorizationError
	if !errors.As(err, &ae) {
		return nil
	}
	res := fail(name, fix, "missing: %s", ae.Error())
	return &res
}

// fresh reports whether the scratch role is unknown to the cluster: no
// record on the role topic, and no token at its transactional id. A run
// writes nothing to a role that is not fresh. The answer is kept.
func (r *runner) fresh(ctx context.Context) error {
	if r.freshErr != nil || r.freshOK {
		return r.freshErr
	}
	recs, err := r.main.ReadRoleRecords(ctx, r.role)
	if err != nil {
		return fmt.Errorf("reading the scratch role %s: %w", r.role, err)
	}
	// A principal without Describe, or a cluster without
	// DescribeTransactions, cannot say whether the id holds a token; the
	// records then decide (the describe and acl.txn.describe checks report
	// the refusal), so that the transaction checks still run.
	_, held, err := r.main.Describe(ctx, r.role)
	if err != nil && !fencing.IsNotAuthorized(err) && !errors.Is(err, sarama.ErrUnsupportedVersion) {
		return fmt.Errorf("describing the scratch role %s: %w", r.role, err)
	}
	st := rolestate.Fold(r.role, recs)
	if len(recs) > 0 || held || st.Lease != nil {
		r.freshErr = fmt.Errorf("the scratch role %s exists already (records or a token): left untouched", r.role)
		return r.freshErr
	}
	r.freshOK = true
	return nil
}

// freshFix is the fix of a check that writes nothing because fresh
// failed: another run picks another scratch role when this one is in use;
// when the cluster could not say, the fault is elsewhere.
func (r *runner) freshFix(err error) string {
	if r.freshErr != nil && errors.Is(err, r.freshErr) {
		return "run krole check again (it picks another scratch role)"
	}
	if errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
		return "see role-topic: the topic does not exist"
	}
	return "see acl.topic.read and acl.txn.describe: the scratch role could not be read, so nothing was written"
}

func (r *runner) aclTopicRead(ctx context.Context) Result {
	err := r.main.CheckRead(ctx, r.role)
	if res := refused(NameACLTopicRead, r.aclFix("Read", "topic", r.cfg.Topic, false), err); res != nil {
		return *res
	}
	if err != nil {
		fix := "check the brokers' logs"
		if errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
			fix = "see role-topic: the topic does not exist"
		}
		return fail(NameACLTopicRead, fix, "a fetch of the role topic failed: %s", r.explain(err))
	}
	return pass(NameACLTopicRead, "READ on Topic %s: allowed (a fetch past the end of the scratch role's partition)", r.cfg.Topic)
}

func (r *runner) aclTopicWrite(ctx context.Context) Result {
	if err := r.fresh(ctx); err != nil {
		return fail(NameACLTopicWrite, r.freshFix(err), "%s", r.explain(err))
	}
	done := r.writing()
	off, err := r.main.Register(ctx, r.role, r.member)
	done(err)
	if res := refused(NameACLTopicWrite, r.aclFix("Write", "topic", r.cfg.Topic, false), err); res != nil {
		return *res
	}
	if err != nil {
		return fail(NameACLTopicWrite, "check the brokers' logs", "a registration append failed: %s", r.explain(err))
	}
	return pass(NameACLTopicWrite, "WRITE on Topic %s: allowed (registered scratch member %s of scratch role %s at offset %d; cleanup tombstones it)", r.cfg.Topic, r.member, r.role, off)
}

func (r *runner) aclTxnWrite(ctx context.Context) Result {
	if err := r.fresh(ctx); err != nil {
		return fail(NameACLTxnWrite, r.freshFix(err), "%s", r.explain(err))
	}
	tok, err := r.main.AcquireEpoch(ctx, r.role)
	r.noteAcquire(err)
	if res := refused(NameACLTxnWrite, r.txnFix("Write"), err); res != nil {
		res.Detail += fmt.Sprintf(" (members need it on %s<role> for each role; krole check on %s%s*)", r.cfg.TxnPrefix, r.cfg.TxnPrefix, ScratchPrefix)
		return *res
	}
	if err != nil {
		return fail(NameACLTxnWrite, "see transactions.init", "InitProducerId on %s failed: %s", r.txnID, r.explain(err))
	}
	r.current = &holding{t: r.main, tok: tok}
	return pass(NameACLTxnWrite, "WRITE on TransactionalId %s: allowed (InitProducerId answered token %s)", r.txnID, tok)
}

// aclTxnSession: a member keeps its member session under the
// transactional id <prefix>session/<member> (processor, "Member
// sessions"): InitProducerId on the scratch member's, which writes no
// record.
func (r *runner) aclTxnSession(ctx context.Context) Result {
	id := r.cfg.SessionTransactionalID(r.member)
	_, err := r.main.StartSession(ctx, r.member, "kroleCheck")
	if res := refused(NameACLTxnSession, r.txnFix("Write"), err); res != nil {
		res.Detail += fmt.Sprintf(" (members need it on %ssession/<member>, which the prefix %s covers)", r.cfg.TxnPrefix, r.cfg.TxnPrefix)
		return *res
	}
	if err != nil {
		return fail(NameACLTxnSession, "see transactions.init", "InitProducerId on %s failed: %s", id, r.explain(err))
	}
	return pass(NameACLTxnSession, "WRITE on TransactionalId %s: allowed (a member's session; InitProducerId answered, nothing written)", id)
}

func (r *runner) aclTxnDescribe(ctx context.Context) Result {
	_, _, err := r.main.Describe(ctx, r.role)
	if res := refused(NameACLTxnDescribe, r.txnFix("Describe"), err); res != nil {
		return *res
	}
	if err != nil {
		return fail(NameACLTxnDescribe, "see the describe check", "DescribeTransactions on %s failed: %s", r.txnID, r.explain(err))
	}
	return pass(NameACLTxnDescribe, "DESCRIBE on TransactionalId %s: allowed (DescribeTransactions answered)", r.txnID)
}

// aclTopicDescribeConfigs: `krole init` reads the topic's settings.
func (r *runner) aclTopicDescribeConfigs(ctx context.Context) Result {
	info, err := r.topic(ctx)
	if err != nil {
		return fail(NameACLTopicDescribeConfigs, r.topicFix(err), "%s", err)
	}
	if info.configErr != nil {
		if k, ok := codeOf(info.configErr); ok && k == sarama.ErrTopicAuthorizationFailed {
			return fail(NameACLTopicDescribeConfigs, r.aclFix("DescribeConfigs", "topic", r.cfg.Topic, false),
				"missing: not authorized: DESCRIBE_CONFIGS on Topic %s (TOPIC_AUTHORIZATION_FAILED)", r.cfg.Topic)
		}
		return fail(NameACLTopicDescribeConfigs, "check the brokers' logs", "DescribeConfigs of topic %s failed: %s", r.cfg.Topic, r.explain(info.configErr))
	}
	return pass(NameACLTopicDescribeConfigs, "DESCRIBE_CONFIGS on Topic %s: allowed", r.cfg.Topic)
}

// aclTopicCreate: `krole init` creates the topic. The probe asks to
// create the existing topic with validate_only: an authorized principal
// gets TOPIC_ALREADY_EXISTS, and nothing is created either way.
func (r *runner) aclTopicCreate(ctx context.Context) Result {
	topic := r.cfg.Topic
	b, err := call(ctx, r.client.Controller)
	if err != nil {
		return fail(NameACLTopicCreate, "check the brokers' logs", "no controller: %s", r.explain(err))
	}
	b = r.opened(ctx, b)
	res, err := call(ctx, func() (*sarama.CreateTopicsResponse, error) {
		return b.CreateTopics(&sarama.CreateTopicsRequest{Version: 1, ValidateOnly: true, Timeout: 5 * time.Second,
			TopicDetails: map[string]*sarama.TopicDetail{topic: {NumPartitions: -1, ReplicationFactor: -1}}})
	})
	if err != nil {
		return fail(NameACLTopicCreate, "check the brokers' logs", "CreateTopics (validate only) failed: %s", r.explain(err))
	}
	code := sarama.ErrNoError
	if te := res.TopicErrors[topic]; te != nil {
		code = te.Err
	}
	switch code {
	case sarama.ErrTopicAlreadyExists, sarama.ErrNoError:
		return pass(NameACLTopicCreate, "CREATE on Topic %s: allowed (CreateTopics with validate_only answered %s)", topic, codeName(code))
	case sarama.ErrTopicAuthorizationFailed, sarama.ErrClusterAuthorizationFailed:
		return fail(NameACLTopicCreate, r.aclFix("Create", "topic", topic, false), "missing: not authorized: CREATE on Topic %s (%s)", topic, codeNames[code])
	}
	return warn(NameACLTopicCreate, "", "CreateTopics with validate_only answered %s: CREATE on Topic %s unknown", codeName(code), topic)
}

// aclTopicAlter: `krole init` sets the topic's settings. The probe sets
// segment.ms to the value it has, with validate_only.
func (r *runner) aclTopicAlter(ctx context.Context) Result {
	topic := r.cfg.Topic
	v := InitSegmentMS
	if info, err := r.topic(ctx); err == nil && info.configs != nil && info.configs["segment.ms"] != "" {
		v = info.configs["segment.ms"]
	}
	b, err := r.anyBroker(ctx)
	if err != nil {
		return fail(NameACLTopicAlter, "check the brokers' logs", "%s", r.explain(err))
	}
	res, err := call(ctx, func() (*sarama.IncrementalAlterConfigsResponse, error) {
		return b.IncrementalAlterConfigs(&sarama.IncrementalAlterConfigsRequest{ValidateOnly: true, Resources: []*sarama.IncrementalAlterConfigsResource{{
			Type: sarama.TopicResource, Name: topic,
			ConfigEntries: map[string]sarama.IncrementalAlterConfigsEntry{"segment.ms": {Operation: sarama.IncrementalAlterConfigsOperationSet, Value: &v}},
		}}})
	})
	if err != nil {
		return fail(NameACLTopicAlter, "check the brokers' logs", "IncrementalAlterConfigs (validate only) failed: %s", r.explain(err))
	}
	code := sarama.ErrNoError
	for _, rs := range res.Resources {
		if rs.ErrorCode != 0 {
			code = sarama.KError(rs.ErrorCode)
		}
	}
	switch code {
	case sarama.ErrNoError:
		return pass(NameACLTopicAlter, "ALTER_CONFIGS on Topic %s: allowed (segment.ms=%s with validate_only)", topic, v)
	case sarama.ErrTopicAuthorizationFailed, sarama.ErrClusterAuthorizationFailed:
		return fail(NameACLTopicAlter, r.aclFix("AlterConfigs", "topic", topic, false), "missing: not authorized: ALTER_CONFIGS on Topic %s (%s)", topic, codeNames[code])
	}
	return warn(NameACLTopicAlter, "", "IncrementalAlterConfigs with validate_only answered %s: ALTER_CONFIGS on Topic %s unknown", codeName(code), topic)
}
