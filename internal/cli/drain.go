package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/drain"
)

// DefaultDrainTimeout is the default of `krole drain --timeout`.
const DefaultDrainTimeout = time.Minute

func drainCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "drain",
		Usage:     "make a member of a group, running anywhere, hand every role over",
		UsageText: "krole drain --member M [--timeout D] [--no-wait]",
		Description: "Reads M's live member session from the role topic and writes a drain request\n" +
			"naming it (krole/drain/M, beside M's session records). M's running member\n" +
			"(krole run --slots, or a program on package processor with a Group) drains as\n" +
			"its own Member.Drain makes it: its heartbeats say it drains, and it hands every\n" +
			"role over to the group's other members. The request applies to that session\n" +
			"only: M started again later takes its share again. M must be running and in\n" +
			"a group; otherwise drain exits 1 and writes nothing.\n\n" +
			"It then waits until M's heartbeat says it drains (or its session ended) and no\n" +
			"live lease names M, and prints \"member M drained: 0 roles held\". --no-wait\n" +
			"returns once the request is written. When --timeout passes first (it bounds\n" +
			"the whole command), drain exits 1 saying how far M got; the request stays.\n" +
			"krole run --slots exits 0 once such a drain is done.\n\n" +
			"JSON: {\"member\":M,\"group\":G,\"nonce\":N,\"requested_at\":MS,\"drained\":BOOL,\"roles\":N}\n" +
			"(drained false and roles -1 with --no-wait).",
		Flags: []ucli.Flag{memberFlag(),
			&ucli.DurationFlag{Name: "timeout", Value: DefaultDrainTimeout,
				Usage: "give up (exit 1) when M has not drained within `D` (0: wait as long as it takes)"},
			&ucli.BoolFlag{Name: "no-wait", Usage: "return once the request is written, without waiting for M to drain"},
		},
		Action: runDrain,
	}
}

// drainResult is the JSON output of `krole drain`.
type drainResult struct {
	Member      codec.MemberID `json:"member"`
	Group       string         `json:"group"`
	Nonce       string         `json:"nonce"`
	RequestedAt int64          `json:"requested_at"`
	Drained     bool           `json:"drained"`
	Roles       int            `json:"roles"` // roles whose live lease names M when drained; -1 with --no-wait
}

func runDrain(c *ucli.Context) error {
	var member codec.MemberID
	timeout, err := viewTimeout(c)
	if err != nil {
		return err
	}
	// --timeout bounds the whole command: the view's catch-up, the write
	// and the wait.
	ctx, cancel := c.Context, context.CancelFunc(func() {})
	if timeout > 0 {
		ctx, cancel = context.WithTimeoutCause(c.Context, timeout, errTimeoutPassed)
	}
	defer cancel()
	parent := c.Context
	c.Context = ctx
	defer func() { c.Context = parent }()
	lv, err := readyView(c, func() error {
		if err := noArgs(c); err != nil {
			return err
		}
		member, err = memberArg(c)
		return err
	}, false)
	if err != nil {
		return err
	}
	defer lv.Stop()

	se, err := drain.LiveSession(ctx, lv.View, member)
	switch {
	case parent.Err() != nil:
		return nil // interrupted: nothing written
	case err != nil:
		return cutShort(ctx, timeout, fmt.Sprintf("reading the session of member %s", member), err)
	}
	hb := se.Heartbeat
	if hb.Group == "" {
		return fmt.Errorf("member %s is in no group (its heartbeats name none): only a member of a group (krole run --slots, processor.Group) can be drained", member)
	}
	req := codec.DrainRequest{Member: member, Nonce: hb.Session.Nonce, At: time.Now().UnixMilli()}
	off, err := drain.Write(ctx, lv.Config(), req)
	switch {
	case err != nil && parent.Err() != nil:
		fmt.Fprintf(stderr(c), "krole drain: interrupted while writing the drain request of %s; it may still be written\n", member)
		return nil
	case err != nil:
		return cutShort(ctx, timeout, fmt.Sprintf("writing the drain request of %s (it may still be written)", member), err)
	}
	res := drainResult{Member: member, Group: hb.Group, Nonce: req.Nonce, RequestedAt: req.At, Roles: -1}
	if !c.Bool("no-wait") {
		draining, held, err := drain.Await(ctx, lv.View, member, req.Nonce, off)
		switch {
		case parent.Err() != nil:
			fmt.Fprintf(stderr(c), "krole drain: interrupted; the request stays: %s goes on draining\n", member)
			return nil
		case errors.Is(context.Cause(ctx), errTimeoutPassed):
			return fmt.Errorf("member %s did not drain within --timeout %v: %s; the request stays", member, timeout, drain.Progress(draining, held))
		case err != nil:
			return err
		}
		res.Drained, res.Roles = true, held
	}
	if outputFormat(c) == FormatJSON {
		err = writeJSON(stdout(c), res)
	} else if res.Drained {
		_, err = fmt.Fprintf(stdout(c), "member %s drained: %d roles held\n", member, res.Roles)
	} else {
		_, err = fmt.Fprintf(stdout(c), "drain of member %s requested (session %s of group %s)\n", member, req.Nonce, hb.Group)
	}
	if err != nil {
		return err
	}
	return lv.Stop()
}

// cutShort returns err, or, when --timeout (timeout) ended ctx and err,
// a line saying what it cut short.
func cutShort(ctx context.Context, timeout time.Duration, what string, err error) error {
	if errors.Is(context.Cause(ctx), errTimeoutPassed) && errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: no answer within --timeout %v", what, timeout)
	}
	return err
}
