package check_test

import (
	"context"
	"fmt"
	"net"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/check"
	"github.com/krabka/krole/internal/devcluster"
	"github.com/krabka/krole/internal/faultnet"
	"github.com/krabka/krole/internal/testcluster"
)

// hangLimit only catches a hang: no test asserts a speed.
const hangLimit = 3 * time.Minute

// run runs the checks against cfg and fails t when the run does not
// return within hangLimit.
func run(t *testing.T, opts check.Options) check.Report {
	t.Helper()
	done := make(chan check.Report, 1)
	go func() { done <- check.Run(context.Background(), opts) }()
	select {
	case rep := <-done:
		for _, r := range rep.Checks {
			t.Logf("%-28s %s %s | %s", r.Name, r.Status(), r.Detail, r.Fix)
		}
		return rep
	case <-time.After(hangLimit):
		t.Fatalf("krole check did not return within %v", hangLimit)
		return check.Report{}
	}
}

// byName returns the result named name, failing t when there is none.
func byName(t *testing.T, rep check.Report, name string) check.Result {
	t.Helper()
	for _, r := range rep.Checks {
		if r.Name == name {
			return r
		}
	}
	require.Failf(t, "no such check", "%s", name)
	return check.Result{}
}

func names(rep check.Report) []string {
	var out []string
	for _, r := range rep.Checks {
		out = append(out, r.Name)
	}
	return out
}

// scratchRole matches the name of a scratch role in a record's key.
var scratchRole = regexp.MustCompile(regexp.QuoteMeta(check.ScratchPrefix) + `[0-9a-f]{12}`)

// requireScratchGone fails t unless every record on the role topic (which
// only runs of krole check wrote to) is of one scratch role, and that
// role holds no live record: every registration is followed by its
// tombstone. It returns the scratch role.
func requireScratchGone(t *testing.T, c *testcluster.Cluster) string {
	t.Helper()
	last := map[string][]byte{}
	roles := map[string]bool{}
	for _, m := range c.ReadAll(t, c.Config.Topic, sarama.ReadCommitted, 10*time.Second) {
		role := scratchRole.FindString(string(m.Key))
		require.NotEmpty(t, role, "a record outside a scratch role: key %q", m.Key)
		roles[role] = true
		last[string(m.Key)] = m.Value
	}
	require.Len(t, roles, 1, "the run wrote to one scratch role: %v", roles)
	for k, v := range last {
		assert.Nil(t, v, "key %s is not tombstoned", k)
	}
	for role := range roles {
		return role
	}
	return ""
}

var allChecks = []string{
	check.NameReachability, check.NameVersions, check.NameRoleTopic, check.NameRolePartitions, check.NameDurability,
	check.NameACLTopicRead, check.NameACLTopicWrite, check.NameACLTxnWrite, check.NameACLTxnDescribe, check.NameACLTxnSession,
	check.NameTxnInit, check.NameTxnFence, check.NameTxnReadCommit, check.NameTimeouts, check.NameDescribe,
	check.NameClock, check.NameLatency, check.NameCleanup,
}

// TestEveryCheckPassesOnTheEmbeddedCluster: on the cluster `krole dev`
// starts (kfake, a compacted role topic), every check passes, in order,
// and the scratch role is tombstoned at the end.
func TestEveryCheckPassesOnTheEmbeddedCluster(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{})
	rep := run(t, check.Options{Config: c.Config})
	assert.Equal(t, allChecks, names(rep))
	for _, r := range rep.Checks {
		assert.True(t, r.OK, "%s failed: %s", r.Name, r.Detail)
		assert.False(t, r.Skipped, "%s skipped", r.Name)
		assert.NotEmpty(t, r.Detail, r.Name)
	}
	assert.True(t, rep.OK())
	fence := byName(t, rep, check.NameTxnFence)
	assert.Contains(t, fence.Detail, "PRODUCER_FENCED (90)", "the commit's code is reported")
	assert.Contains(t, fence.Detail, "krole reads as fenced")
	assert.Contains(t, byName(t, rep, check.NameVersions).Detail, "its tested table kafka-3.0, kafka-4.0")
	role := requireScratchGone(t, c)
	assert.Contains(t, byName(t, rep, check.NameTxnInit).Detail, "on the scratch transactional id "+c.Config.TxnPrefix+role+" ",
		"InitProducerId on the scratch id, under the configured prefix")
	assert.Contains(t, byName(t, rep, check.NameDescribe).Detail, "the one InitProducerId minted last")
	assert.Regexp(t, `abort check every 10s .*: a holder that crashes mid-write holds back read_committed readers of its partition for up to 15s`,
		byName(t, rep, check.NameTimeouts).Detail, "the abort interval and its liveness cost")
	assert.Regexp(t, `^20 transactions .*: p50 \S+, p99 \S+; the smallest safe lease on this network is about \S+`, byName(t, rep, check.NameLatency).Detail)
	assert.Contains(t, byName(t, rep, check.NameClock).Detail, "the transaction coordinator's clock is")
	cl := byName(t, rep, check.NameCleanup)
	assert.Contains(t, cl.Detail, "wrote only to the scratch role "+role+" ", "the cleanup names the scratch role")
	assert.Contains(t, cl.Detail, "tombstoned its registration")
}

// TestOperatorAndViewer: an operator's run adds init's ACLs; a viewer's
// run writes nothing and skips the checks that write.
func TestOperatorAndViewer(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{})
	rep := run(t, check.Options{Config: c.Config, As: check.Operator})
	assert.True(t, rep.OK())
	for _, n := range []string{check.NameACLTopicDescribeConfigs, check.NameACLTopicCreate, check.NameACLTopicAlter} {
		r := byName(t, rep, n)
		assert.True(t, r.OK && !r.Warn && !r.Skipped, "%s: %s", n, r.Detail)
	}

	c = testcluster.Start(t, testcluster.Options{})
	rep = run(t, check.Options{Config: c.Config, As: check.Viewer})
	assert.True(t, rep.OK())
	for _, n := range []string{check.NameACLTopicWrite, check.NameACLTxnWrite, check.NameTxnInit, check.NameTxnFence,
		check.NameTxnReadCommit, check.NameClock, check.NameLatency} {
		assert.True(t, byName(t, rep, n).Skipped, n)
	}
	for _, n := range []string{check.NameACLTopicRead, check.NameACLTxnDescribe, check.NameDescribe, check.NameTimeouts} {
		r := byName(t, rep, n)
		assert.True(t, r.OK && !r.Skipped, "%s: %s", n, r.Detail)
	}
	assert.Contains(t, byName(t, rep, check.NameCleanup).Detail, "nothing written")
	// Nothing reached the topic: a read_uncommitted read finds no record.
	assert.Empty(t, c.ReadAll(t, c.Config.Topic, sarama.ReadUncommitted, 10*time.Second))
}

// TestNonCompactedTopicFails: a role topic that deletes fails the
// role-topic check, naming cleanup.policy and the command that fixes it.
func TestNonCompactedTopicFails(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{})
	cfg := c.Config
	cfg.Topic = c.Topic(t, c.Name("deleting"), 3, 10*time.Second)
	rep := run(t, check.Options{Config: cfg})
	r := byName(t, rep, check.NameRoleTopic)
	assert.False(t, r.OK)
	assert.Contains(t, r.Detail, "cleanup.policy=delete")
	assert.Contains(t, r.Fix, "cleanup.policy=compact")
	assert.False(t, rep.OK())
}

// TestMissingTopicFails: a topic that does not exist fails, saying to
// run krole init.
func TestMissingTopicFails(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{})
	cfg := c.Config
	cfg.Topic = c.Name("nosuch")
	rep := run(t, check.Options{Config: cfg, Timeout: 5 * time.Second})
	r := byName(t, rep, check.NameRoleTopic)
	assert.False(t, r.OK)
	assert.Contains(t, r.Detail, "does not exist")
	assert.Contains(t, r.Fix, "krole init --topic "+cfg.Topic)
	// The checks that need the topic point at role-topic, not elsewhere.
	for _, n := range []string{check.NameACLTopicRead, check.NameACLTopicWrite, check.NameTxnInit} {
		r := byName(t, rep, n)
		assert.False(t, r.OK, n)
		assert.Equal(t, "see role-topic: the topic does not exist", r.Fix, n)
	}
}

// aclCluster starts kfake with SASL/SCRAM and ACLs: a member with the
// README's ACLs, one without Write on the transactional ids, and a viewer.
func aclCluster(t *testing.T) (fencing.Config, func(user string) fencing.Config) {
	t.Helper()
	if testcluster.External() {
		t.Skip("needs the embedded cluster with ACLs; KROLE_BROKERS names an outside cluster")
	}
	const (
		topic  = "acl.roles"
		prefix = "acl."
		scram  = fencing.SASLScramSHA256
	)
	allow := func(res kmsg.ACLResourceType, name string, pattern kmsg.ACLResourcePatternType, ops ...kmsg.ACLOperation) []kfake.ACL {
		var acls []kfake.ACL
		for _, op := range ops {
			acls = append(acls, kfake.ACL{Resource: res, Name: name, Pattern: pattern, Operation: op, Allow: true})
		}
		return acls
	}
	lit, pre := kmsg.ACLResourcePatternTypeLiteral, kmsg.ACLResourcePatternTypePrefixed
	topicRes, txnRes := kmsg.ACLResourceTypeTopic, kmsg.ACLResourceTypeTransactionalId
	read, write, describe := kmsg.ACLOperationRead, kmsg.ACLOperationWrite, kmsg.ACLOperationDescribe
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fake, err := devcluster.Start(ctx, testcluster.DevOptions(t, devcluster.Options{Extra: []kfake.Opt{
		kfake.EnableSASL(), kfake.EnableACLs(),
		kfake.Superuser(scram, "admin", "admin-pw"),
		kfake.User(scram, "member", "member-pw", append(
			allow(topicRes, topic, lit, read, write, describe),
			allow(txnRes, prefix, pre, write, describe)...)...),
		kfake.User(scram, "nowrite", "nowrite-pw", append(
			allow(topicRes, topic, lit, read, write, describe),
			allow(txnRes, prefix, pre, describe)...)...),
		kfake.User(scram, "notopicwrite", "notopicwrite-pw", append(
			allow(topicRes, topic, lit, read, describe),
			allow(txnRes, prefix, pre, write, describe)...)...),
		kfake.User(scram, "bare", "bare-pw", allow(topicRes, topic, lit, describe)...),
		kfake.User(scram, "viewer", "viewer-pw", append(
			allow(topicRes, topic, lit, read, describe),
			allow(txnRes, prefix, pre, describe)...)...),
	}}))
	require.NoError(t, err)
	t.Cleanup(fake.Close)
	as := func(user string) fencing.Config {
		return fencing.Config{Brokers: fake.ListenAddrs(), Topic: topic, TxnPrefix: prefix,
			SASL: fencing.SASLConfig{Mechanism: scram, User: user, Password: user + "-pw"}}
	}
	require.NoError(t, devcluster.CreateTopic(ctx, as("admin"), 3, 1))
	return as("admin"), as
}

// TestMissingACLFails: with ACLs on, a member without Write on the
// transactional ids fails acl.txn.write, naming the ACL and the command
// that adds it; the README's member ACLs pass; a viewer passes what a
// viewer may do.
func TestMissingACLFails(t *testing.T) {
	_, as := aclCluster(t)

	rep := run(t, check.Options{Config: as("nowrite"), Timeout: 5 * time.Second})
	assert.False(t, rep.OK())
	r := byName(t, rep, check.NameACLTxnWrite)
	assert.False(t, r.OK)
	assert.Contains(t, r.Detail, "WRITE on TransactionalId acl.krole-check.")
	assert.Contains(t, r.Detail, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED")
	assert.Contains(t, r.Fix, "--allow-principal User:nowrite --operation Write --transactional-id acl. --resource-pattern-type prefixed")
	assert.True(t, byName(t, rep, check.NameACLTopicWrite).OK)
	assert.True(t, byName(t, rep, check.NameACLTopicRead).OK)
	assert.True(t, byName(t, rep, check.NameCleanup).OK, "the registration it could write is tombstoned")

	rep = run(t, check.Options{Config: as("member"), Timeout: 5 * time.Second})
	assert.True(t, rep.OK(), "the README's member ACLs are enough")
	assert.True(t, byName(t, rep, check.NameTxnFence).OK)
	rt := byName(t, rep, check.NameRoleTopic)
	assert.True(t, rt.Warn, "a member may not read the topic's configuration: %s", rt.Detail)

	rep = run(t, check.Options{Config: as("viewer"), As: check.Viewer, Timeout: 5 * time.Second})
	assert.True(t, rep.OK())
	assert.True(t, byName(t, rep, check.NameACLTxnDescribe).OK)

	// The same viewer, run as a member, lacks the writes.
	rep = run(t, check.Options{Config: as("viewer"), Timeout: 5 * time.Second})
	r = byName(t, rep, check.NameACLTopicWrite)
	assert.False(t, r.OK)
	assert.Contains(t, r.Detail, "WRITE on Topic acl.roles")
	assert.Contains(t, r.Fix, "--operation Write --topic acl.roles")
	// The refused writes wrote nothing: the cleanup has nothing to
	// tombstone, and does not tell the user to remove records by hand.
	r = byName(t, rep, check.NameCleanup)
	assert.True(t, r.OK, "%s", r.Detail)
	assert.Contains(t, r.Detail, "nothing written")

	// The member, run as an operator, lacks what krole init needs.
	rep = run(t, check.Options{Config: as("member"), As: check.Operator, Timeout: 5 * time.Second})
	for n, op := range map[string]string{check.NameACLTopicDescribeConfigs: "DescribeConfigs",
		check.NameACLTopicCreate: "Create", check.NameACLTopicAlter: "AlterConfigs"} {
		r = byName(t, rep, n)
		assert.False(t, r.OK, "%s: %s", n, r.Detail)
		assert.Regexp(t, `^missing: not authorized: [A-Z_]+ on Topic acl.roles \(TOPIC_AUTHORIZATION_FAILED\)$`, r.Detail, n)
		assert.Contains(t, r.Fix, "--allow-principal User:member --operation "+op+" --topic acl.roles", n)
	}

	// A viewer with nothing but Describe on the topic lacks Read on it
	// and Describe on the transactional ids.
	rep = run(t, check.Options{Config: as("bare"), As: check.Viewer, Timeout: 5 * time.Second})
	r = byName(t, rep, check.NameACLTopicRead)
	assert.False(t, r.OK, "%s", r.Detail)
	assert.Contains(t, r.Detail, "READ on Topic acl.roles")
	assert.Contains(t, r.Fix, "--allow-principal User:bare --operation Read --topic acl.roles")
	r = byName(t, rep, check.NameACLTxnDescribe)
	assert.False(t, r.OK, "%s", r.Detail)
	assert.Contains(t, r.Detail, "DESCRIBE on TransactionalId acl.krole-check.")
	assert.Contains(t, r.Fix, "--allow-principal User:bare --operation Describe --transactional-id acl. --resource-pattern-type prefixed")

	// A member without Write on the topic, but with Write on the
	// transactional ids: acl.topic.write fails naming the ACL, and the
	// cleanup passes (the InitProducerIds are ended, no record to remove).
	rep = run(t, check.Options{Config: as("notopicwrite"), Timeout: 5 * time.Second})
	r = byName(t, rep, check.NameACLTopicWrite)
	assert.False(t, r.OK)
	assert.Contains(t, r.Detail, "WRITE on Topic acl.roles (TOPIC_AUTHORIZATION_FAILED)")
	assert.Contains(t, r.Fix, "--allow-principal User:notopicwrite --operation Write --topic acl.roles")
	assert.True(t, byName(t, rep, check.NameTxnInit).OK)
	r = byName(t, rep, check.NameTxnFence)
	assert.False(t, r.OK, "the fence scenario cannot write")
	assert.Contains(t, r.Fix, "acl.*", "a refusal points at the ACL checks, not at the cluster's transactions")
	r = byName(t, rep, check.NameCleanup)
	assert.True(t, r.OK, "%s", r.Detail)
	assert.Contains(t, r.Detail, "nothing to tombstone")
	assert.NotContains(t, r.Detail+r.Fix, "by hand")
}

// TestNonConformingBrokerFailsTheFence: a broker that accepts a produce,
// or a commit, under a fenced epoch fails transactions.fence. faultnet
// rewrites the broker's refusal into a success on its way to the client
// (the broker itself refused: only the check is told otherwise), as a
// cluster that does not fence stale producers would answer.
func TestNonConformingBrokerFailsTheFence(t *testing.T) {
	scratch := func(id *string) bool { return id != nil && strings.Contains(*id, check.ScratchPrefix) }
	t.Run("produce", func(t *testing.T) {
		c, fn := testcluster.StartFaulty(t, testcluster.Options{})
		// The first refused transactional produce of the scratch id: the
		// produce under A's fenced epoch.
		rw := fn.Rewrite(faultnet.Rule{APIKey: int16(kmsg.Produce), Node: faultnet.AnyNode, Count: 1},
			func(req kmsg.Request, resp kmsg.Response) kmsg.Response {
				res := resp.(*kmsg.ProduceResponse)
				if !scratch(req.(*kmsg.ProduceRequest).TransactionID) {
					return nil
				}
				refused := false
				for i := range res.Topics {
					for j := range res.Topics[i].Partitions {
						if sp := &res.Topics[i].Partitions[j]; sp.ErrorCode != 0 {
							sp.ErrorCode, sp.BaseOffset, refused = 0, 1<<40, true
						}
					}
				}
				if !refused {
					return nil
				}
				return res
			})
		rep := run(t, check.Options{Config: c.Config, Timeout: 5 * time.Second})
		require.Equal(t, 1, rw.Count(), "faultnet turned the refusal of the stale produce into a success")
		r := byName(t, rep, check.NameTxnFence)
		assert.False(t, r.OK)
		assert.Contains(t, r.Detail, "was accepted")
		assert.Contains(t, r.Fix, "do not rely on krole's fence")
		assert.False(t, rep.OK())
	})
	t.Run("commit", func(t *testing.T) {
		c, fn := testcluster.StartFaulty(t, testcluster.Options{})
		// The first refused commit of the scratch id: B's, under its
		// fenced epoch.
		rw := fn.Rewrite(faultnet.Rule{APIKey: int16(kmsg.EndTxn), Node: faultnet.AnyNode, Count: 1},
			func(req kmsg.Request, resp kmsg.Response) kmsg.Response {
				er, res := req.(*kmsg.EndTxnRequest), resp.(*kmsg.EndTxnResponse)
				if !er.Commit || !scratch(&er.TransactionalID) || res.ErrorCode == 0 {
					return nil
				}
				res.ErrorCode = 0
				return res
			})
		rep := run(t, check.Options{Config: c.Config, Timeout: 5 * time.Second})
		require.Equal(t, 1, rw.Count(), "faultnet turned the refusal of the fenced commit into a success")
		r := byName(t, rep, check.NameTxnFence)
		assert.False(t, r.OK)
		assert.Contains(t, r.Detail, "committed a transaction under the fenced token")
	})
	// A coordinator that refuses the fenced commit with a code that is no
	// fence, and the abort krole sends then as fenced: krole reads it as
	// fenced, and the check reports both codes.
	t.Run("commit refused with a code that is no fence, the abort fenced", func(t *testing.T) {
		c := testcluster.Start(t, testcluster.Options{})
		c.RequireFake(t)
		var lied atomic.Int32
		c.Fake.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
			er := req.(*kmsg.EndTxnRequest)
			if !er.Commit || !strings.Contains(er.TransactionalID, check.ScratchPrefix) {
				return nil, nil, false
			}
			lied.Add(1)
			res := er.ResponseKind().(*kmsg.EndTxnResponse)
			res.ErrorCode = kerr.InvalidTxnState.Code // one-shot: B's commit
			return res, nil, true
		})
		rep := run(t, check.Options{Config: c.Config, Timeout: 5 * time.Second})
		require.Equal(t, int32(1), lied.Load())
		r := byName(t, rep, check.NameTxnFence)
		assert.True(t, r.OK, "%s", r.Detail)
		assert.Regexp(t, `a commit under \S+ was refused with INVALID_TXN_STATE \(48\) \(not a fence code\), and the abort that followed with PRODUCER_FENCED \(90\), which krole reads as fenced$`, r.Detail)
	})
	// A coordinator that refuses the fenced commit, and the abort krole
	// then sends, with a code that is no fence (INVALID_TXN_STATE): krole
	// cannot tell it was fenced, and the check says so.
	t.Run("commit refused with a code that is no fence", func(t *testing.T) {
		c := testcluster.Start(t, testcluster.Options{})
		c.RequireFake(t)
		var lied atomic.Int32
		epoch := int16(-1) // of the first commit: B's, under its fenced epoch
		c.Fake.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
			c.Fake.KeepControl()
			er := req.(*kmsg.EndTxnRequest)
			if !strings.Contains(er.TransactionalID, check.ScratchPrefix) {
				return nil, nil, false
			}
			if epoch < 0 && er.Commit {
				epoch = er.ProducerEpoch
			}
			if epoch < 0 || er.ProducerEpoch != epoch {
				return nil, nil, false
			}
			lied.Add(1)
			res := er.ResponseKind().(*kmsg.EndTxnResponse)
			res.ErrorCode = kerr.InvalidTxnState.Code // refused, but not as a fence
			return res, nil, true
		})
		rep := run(t, check.Options{Config: c.Config, Timeout: 5 * time.Second})
		require.NotZero(t, lied.Load())
		r := byName(t, rep, check.NameTxnFence)
		assert.False(t, r.OK)
		assert.Contains(t, r.Detail, "krole did not read it as fenced")
		assert.Contains(t, r.Fix, "krole must read this refusal as fenced")
	})
}

// TestClusterWithoutTransactions: a cluster whose ApiVersions lack
// InitProducerId fails versions, naming it, and the transactions checks.
func TestClusterWithoutTransactions(t *testing.T) {
	if testcluster.External() {
		t.Skip("caps the embedded cluster's versions")
	}
	v := kversion.V4_0_0()
	v.SetMaxKeyVersion(int16(kmsg.InitProducerID), -1)
	c := testcluster.Start(t, testcluster.Options{MaxVersions: v})
	rep := run(t, check.Options{Config: c.Config, Timeout: 5 * time.Second})
	r := byName(t, rep, check.NameVersions)
	assert.False(t, r.OK)
	assert.Contains(t, r.Detail, "does not serve InitProducerId (key 22)")
	assert.False(t, byName(t, rep, check.NameTxnInit).OK)
	assert.False(t, byName(t, rep, check.NameTxnFence).OK)
	assert.True(t, byName(t, rep, check.NameCleanup).OK, "the registration is tombstoned: %s", byName(t, rep, check.NameCleanup).Detail)
}

// TestApiVersionsWithoutTransactions: one broker of three whose
// ApiVersions (as rewritten by faultnet on its way to the client) lacks
// the transaction APIs fails versions, naming that broker and each API:
// every broker's ApiVersions is checked.
func TestApiVersionsWithoutTransactions(t *testing.T) {
	c, fn := testcluster.StartFaulty(t, testcluster.Options{Nodes: 3})
	txn := map[int16]bool{int16(kmsg.InitProducerID): true, int16(kmsg.AddPartitionsToTxn): true, int16(kmsg.EndTxn): true}
	fn.Rewrite(faultnet.Rule{APIKey: int16(kmsg.ApiVersions), Node: 1},
		func(_ kmsg.Request, resp kmsg.Response) kmsg.Response {
			res := resp.(*kmsg.ApiVersionsResponse)
			keys := res.ApiKeys[:0]
			for _, k := range res.ApiKeys {
				if !txn[k.ApiKey] {
					keys = append(keys, k)
				}
			}
			res.ApiKeys = keys
			return res
		})
	rep := run(t, check.Options{Config: c.Config, Timeout: 5 * time.Second})
	r := byName(t, rep, check.NameVersions)
	assert.False(t, r.OK)
	for _, s := range []string{"broker 1 does not serve InitProducerId (key 22)", "broker 1 does not serve AddPartitionsToTxn (key 24)", "broker 1 does not serve EndTxn (key 26)"} {
		assert.Contains(t, r.Detail, s)
	}
	assert.NotContains(t, r.Detail, "broker 0 does not")
	assert.NotContains(t, r.Detail, "broker 2 does not")
	assert.Contains(t, r.Fix, "krole needs transactions")
	assert.False(t, rep.OK())
}

// TestVersionTables: under each table of the version matrix, versions
// names that table.
func TestVersionTables(t *testing.T) {
	if testcluster.External() {
		t.Skip("caps the embedded cluster's versions")
	}
	for _, b := range testcluster.RealBrokers() {
		t.Run(b.Key, func(t *testing.T) {
			c := testcluster.Start(t, testcluster.Options{MaxVersions: b.Versions})
			rep := run(t, check.Options{Config: c.Config, Timeout: 5 * time.Second})
			r := byName(t, rep, check.NameVersions)
			assert.True(t, r.OK && !r.Warn, "%s", r.Detail)
			assert.Contains(t, r.Detail, b.Key)
			assert.True(t, rep.OK())
		})
	}
}

// TestUnreachable: no broker answers: the report is the reachability
// check alone, failed.
func TestUnreachable(t *testing.T) {
	rep := run(t, check.Options{Config: fencing.Config{Brokers: []string{"127.0.0.1:1"}}, Timeout: 5 * time.Second})
	require.Len(t, rep.Checks, 1)
	assert.Equal(t, check.NameReachability, rep.Checks[0].Name)
	assert.False(t, rep.Checks[0].OK)
	assert.Contains(t, rep.Checks[0].Detail, "127.0.0.1:1")
}

// TestHungClusterIsBounded: a cluster that never answers InitProducerId
// (faultnet holds every one) makes the checks that need it fail within
// their timeout; the run returns, and the rest still pass.
func TestHungClusterIsBounded(t *testing.T) {
	c, fn := testcluster.StartFaulty(t, testcluster.Options{})
	fn.SetOnClientClose(faultnet.DropOnClose)
	held := fn.Hold(faultnet.Rule{APIKey: int16(kmsg.InitProducerID), Node: faultnet.AnyNode})
	t.Cleanup(held.Release)
	rep := run(t, check.Options{Config: c.Config, Timeout: 2 * time.Second})
	assert.NotZero(t, held.Count(), "InitProducerId was held")
	for _, n := range []string{check.NameACLTxnWrite, check.NameTxnInit} {
		r := byName(t, rep, n)
		assert.False(t, r.OK, n)
		// The check's timeout, or the transport's read timeout (no longer
		// than the check's), whichever fired first.
		assert.Regexp(t, `no answer within 2s|i/o timeout`, r.Detail, n)
	}
	assert.False(t, byName(t, rep, check.NameTxnFence).OK)
	for _, n := range []string{check.NameVersions, check.NameACLTopicRead, check.NameACLTopicWrite, check.NameACLTxnDescribe} {
		assert.True(t, byName(t, rep, n).OK, n)
	}
	cl := rep.Checks[len(rep.Checks)-1]
	assert.Equal(t, check.NameCleanup, cl.Name, "the cleanup ran")
	assert.Contains(t, cl.Detail, "tombstoned the registration", "the registration is tombstoned although InitProducerId hangs")
}

// TestTransactionTimeoutAboveTheBrokersMaximum: a lease whose transaction
// timeout the brokers refuse fails timeouts and transactions.init, naming
// transaction.max.timeout.ms; the cluster is still reachable.
func TestTransactionTimeoutAboveTheBrokersMaximum(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{BrokerConfigs: map[string]string{"transaction.max.timeout.ms": "2000"}})
	c.RequireFake(t)
	rep := run(t, check.Options{Config: c.Config, Timeout: 5 * time.Second}) // lease 10s: timeout 5s
	assert.True(t, byName(t, rep, check.NameReachability).OK)
	for _, n := range []string{check.NameTimeouts, check.NameTxnInit} {
		r := byName(t, rep, n)
		assert.False(t, r.OK, n)
		assert.Contains(t, r.Detail+r.Fix, "transaction.max.timeout.ms", n)
		assert.Contains(t, r.Fix, "--lease-duration", n)
	}
	assert.True(t, byName(t, rep, check.NameCleanup).OK, "%s", byName(t, rep, check.NameCleanup).Detail)

	rep = run(t, check.Options{Config: c.Config, Timeout: 5 * time.Second, LeaseDuration: 3 * time.Second})
	assert.True(t, rep.OK(), "a 3s lease sends a 1.5s transaction timeout")
}

// TestRoleInUseIsNeverTouched: were the scratch role's name to be a role
// in use (a registered candidate, a holder's lease and token), the run
// writes nothing to it and fences no one: its records and its token are
// what they were.
func TestRoleInUseIsNeverTouched(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{})
	m := c.Members(t)
	role := codec.Role(check.ScratchPrefix + "in-use")
	m.Register(role, "holder")
	m.Lease(role, "holder", time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	before, err := m.Transport.ReadRoleRecords(ctx, role)
	require.NoError(t, err)
	tok, held, err := m.Transport.Describe(ctx, role)
	require.NoError(t, err)
	require.True(t, held)

	rep := run(t, check.WithScratch(check.Options{Config: c.Config, Timeout: 5 * time.Second}, role))
	for _, n := range []string{check.NameACLTopicWrite, check.NameACLTxnWrite, check.NameTxnInit} {
		r := byName(t, rep, n)
		assert.False(t, r.OK, n)
		assert.Contains(t, r.Detail, "exists already", n)
		assert.Contains(t, r.Detail, "left untouched", n)
		assert.Contains(t, r.Fix, "another scratch role", n)
	}
	assert.Contains(t, byName(t, rep, check.NameCleanup).Detail, "nothing written")

	after, err := m.Transport.ReadRoleRecords(ctx, role)
	require.NoError(t, err)
	assert.Equal(t, before, after, "no record was written")
	tok2, held, err := m.Transport.Describe(ctx, role)
	require.NoError(t, err)
	assert.True(t, held)
	assert.Equal(t, tok, tok2, "no epoch was taken")
	// The holder's token still writes: nobody fenced it.
	l, err := codec.NewLease("holder", tok, time.Now().UnixMilli(), time.Now().Add(time.Minute).UnixMilli())
	require.NoError(t, err)
	assert.NoError(t, leaseErr(m.Transport.WriteLease(ctx, role, tok, l)))
}

// TestBudgetBoundsTheRun: once the run's budget is spent (here by checks
// that wait for a held InitProducerId), the checks after it fail at once
// saying so, and the cleanup still runs.
func TestBudgetBoundsTheRun(t *testing.T) {
	c, fn := testcluster.StartFaulty(t, testcluster.Options{})
	fn.SetOnClientClose(faultnet.DropOnClose)
	held := fn.Hold(faultnet.Rule{APIKey: int16(kmsg.InitProducerID), Node: faultnet.AnyNode})
	t.Cleanup(held.Release)
	rep := run(t, check.Options{Config: c.Config, Timeout: 2 * time.Second, Budget: 3 * time.Second})
	notRun := 0
	for _, r := range rep.Checks {
		if strings.Contains(r.Detail, "not run: the run's budget (3s) ran out") {
			assert.False(t, r.OK, r.Name)
			notRun++
		}
	}
	assert.NotZero(t, notRun, "checks after the budget are not run")
	assert.Contains(t, byName(t, rep, check.NameLatency).Detail, "budget")
	assert.Equal(t, check.NameCleanup, rep.Checks[len(rep.Checks)-1].Name)
	assert.Contains(t, rep.Checks[len(rep.Checks)-1].Detail, "tombstoned the registration")
}

// TestViewerSendsOnlyReads: a run --as viewer sends the brokers only
// requests that read (recorded by faultnet on the wire, whatever the
// checks report): no Produce, no InitProducerId, no transaction, no
// CreateTopics or AlterConfigs, even with validate_only.
func TestViewerSendsOnlyReads(t *testing.T) {
	c, fn := testcluster.StartFaulty(t, testcluster.Options{})
	rec := fn.Record("")
	rep := run(t, check.Options{Config: c.Config, As: check.Viewer, Timeout: 5 * time.Second})
	rec.Stop()
	assert.True(t, rep.OK())
	reads := map[kmsg.Key]bool{
		kmsg.ApiVersions: true, kmsg.Metadata: true, kmsg.Fetch: true, kmsg.ListOffsets: true,
		kmsg.FindCoordinator: true, kmsg.DescribeConfigs: true, kmsg.DescribeTransactions: true,
		kmsg.SASLHandshake: true, kmsg.SASLAuthenticate: true,
	}
	reqs := rec.Take()
	require.NotEmpty(t, reqs)
	seen := map[string]int{}
	for _, r := range reqs {
		seen[r.Name()]++
		assert.True(t, reads[kmsg.Key(r.APIKey)], "a viewer's run sent %s (client %s)", r.Name(), r.ClientID)
	}
	t.Logf("requests sent: %v", seen)
	assert.NotZero(t, seen["DescribeTransactions"], "the viewer's checks ran")
}

// TestEveryCheckIsBounded: once the cluster stops answering (faultnet
// holds every request after reachability passed), every check still ends,
// failed, within a generous bound of its timeout, and so does the run: no
// check waits on a broker beyond its --timeout.
func TestEveryCheckIsBounded(t *testing.T) {
	c, fn := testcluster.StartFaulty(t, testcluster.Options{})
	fn.SetOnClientClose(faultnet.DropOnClose)
	// Generous: a check bounded by its timeout takes about one (two when
	// a request of the check before it still holds the connection); one
	// that waits out the clients' own retries takes several.
	const timeout = 2 * time.Second
	const bound = 5 * timeout
	var held *faultnet.Held
	t.Cleanup(func() {
		if held != nil {
			held.Release()
		}
	})
	last := time.Now()
	took := map[string]time.Duration{}
	rep := run(t, check.Options{Config: c.Config, Timeout: timeout, OnResult: func(r check.Result) {
		took[r.Name] = time.Since(last)
		last = time.Now()
		if r.Name == check.NameReachability && held == nil {
			held = fn.Hold(faultnet.Rule{APIKey: faultnet.AnyKey, Node: faultnet.AnyNode})
		}
	}})
	require.True(t, byName(t, rep, check.NameReachability).OK)
	assert.Equal(t, allChecks, names(rep), "every check ran and reported")
	assert.NotZero(t, held.Count(), "requests were held")
	for _, r := range rep.Checks[1:] {
		t.Logf("%-28s took %v", r.Name, took[r.Name].Round(time.Millisecond))
		assert.Less(t, took[r.Name], bound, "%s took %v", r.Name, took[r.Name])
	}
	for _, n := range []string{check.NameVersions, check.NameRoleTopic, check.NameRolePartitions, check.NameDurability, check.NameACLTopicRead,
		check.NameACLTopicWrite, check.NameACLTxnWrite, check.NameACLTxnDescribe, check.NameTxnInit} {
		r := byName(t, rep, n)
		assert.False(t, r.OK, "%s passed against a cluster that answers nothing: %s", n, r.Detail)
	}
	r := byName(t, rep, check.NameVersions)
	assert.Regexp(t, `no answer within 2s|i/o timeout`, r.Detail)
	assert.NotContains(t, r.Fix, "needs transactions", "a broker that does not answer is not one without transactions")
	for _, n := range []string{check.NameACLTopicWrite, check.NameACLTxnWrite, check.NameTxnInit} {
		assert.NotContains(t, byName(t, rep, n).Fix, "another scratch role", "%s: the scratch role was not found in use; it could not be read", n)
	}
	assert.False(t, rep.OK())
}

// TestSilentBrokerIsBounded: an address that accepts connections and never
// answers (a hung broker, a proxy to nowhere) fails reachability within
// the timeout, alone, saying so, instead of hanging.
func TestSilentBrokerIsBounded(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				_ = c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c) // read nothing, answer nothing
		}
	}()
	rep := run(t, check.Options{Config: fencing.Config{Brokers: []string{ln.Addr().String()}}, Timeout: 2 * time.Second})
	require.Len(t, rep.Checks, 1, "the reachability check alone")
	r := rep.Checks[0]
	assert.Equal(t, check.NameReachability, r.Name)
	assert.False(t, r.OK)
	assert.Contains(t, r.Detail, "no broker answered at "+ln.Addr().String()+" within 2s")
	assert.NotContains(t, r.Detail, "\n")
}

// answerConfigs makes the cluster answer every DescribeConfigs with topic
// for the topic resources and broker for the broker resources, as a
// cluster with those settings would (kfake does not take some of them,
// such as unclean.leader.election.enable or the abort interval).
func answerConfigs(c *testcluster.Cluster, topic, broker map[string]string) {
	c.Fake.ControlKey(int16(kmsg.DescribeConfigs), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.Fake.KeepControl()
		dr := req.(*kmsg.DescribeConfigsRequest)
		res := dr.ResponseKind().(*kmsg.DescribeConfigsResponse)
		for _, rr := range dr.Resources {
			values := broker
			if rr.ResourceType == kmsg.ConfigResourceTypeTopic {
				values = topic
			}
			sr := kmsg.NewDescribeConfigsResponseResource()
			sr.ResourceType, sr.ResourceName = rr.ResourceType, rr.ResourceName
			for k, v := range values {
				cfg := kmsg.NewDescribeConfigsResponseResourceConfig()
				cfg.Name, cfg.Value = k, kmsg.StringPtr(v)
				sr.Configs = append(sr.Configs, cfg)
			}
			res.Resources = append(res.Resources, sr)
		}
		return res, nil, true
	})
}

// initTopicConfigs are the role topic's settings as krole init sets them.
func initTopicConfigs() map[string]string {
	return map[string]string{"cleanup.policy": "compact", "segment.ms": check.InitSegmentMS,
		"min.compaction.lag.ms": check.InitMinCompactionLagMS, "delete.retention.ms": check.InitDeleteRetentionMS,
		"min.insync.replicas": "1", "unclean.leader.election.enable": "false"}
}

// TestTopicSettingsReported: role-topic reports segment.ms,
// min.compaction.lag.ms and delete.retention.ms against what krole init
// sets; durability reports the replication factor, min.insync.replicas
// and unclean.leader.election.enable, and fails when an unclean election
// is allowed, naming the setting and the command that turns it off.
func TestTopicSettingsReported(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{})
	c.RequireFake(t)
	broker := map[string]string{fencing.BrokerMaxTxnTimeout: "900000"}
	answerConfigs(c, initTopicConfigs(), broker)
	rep := run(t, check.Options{Config: c.Config, Timeout: 5 * time.Second})
	r := byName(t, rep, check.NameRoleTopic)
	assert.True(t, r.OK && !r.Warn, "%s", r.Detail)
	for _, s := range []string{"cleanup.policy=compact", "segment.ms=3600000 (as init sets it)",
		"min.compaction.lag.ms=600000 (as init sets it)", "delete.retention.ms=604800000 (as init sets it)"} {
		assert.Contains(t, r.Detail, s)
	}
	r = byName(t, rep, check.NameDurability)
	assert.True(t, r.OK && !r.Warn, "%s", r.Detail)
	for _, s := range []string{"replication factor 1", "min.insync.replicas=1", "unclean.leader.election.enable=false"} {
		assert.Contains(t, r.Detail, s)
	}
	assert.True(t, rep.OK())

	c = testcluster.Start(t, testcluster.Options{})
	unclean := initTopicConfigs()
	unclean["unclean.leader.election.enable"] = "true"
	unclean["min.compaction.lag.ms"] = "0"
	answerConfigs(c, unclean, broker)
	rep = run(t, check.Options{Config: c.Config, Timeout: 5 * time.Second})
	assert.Contains(t, byName(t, rep, check.NameRoleTopic).Detail, "min.compaction.lag.ms=0 (init sets 600000)")
	r = byName(t, rep, check.NameDurability)
	assert.False(t, r.OK)
	assert.Contains(t, r.Detail, "unclean.leader.election.enable=true")
	assert.Contains(t, r.Fix, "--add-config unclean.leader.election.enable=false")
	assert.False(t, rep.OK())
}

// TestAbortIntervalAgainstTheLease: timeouts states the brokers' abort
// check interval and what it costs (how long a crashed holder holds back
// read_committed readers), and warns when it is longer than the lease,
// naming the setting.
func TestAbortIntervalAgainstTheLease(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{})
	c.RequireFake(t)
	answerConfigs(c, initTopicConfigs(), map[string]string{fencing.BrokerMaxTxnTimeout: "900000", fencing.BrokerAbortInterval: "60000"})
	rep := run(t, check.Options{Config: c.Config, Timeout: 5 * time.Second}) // lease 10s: transaction timeout 5s
	r := byName(t, rep, check.NameTimeouts)
	assert.True(t, r.OK, "a warning: %s", r.Detail)
	assert.True(t, r.Warn, "%s", r.Detail)
	assert.Contains(t, r.Detail, "transaction.max.timeout.ms=900000")
	assert.Contains(t, r.Detail, "abort check every 1m0s")
	assert.Contains(t, r.Detail, "holds back read_committed readers of its partition for up to 1m5s")
	assert.Contains(t, r.Detail, "longer than the lease")
	assert.Contains(t, r.Fix, fencing.BrokerAbortInterval)

	rep = run(t, check.Options{Config: c.Config, Timeout: 5 * time.Second, LeaseDuration: 2 * time.Minute})
	r = byName(t, rep, check.NameTimeouts)
	assert.True(t, r.OK && !r.Warn, "%s", r.Detail)
	assert.Contains(t, r.Detail, "abort check every 1m0s")
	assert.Contains(t, r.Detail, "for up to 2m0s") // transaction timeout 1m + the interval
}

// TestClockSkewWarns: a broker clock off from the local one by more than
// ClockWarn (here the local clock set 5 s behind, which is the broker 5 s
// ahead) makes the clock check warn, with the offset and the fix; within
// the bound it passes.
func TestClockSkewWarns(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{})
	behind := func() time.Time { return time.Now().Add(-5 * time.Second) }
	rep := run(t, check.WithClock(check.Options{Config: c.Config, Timeout: 5 * time.Second}, behind))
	r := byName(t, rep, check.NameClock)
	assert.True(t, r.OK && r.Warn, "%s", r.Detail)
	assert.Regexp(t, `clock is (49[0-9][0-9]|50[0-9][0-9]) ms ahead of this machine's`, r.Detail)
	assert.Contains(t, r.Detail, "more than 1s")
	assert.Contains(t, r.Fix, "NTP")
	assert.True(t, rep.OK(), "a warning fails nothing")

	rep = run(t, check.WithClock(check.Options{Config: c.Config, Timeout: 5 * time.Second, ClockWarn: time.Minute}, behind))
	r = byName(t, rep, check.NameClock)
	assert.True(t, r.OK && !r.Warn, "within ClockWarn: %s", r.Detail)
}

// TestSlowLeaseWritesWarn: on a cluster whose EndTxn takes 100 ms, the
// latency check reports p50 and p99 of the burst and the smallest safe
// lease they imply, and warns when the configured lease is shorter,
// naming --lease-duration.
func TestSlowLeaseWritesWarn(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{})
	c.RequireFake(t)
	c.Fake.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if strings.Contains(req.(*kmsg.EndTxnRequest).TransactionalID, check.ScratchPrefix) {
			c.Fake.SleepControl(func() { time.Sleep(100 * time.Millisecond) })
		}
		return nil, nil, false // then handled as usual
	})
	rep := run(t, check.Options{Config: c.Config, Timeout: 5 * time.Second, LeaseDuration: time.Second, Burst: 5})
	r := byName(t, rep, check.NameLatency)
	assert.True(t, r.OK && r.Warn, "%s", r.Detail)
	assert.Regexp(t, `5 transactions .*: p50 \S+, p99 \S+; the smallest safe lease on this network is about \S+`, r.Detail)
	assert.Contains(t, r.Detail, "the lease is 1s: too short")
	assert.Regexp(t, `^run the members with --lease-duration \S+ or longer$`, r.Fix)
	assert.True(t, byName(t, rep, check.NameTxnFence).OK, "the slow commits are still fenced: %s", byName(t, rep, check.NameTxnFence).Detail)
}

// TestClusterWithoutDescribeTransactions: a cluster that does not serve
// DescribeTransactions warns in versions and fails describe, naming it;
// the transaction checks still run and pass (the guard against a role in
// use then rests on the role's records).
func TestClusterWithoutDescribeTransactions(t *testing.T) {
	if testcluster.External() {
		t.Skip("caps the embedded cluster's versions")
	}
	v := kversion.V4_0_0()
	v.SetMaxKeyVersion(int16(kmsg.DescribeTransactions), -1)
	c := testcluster.Start(t, testcluster.Options{MaxVersions: v})
	rep := run(t, check.Options{Config: c.Config, Timeout: 5 * time.Second})
	r := byName(t, rep, check.NameVersions)
	assert.True(t, r.OK && r.Warn, "%s", r.Detail)
	assert.Contains(t, r.Detail, "does not serve DescribeTransactions (key 65)")
	r = byName(t, rep, check.NameDescribe)
	assert.False(t, r.OK)
	assert.Contains(t, r.Detail, "DescribeTransactions")
	assert.Contains(t, r.Fix, "krole describe needs DescribeTransactions")
	for _, n := range []string{check.NameACLTopicWrite, check.NameACLTxnWrite, check.NameTxnInit, check.NameTxnFence,
		check.NameTxnReadCommit, check.NameLatency, check.NameCleanup} {
		assert.True(t, byName(t, rep, n).OK, "%s: %s", n, byName(t, rep, n).Detail)
	}
	requireScratchGone(t, c)
}

// TestReadCommittedPastAnOpenTransactionFails: a broker whose
// read_committed fetch reports a last stable offset past an open
// transaction's write (it would show uncommitted writes) fails
// transactions.read-committed. The control answers the first
// read_committed fetch from inside a partition (neither its start nor past
// its end), which is the check's fetch while the scenario's transaction is
// open.
func TestReadCommittedPastAnOpenTransactionFails(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{})
	c.RequireFake(t)
	var lied atomic.Int32
	c.Fake.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		fr := req.(*kmsg.FetchRequest)
		if fr.IsolationLevel != 1 || lied.Load() > 0 || len(fr.Topics) != 1 || len(fr.Topics[0].Partitions) != 1 ||
			fr.Topics[0].Topic != c.Config.Topic || fr.Topics[0].Partitions[0].FetchOffset == 0 ||
			fr.Topics[0].Partitions[0].FetchOffset > 1<<40 { // acl.topic.read fetches past the end
			return nil, nil, false
		}
		lied.Add(1)
		res := fr.ResponseKind().(*kmsg.FetchResponse)
		st := kmsg.NewFetchResponseTopic()
		st.Topic = fr.Topics[0].Topic
		sp := kmsg.NewFetchResponseTopicPartition()
		sp.Partition = fr.Topics[0].Partitions[0].Partition
		sp.HighWatermark = fr.Topics[0].Partitions[0].FetchOffset + 1
		sp.LastStableOffset = sp.HighWatermark
		sp.RecordBatches = []byte{} // no records (nil would encode as null)
		st.Partitions = append(st.Partitions, sp)
		res.Topics = append(res.Topics, st)
		return res, nil, true
	})
	rep := run(t, check.Options{Config: c.Config, Timeout: 5 * time.Second})
	require.Equal(t, int32(1), lied.Load())
	r := byName(t, rep, check.NameTxnReadCommit)
	assert.False(t, r.OK)
	assert.Contains(t, r.Detail, "past the open transaction's write")
	assert.Contains(t, r.Fix, "do not rely on krole")
	assert.False(t, rep.OK())
	assert.True(t, byName(t, rep, check.NameCleanup).OK)
}

// TestAbortedWritesShownFails: a broker whose read_committed fetches do
// not say which transactions were aborted (faultnet strips the list from
// its answers), so that readers show aborted writes, fails
// transactions.read-committed.
func TestAbortedWritesShownFails(t *testing.T) {
	c, fn := testcluster.StartFaulty(t, testcluster.Options{})
	rw := fn.Rewrite(faultnet.Rule{APIKey: int16(kmsg.Fetch), Node: faultnet.AnyNode},
		func(req kmsg.Request, resp kmsg.Response) kmsg.Response {
			if req.(*kmsg.FetchRequest).IsolationLevel != 1 {
				return nil
			}
			res, stripped := resp.(*kmsg.FetchResponse), false
			for i := range res.Topics {
				for j := range res.Topics[i].Partitions {
					if sp := &res.Topics[i].Partitions[j]; len(sp.AbortedTransactions) > 0 {
						sp.AbortedTransactions, stripped = nil, true
					}
				}
			}
			if !stripped {
				return nil
			}
			return res
		})
	rep := run(t, check.Options{Config: c.Config, Timeout: 5 * time.Second})
	require.NotZero(t, rw.Count(), "an aborted transaction was hidden")
	r := byName(t, rep, check.NameTxnReadCommit)
	assert.False(t, r.OK)
	assert.Contains(t, r.Detail, "krole's read_committed reader returned the aborted write")
	assert.Contains(t, r.Fix, "do not rely on krole")
}

// leaseErr is the error of a WriteLease, for tests that do not look at
// the offset.
func leaseErr(_ int64, err error) error { return err }

// TestPartitionCountChanged: a role's records in a partition other than
// the one the role maps to for the topic's partition count now (the
// count grew after they were written) fail role-partitions, naming the
// role, the partition they lie in and the one it maps to now.
func TestPartitionCountChanged(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{Partitions: 2})
	var role codec.Role
	for i := 0; role == ""; i++ {
		if r := codec.Role(fmt.Sprintf("db-%d", i)); codec.Partition(r, 2) != codec.Partition(r, 3) {
			role = r
		}
	}
	m := c.Members(t)
	m.Register(role, "m1")
	m.Lease(role, "m1", time.Minute)
	rep := run(t, check.Options{Config: c.Config, As: check.Viewer})
	r := byName(t, rep, check.NameRolePartitions)
	assert.True(t, r.OK, r.Detail)
	assert.Regexp(t, `each role's records lie in the partition it maps to among 2 \(\d+ record\(s\) read\)$`, r.Detail)

	admin, err := sarama.NewClusterAdmin(c.Config.Brokers, c.Sarama(t))
	require.NoError(t, err)
	defer admin.Close()
	require.NoError(t, admin.CreatePartitions(c.Config.Topic, 3, nil, false))

	rep = run(t, check.Options{Config: c.Config, As: check.Viewer})
	assert.False(t, rep.OK())
	r = byName(t, rep, check.NameRolePartitions)
	assert.False(t, r.OK)
	assert.Equal(t, fmt.Sprintf("role %s has records in partition %d of topic %s but maps to partition %d of its 3 now: "+
		"the topic's partition count changed, and the role's fencing numbers started again",
		role, codec.Partition(role, 2), c.Config.Topic, codec.Partition(role, 3)), r.Detail)
	assert.Contains(t, r.Fix, "partition count must not change")
	assert.True(t, byName(t, rep, check.NameRoleTopic).OK, "the topic itself is as krole needs it")
}
