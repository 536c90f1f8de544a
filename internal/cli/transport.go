package cli

import (
	"context"

	ucli "github.com/urfave/cli/v2"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/explain"
	"github.com/krabka/krole/internal/liveview"
	"github.com/krabka/krole/internal/runner"
)

// roleClient is what the one-shot commands need from the cluster: the
// read and registration calls of [fencing.Transport], and Close.
type roleClient interface {
	Register(ctx context.Context, role codec.Role, member codec.MemberID) (int64, error)
	// RegisterValue is Register with the member's value; see
	// [fencing.BrokerTransport.RegisterValue].
	RegisterValue(ctx context.Context, role codec.Role, member codec.MemberID, value string) (int64, error)
	Deregister(ctx context.Context, role codec.Role, member codec.MemberID) error
	ReadRoleRecords(ctx context.Context, role codec.Role) ([]fencing.RoleRecord, error)
	// ReadSession reads member's member-session records; see
	// [fencing.BrokerTransport.ReadSession].
	ReadSession(ctx context.Context, member codec.MemberID) ([]fencing.RoleRecord, error)
	Describe(ctx context.Context, role codec.Role) (codec.Token, bool, error)
	// Config is the configuration the client connected with, defaults
	// applied.
	Config() fencing.Config
	Close() error
}

// roleCall is what a command on one role starts from: its ROLE, its
// --member when it takes one, and either a client of the cluster or a
// caught-up view of the role topic.
type roleCall struct {
	role   codec.Role
	member codec.MemberID // "" unless the command takes --member
	t      roleClient     // nil with a view
	lv     *liveview.View // nil without one
}

// roleNeeds says what a command on one role needs besides its ROLE.
type roleNeeds struct {
	member   bool         // its --member
	view     bool         // a view of the role topic, caught up within --timeout (see readyView); else a client
	quiet    bool         // with view: interrupted while the view catches up, the command ends without an error
	validate func() error // when not nil, validates the command's other flags before it connects
}

// openRole reads the command's ROLE argument and what n asks for, and
// connects to the cluster: a client (see openTransport) or a view (see
// readyView). The caller calls close. It returns nil and a nil error when
// n.quiet and the view's wait was interrupted.
func openRole(c *ucli.Context, n roleNeeds) (*roleCall, error) {
	rc := &roleCall{}
	var err error
	if rc.role, err = roleArg(c); err != nil {
		return nil, err
	}
	if n.member {
		if rc.member, err = memberArg(c); err != nil {
			return nil, err
		}
	}
	if n.view {
		if rc.lv, err = readyView(c, n.validate, n.quiet); rc.lv == nil {
			return nil, err
		}
		return rc, nil
	}
	if n.validate != nil {
		if err := n.validate(); err != nil {
			return nil, err
		}
	}
	if rc.t, err = openTransport(c); err != nil {
		return nil, err
	}
	return rc, nil
}

// close closes the client or stops the view.
func (rc *roleCall) close() {
	if rc.t != nil {
		rc.t.Close()
	}
	if rc.lv != nil {
		rc.lv.Stop()
	}
}

// openTransport connects to the cluster that the global flags name. When
// no broker answers, the error says so, naming the addresses tried. The
// errors of the calls on the returned client name the topic when it does
// not exist. The caller closes the client.
func openTransport(c *ucli.Context) (roleClient, error) {
	cfg, err := configFrom(c)
	if err != nil {
		return nil, err
	}
	// The dial takes no context: it is abandoned when c.Context ends
	// (--timeout, an interrupt), and bounded by cfg's timeouts anyway.
	t, err := runner.StartInterruptible(c.Context, func() (*fencing.BrokerTransport, error) { return explain.Dial(cfg) })
	if err != nil {
		return nil, err
	}
	return explain.Wrap(t, cfg), nil
}
