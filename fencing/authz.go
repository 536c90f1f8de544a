package fencing

// Authorization failures: a broker with an authorizer refuses a request
// whose principal lacks an ACL with one of four codes. The Transport
// operations know which ACL they need on each kind of resource, so they
// turn the bare code into an [*AuthorizationError] naming it.

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/IBM/sarama"

	"github.com/krabka/krole/codec"
)

// ErrNotAuthorized matches every error whose cause is an
// [*AuthorizationError]; the [*Error] carrying it keeps its Kind. No retry
// fixes it.
var ErrNotAuthorized = errors.New("not authorized")

// Kafka ACL resource types, as [AuthorizationError].Resource names them.
const (
	ResourceTopic           = "Topic"
	ResourceGroup           = "Group"
	ResourceCluster         = "Cluster"
	ResourceTransactionalID = "TransactionalId"
)

// AuthorizationError names the ACL the cluster found missing: the
// operation the call needs on the resource, and the broker's code (29,
// 30, 31 or 53). It matches [ErrNotAuthorized] and its Code's
// sarama.KError.
type AuthorizationError struct {
	Operation string        // the ACL operation the call needs: "WRITE", "READ", "DESCRIBE"; "" when unknown
	Resource  string        // ResourceTopic, ResourceGroup, ResourceCluster or ResourceTransactionalID
	Name      string        // the resource's name; "" for the Cluster, or when unknown
	Code      sarama.KError // the broker's answer
	Err       error         // the cause: the failed request, wrapping Code
}

// authzCodes maps the four authorization codes to their resource type and
// Kafka name.
var authzCodes = map[sarama.KError]struct{ resource, name string }{
	sarama.ErrTopicAuthorizationFailed:           {ResourceTopic, "TOPIC_AUTHORIZATION_FAILED"},
	sarama.ErrGroupAuthorizationFailed:           {ResourceGroup, "GROUP_AUTHORIZATION_FAILED"},
	sarama.ErrClusterAuthorizationFailed:         {ResourceCluster, "CLUSTER_AUTHORIZATION_FAILED"},
	sarama.ErrTransactionalIDAuthorizationFailed: {ResourceTransactionalID, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"},
}

// Error is one line naming the missing ACL, e.g. "not authorized: WRITE on
// TransactionalId krole.controller (TRANSACTIONAL_ID_AUTHORIZATION_FAILED)".
func (e *AuthorizationError) Error() string {
	what := e.Resource
	if e.Name != "" {
		what += " " + e.Name
	}
	if e.Operation != "" {
		what = e.Operation + " on " + what
	}
	return fmt.Sprintf("not authorized: %s (%s)", what, authzCodes[e.Code].name)
}

// Unwrap returns the cause.
func (e *AuthorizationError) Unwrap() error { return e.Err }

// Is matches [ErrNotAuthorized].
func (e *AuthorizationError) Is(target error) bool { return target == ErrNotAuthorized }

// IsNotAuthorized reports whether err says that the cluster refused a call
// for want of an ACL.
func IsNotAuthorized(err error) bool { return errors.Is(err, ErrNotAuthorized) }

// AuthorizationOf returns the [*AuthorizationError] err carries, or one
// made from a bare code (another client's, the view's), filled from need
// when the resource matches; nil when err is no refusal.
func AuthorizationOf(err error, need AuthorizationError) *AuthorizationError {
	var a *AuthorizationError
	if errors.As(err, &a) {
		return a
	}
	var code sarama.KError
	if !errors.As(err, &code) {
		return nil
	}
	c, ok := authzCodes[code]
	if !ok {
		return nil
	}
	a = &AuthorizationError{Resource: c.resource, Code: code, Err: err}
	if c.resource == need.Resource {
		a.Operation, a.Name = need.Operation, need.Name
	}
	return a
}

// notAuthorizedCode reports whether err carries one of the four
// authorization codes.
func notAuthorizedCode(err error) bool {
	var code sarama.KError
	if !errors.As(err, &code) {
		return false
	}
	_, ok := authzCodes[code]
	return ok
}

// needs says which ACL an operation needs on each kind of resource it
// touches: the operation and the resource's name. A zero field names
// nothing.
type needs struct {
	txnOp, txnID   string
	topicOp, topic string
	groupOp, group string
	clusterOp      string
}

// authz wraps the cause of err's [*Error] in an [*AuthorizationError] when
// it is an authorization code; one already there only gets n's blanks.
func (n needs) authz(err error) error {
	var e *Error
	if err == nil || !errors.As(err, &e) || e.Err == nil {
		return err
	}
	var a *AuthorizationError
	if errors.As(e.Err, &a) {
		if a.Name == "" {
			n.fill(a)
		}
		return err
	}
	var code sarama.KError
	if !errors.As(e.Err, &code) {
		return err
	}
	c, ok := authzCodes[code]
	if !ok {
		return err
	}
	a = &AuthorizationError{Resource: c.resource, Code: code, Err: e.Err}
	n.fill(a)
	e.Err = a
	return err
}

// fill sets a's operation and name to what n needs on a's resource,
// where n names them.
func (n needs) fill(a *AuthorizationError) {
	op, name := "", ""
	switch a.Resource {
	case ResourceTransactionalID:
		op, name = n.txnOp, n.txnID
	case ResourceTopic:
		op, name = n.topicOp, n.topic
	case ResourceGroup:
		op, name = n.groupOp, n.group
	case ResourceCluster:
		op = n.clusterOp
	}
	if op != "" {
		a.Operation = op
	}
	if name != "" {
		a.Name = name
	}
}

// CheckRead returns nil when this transport may read role's partition,
// else an [ErrClient] wrapping an [*AuthorizationError] (READ on the
// topic), so a member learns it before it registers. Its one fetch, past
// any log's end, reads no record. It blocks for a metadata lookup and a
// fetch, bounded by ctx and cfg.RequestTimeout.
func (t *BrokerTransport) CheckRead(ctx context.Context, role codec.Role) (err error) {
	defer func() { err = needs{topicOp: "READ", topic: t.cfg.Topic}.authz(err) }()
	p, err := t.partitionOf(ctx, role)
	if err != nil {
		return err
	}
	blk, err := t.fetch(ctx, t.cfg.Topic, p, math.MaxInt64)
	if err != nil {
		return &Error{Kind: ErrClient, Role: role, Err: fmt.Errorf("fetch %s/%d: %w", t.cfg.Topic, p, err)}
	}
	if notAuthorizedCode(blk.Err) {
		return &Error{Kind: ErrClient, Role: role, Err: fmt.Errorf("fetch %s/%d: %w", t.cfg.Topic, p, blk.Err)}
	}
	return nil
}
