package fencing_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/devcluster"
	"github.com/krabka/krole/internal/testcluster"
)

// TestAuthorizationErrors runs each Transport operation as a principal
// that lacks the ACL it needs, against kfake with ACLs on, and checks
// that the error names that ACL, matches ErrNotAuthorized and the
// broker's code, and keeps its kind; and that a refusal is not resent
// until the request budget runs out.
func TestAuthorizationErrors(t *testing.T) {
	if testcluster.External() {
		t.Skip("needs the embedded cluster with ACLs; KROLE_BROKERS names an outside cluster")
	}
	const topic = "authz.roles"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	acl := func(res kmsg.ACLResourceType, name string, op kmsg.ACLOperation) kfake.ACL {
		return kfake.ACL{Resource: res, Name: name, Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: op, Allow: true}
	}
	fake, err := devcluster.Start(ctx, testcluster.DevOptions(t, devcluster.Options{Extra: []kfake.Opt{
		kfake.EnableSASL(),
		kfake.EnableACLs(),
		kfake.Superuser(fencing.SASLScramSHA256, "admin", "admin-pw"),
		// Describe on the topic, nothing on the transactional ids.
		kfake.User(fencing.SASLScramSHA256, "nobody", "nobody-pw", acl(kmsg.ACLResourceTypeTopic, topic, kmsg.ACLOperationDescribe)),
	}}))
	require.NoError(t, err)
	t.Cleanup(fake.Close)
	cfg := func(user string) fencing.Config {
		return fencing.Config{Brokers: fake.ListenAddrs(), Topic: topic,
			// A request budget far longer than the test's bound below:
			// a refusal resent until it ran out would show.
			RequestTimeout: time.Minute,
			SASL:           fencing.SASLConfig{Mechanism: fencing.SASLScramSHA256, User: user, Password: user + "-pw"}}
	}
	require.NoError(t, devcluster.CreateTopic(ctx, cfg("admin"), 1, 1))
	tr, err := fencing.NewBrokerTransport(cfg("nobody"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = tr.Close() })

	const role codec.Role = "ctl"
	for _, tc := range []struct {
		name string
		call func(ctx context.Context) error
		kind error
		want fencing.AuthorizationError
		msg  string
	}{
		{"AcquireEpoch", func(ctx context.Context) error { _, err := tr.AcquireEpoch(ctx, role); return err },
			fencing.ErrClient, // refused at FindCoordinator, before InitProducerId
			fencing.AuthorizationError{Operation: "WRITE", Resource: fencing.ResourceTransactionalID, Name: "krole.ctl", Code: sarama.ErrTransactionalIDAuthorizationFailed},
			"not authorized: WRITE on TransactionalId krole.ctl (TRANSACTIONAL_ID_AUTHORIZATION_FAILED)"},
		{"Describe", func(ctx context.Context) error { _, _, err := tr.Describe(ctx, role); return err },
			fencing.ErrAdmin,
			fencing.AuthorizationError{Operation: "DESCRIBE", Resource: fencing.ResourceTransactionalID, Name: "krole.ctl", Code: sarama.ErrTransactionalIDAuthorizationFailed},
			"not authorized: DESCRIBE on TransactionalId krole.ctl (TRANSACTIONAL_ID_AUTHORIZATION_FAILED)"},
		{"DescribeMany", func(ctx context.Context) error { _, err := tr.DescribeMany(ctx, []codec.Role{role}); return err },
			fencing.ErrAdmin,
			fencing.AuthorizationError{Operation: "DESCRIBE", Resource: fencing.ResourceTransactionalID, Name: "krole.ctl", Code: sarama.ErrTransactionalIDAuthorizationFailed},
			"not authorized: DESCRIBE on TransactionalId krole.ctl (TRANSACTIONAL_ID_AUTHORIZATION_FAILED)"},
		{"Register", func(ctx context.Context) error { _, err := tr.Register(ctx, role, "m-1"); return err },
			fencing.ErrProducer,
			fencing.AuthorizationError{Operation: "WRITE", Resource: fencing.ResourceTopic, Name: topic, Code: sarama.ErrTopicAuthorizationFailed},
			"not authorized: WRITE on Topic authz.roles (TOPIC_AUTHORIZATION_FAILED)"},
		{"ReadRoleRecords", func(ctx context.Context) error { _, err := tr.ReadRoleRecords(ctx, role); return err },
			fencing.ErrClient,
			fencing.AuthorizationError{Operation: "READ", Resource: fencing.ResourceTopic, Name: topic, Code: sarama.ErrTopicAuthorizationFailed},
			"not authorized: READ on Topic authz.roles (TOPIC_AUTHORIZATION_FAILED)"},
		{"CheckRead", func(ctx context.Context) error { return tr.CheckRead(ctx, role) },
			fencing.ErrClient,
			fencing.AuthorizationError{Operation: "READ", Resource: fencing.ResourceTopic, Name: topic, Code: sarama.ErrTopicAuthorizationFailed},
			"not authorized: READ on Topic authz.roles (TOPIC_AUTHORIZATION_FAILED)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Bounded well below the minute of RequestTimeout: the
			// refusal is final at the first answer.
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			err := tc.call(cctx)
			require.Error(t, err)
			require.NoError(t, cctx.Err(), "the refusal was resent until the test's bound: %v", err)
			assert.True(t, fencing.IsNotAuthorized(err), "%v", err)
			assert.ErrorIs(t, err, fencing.ErrNotAuthorized)
			assert.ErrorIs(t, err, tc.kind, "the kind stays")
			assert.ErrorIs(t, err, tc.want.Code, "the broker's code")
			var ae *fencing.AuthorizationError
			require.True(t, errors.As(err, &ae), "%v", err)
			assert.Equal(t, tc.msg, ae.Error())
			ae.Err = nil
			assert.Equal(t, tc.want, *ae)
		})
	}

	t.Run("CheckRead allowed", func(t *testing.T) {
		admin, err := fencing.NewBrokerTransport(cfg("admin"))
		require.NoError(t, err)
		defer admin.Close()
		assert.NoError(t, admin.CheckRead(ctx, role), "an empty partition")
		_, err = admin.Register(ctx, role, "m-1")
		require.NoError(t, err)
		assert.NoError(t, admin.CheckRead(ctx, role), "a partition with a record")
	})
}

func TestAuthorizationErrorMessages(t *testing.T) {
	cause := fmt.Errorf("InitProducerId: %w", sarama.ErrTransactionalIDAuthorizationFailed)
	for _, tc := range []struct {
		err  fencing.AuthorizationError
		want string
	}{
		{fencing.AuthorizationError{Operation: "WRITE", Resource: fencing.ResourceTransactionalID, Name: "krole.ctl", Code: sarama.ErrTransactionalIDAuthorizationFailed},
			"not authorized: WRITE on TransactionalId krole.ctl (TRANSACTIONAL_ID_AUTHORIZATION_FAILED)"},
		{fencing.AuthorizationError{Operation: "READ", Resource: fencing.ResourceGroup, Name: "g", Code: sarama.ErrGroupAuthorizationFailed},
			"not authorized: READ on Group g (GROUP_AUTHORIZATION_FAILED)"},
		{fencing.AuthorizationError{Resource: fencing.ResourceCluster, Code: sarama.ErrClusterAuthorizationFailed},
			"not authorized: Cluster (CLUSTER_AUTHORIZATION_FAILED)"},
		{fencing.AuthorizationError{Operation: "WRITE", Resource: fencing.ResourceTopic, Code: sarama.ErrTopicAuthorizationFailed},
			"not authorized: WRITE on Topic (TOPIC_AUTHORIZATION_FAILED)"},
	} {
		assert.Equal(t, tc.want, tc.err.Error())
	}
	// A bare code from another client: named for the need when the
	// resource matches, by its resource alone otherwise.
	need := fencing.AuthorizationError{Operation: "READ", Resource: fencing.ResourceTopic, Name: "krole.roles"}
	a := fencing.AuthorizationOf(fmt.Errorf("fetch: %w", sarama.ErrTopicAuthorizationFailed), need)
	require.NotNil(t, a)
	assert.Equal(t, "not authorized: READ on Topic krole.roles (TOPIC_AUTHORIZATION_FAILED)", a.Error())
	a = fencing.AuthorizationOf(cause, need)
	require.NotNil(t, a)
	assert.Equal(t, "not authorized: TransactionalId (TRANSACTIONAL_ID_AUTHORIZATION_FAILED)", a.Error())
	assert.ErrorIs(t, a, fencing.ErrNotAuthorized)
	assert.ErrorIs(t, a, sarama.ErrTransactionalIDAuthorizationFailed)
	assert.Nil(t, fencing.AuthorizationOf(fmt.Errorf("x: %w", sarama.ErrNotLeaderForPartition), need))
	assert.Nil(t, fencing.AuthorizationOf(nil, need))
}
