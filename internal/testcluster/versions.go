package testcluster

import (
	"fmt"
	"os"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/krabka/krole/internal/devcluster"
)

// VersionsEnv names the environment variable that caps every embedded
// cluster [Start] starts (when Options.MaxVersions is nil), and every one
// a test or the chaos suite starts through devcluster.Start with options
// passed through [CapFromEnv] or [DevOptions], with one of the tables of
// [RealBrokers], by its Key: KROLE_TEST_VERSIONS=redpanda go test ./...
// runs the whole suite as against Redpanda's versions. An unknown key
// fails the test. `make test-versions` (run by CI) runs the packages
// whose requests depend on the versions once under each table.
const VersionsEnv = "KROLE_TEST_VERSIONS"

// BrokerVersions is a named table of the maximum request versions a real
// broker advertises, for [Options].MaxVersions.
type BrokerVersions struct {
	// Name says which broker and release, for test names.
	Name string
	// Key names the table in [VersionsEnv]: "kafka-3.0", "kafka-4.0",
	// "redpanda".
	Key string
	// Versions are the maxima per request key; a key the broker does not
	// serve is absent.
	Versions *kversion.Versions
}

// RealBrokers returns the version tables the version matrix runs under:
// Apache Kafka 3.0 and 4.0 (franz-go's kversion tables, taken from
// Apache Kafka's clients/src/main/resources/common/message/*Request.json
// of each release) and Redpanda ([RedpandaVersions]). Each call returns
// fresh tables.
//
// kfake caps only the maxima: a broker's minimum (Apache Kafka 4.0 drops
// Produce below v3, Fetch below v4 and more, KIP-896) is not enforced.
// sarama negotiates each request down to the broker's maximum and never
// up to a minimum, so krole must send nothing below those minima itself;
// the versions it builds by hand (package fencing, request.go) are all
// above them.
func RealBrokers() []BrokerVersions {
	return []BrokerVersions{
		{Name: "Apache Kafka 3.0", Key: "kafka-3.0", Versions: kversion.V3_0_0()},
		{Name: "Apache Kafka 4.0", Key: "kafka-4.0", Versions: kversion.V4_0_0()},
		{Name: "Redpanda 24.3", Key: "redpanda", Versions: RedpandaVersions()},
	}
}

// RedpandaVersions returns the request versions Redpanda serves, from
// redpanda-data/redpanda at commit 1c6cff34 (December 2024, the 24.3
// line): the handler list is src/v/kafka/server/handlers/handlers.h
// (request_types) and each maximum is the last argument of the handler's
// template in src/v/kafka/server/handlers/<name>.h (for example
// produce.h: two_phase_handler<produce_api, 0, 7>). Redpanda serves no
// DescribeCluster, ElectLeaders, DescribeUserScramCredentials or later
// keys of that table, so they are absent.
func RedpandaVersions() *kversion.Versions {
	maxima := map[kmsg.Key]int16{
		kmsg.Produce:                    7,  // produce.h
		kmsg.Fetch:                      11, // fetch.h
		kmsg.ListOffsets:                4,  // list_offsets.h
		kmsg.Metadata:                   8,  // metadata.h
		kmsg.OffsetCommit:               8,  // offset_commit.h
		kmsg.OffsetFetch:                7,  // offset_fetch.h
		kmsg.FindCoordinator:            3,  // find_coordinator.h
		kmsg.JoinGroup:                  6,  // join_group.h
		kmsg.Heartbeat:                  4,  // heartbeat.h
		kmsg.LeaveGroup:                 4,  // leave_group.h
		kmsg.SyncGroup:                  4,  // sync_group.h
		kmsg.DescribeGroups:             5,  // describe_groups.h
		kmsg.ListGroups:                 4,  // list_groups.h
		kmsg.SASLHandshake:              1,  // sasl_handshake.h
		kmsg.ApiVersions:                3,  // api_versions.h
		kmsg.CreateTopics:               6,  // create_topics.h
		kmsg.DeleteTopics:               5,  // delete_topics.h
		kmsg.DeleteRecords:              2,  // delete_records.h
		kmsg.InitProducerID:             3,  // init_producer_id.h
		kmsg.OffsetForLeaderEpoch:       4,  // offset_for_leader_epoch.h
		kmsg.AddPartitionsToTxn:         3,  // add_partitions_to_txn.h
		kmsg.AddOffsetsToTxn:            1,  // add_offsets_to_txn.h
		kmsg.EndTxn:                     3,  // end_txn.h
		kmsg.TxnOffsetCommit:            3,  // txn_offset_commit.h
		kmsg.DescribeACLs:               2,  // describe_acls.h
		kmsg.CreateACLs:                 2,  // create_acls.h
		kmsg.DeleteACLs:                 2,  // delete_acls.h
		kmsg.DescribeConfigs:            4,  // describe_configs.h
		kmsg.AlterConfigs:               2,  // alter_configs.h
		kmsg.DescribeLogDirs:            2,  // describe_log_dirs.h
		kmsg.SASLAuthenticate:           2,  // sasl_authenticate.h
		kmsg.CreatePartitions:           3,  // create_partitions.h
		kmsg.DeleteGroups:               2,  // delete_groups.h
		kmsg.IncrementalAlterConfigs:    1,  // incremental_alter_configs.h
		kmsg.AlterPartitionAssignments:  0,  // alter_partition_reassignments.h
		kmsg.ListPartitionReassignments: 0,  // list_partition_reassignments.h
		kmsg.OffsetDelete:               0,  // offset_delete.h
		kmsg.DescribeClientQuotas:       1,  // describe_client_quotas.h
		kmsg.AlterClientQuotas:          1,  // alter_client_quotas.h
		kmsg.DescribeProducers:          0,  // describe_producers.h
		kmsg.DescribeTransactions:       0,  // describe_transactions.h
		kmsg.ListTransactions:           0,  // list_transactions.h
	}
	res := kmsg.NewApiVersionsResponse()
	for k, v := range maxima {
		ak := kmsg.NewApiVersionsResponseApiKey()
		ak.ApiKey, ak.MaxVersion = int16(k), v
		res.ApiKeys = append(res.ApiKeys, ak)
	}
	return kversion.FromApiVersionsResponse(&res)
}

// versionsFromEnv returns the table [VersionsEnv] names, nil when it is
// unset, and an error for an unknown key.
func versionsFromEnv() (*kversion.Versions, error) {
	key := os.Getenv(VersionsEnv)
	if key == "" {
		return nil, nil
	}
	var keys []string
	for _, b := range RealBrokers() {
		if b.Key == key {
			return b.Versions, nil
		}
		keys = append(keys, b.Key)
	}
	return nil, fmt.Errorf("%s=%q: not one of %v", VersionsEnv, key, keys)
}

// CapFromEnv returns opts with the table [VersionsEnv] names appended to
// opts.Extra (kfake.MaxVersions), unchanged when the variable is unset,
// and an error for an unknown key. Tests (and the chaos suite) that start
// an embedded cluster through devcluster.Start directly pass their
// options through it, so a capped run (`make test-versions`) caps their
// clusters too; devcluster itself, and so `krole dev`, never reads the
// variable.
func CapFromEnv(opts devcluster.Options) (devcluster.Options, error) {
	v, err := versionsFromEnv()
	if err != nil || v == nil {
		return opts, err
	}
	opts.Extra = append(append([]kfake.Opt(nil), opts.Extra...), kfake.MaxVersions(v))
	return opts, nil
}

// DevOptions is [CapFromEnv] for a test: an unknown key fails t.
func DevOptions(t testing.TB, opts devcluster.Options) devcluster.Options {
	t.Helper()
	opts, err := CapFromEnv(opts)
	if err != nil {
		t.Fatalf("%v", err)
	}
	return opts
}
