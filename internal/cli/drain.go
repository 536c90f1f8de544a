package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/IBM/sarama"
	ucli "github.com/urfave/cli/v2"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/ctxcall"
	"github.com/krabka/krole/internal/explain"
	"github.com/krabka/krole/internal/liveness"
	"github.com/krabka/krole/internal/liveview"
	"github.com/krabka/krole/rolestate"
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

	se, err := liveSession(ctx, lv, member)
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
	off, err := writeDrainRequest(ctx, lv.Config(), req)
	switch {
	case err != nil && parent.Err() != nil:
		fmt.Fprintf(stderr(c), "krole drain: interrupted while writing the drain request of %s; it may still be written\n", member)
		return nil
	case err != nil:
		return cutShort(ctx, timeout, fmt.Sprintf("writing the drain request of %s (it may still be written)", member), err)
	}
	res := drainResult{Member: member, Group: hb.Group, Nonce: req.Nonce, RequestedAt: req.At, Roles: -1}
	if !c.Bool("no-wait") {
		draining, held, err := awaitDrained(ctx, lv, member, req.Nonce, off)
		switch {
		case parent.Err() != nil:
			fmt.Fprintf(stderr(c), "krole drain: interrupted; the request stays: %s goes on draining\n", member)
			return nil
		case errors.Is(context.Cause(ctx), errTimeoutPassed):
			return fmt.Errorf("member %s did not drain within --timeout %v: %s; the request stays", member, timeout, progress(draining, held))
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

// liveSession returns member's latest session record once the view says
// the session is live (liveness.Session: a heartbeat whose span has not
// run out); it waits while the member's clock says the latest ran out and
// the next may be on its way, and fails when the session is gone.
func liveSession(ctx context.Context, lv *liveview.View, member codec.MemberID) (rolestate.SessionSeen, error) {
	for {
		se, ok, err := lv.SessionSettled(ctx, member)
		if err != nil {
			return se, err
		}
		if !ok {
			return se, fmt.Errorf("member %s has no live session: no heartbeat of it is on the topic (is it running?)", member)
		}
		v := liveness.Session(&se, time.Now())
		switch {
		case v.Gone && se.Heartbeat.End:
			return se, fmt.Errorf("member %s has no live session: its session ended (it stopped)", member)
		case v.Gone:
			return se, fmt.Errorf("member %s has no live session: its latest heartbeat ran out at %s by its clock (is it running?)", member, v.RanOut.Format(time.RFC3339))
		case !v.Pending:
			return se, nil
		}
		if err := ctxcall.Sleep(ctx, 25*time.Millisecond); err != nil {
			return se, err
		}
	}
}

// writeDrainRequest appends req under its member's drain key, in the
// partition of the member's session records, and returns its offset. It
// is a plain append, as a registration is: no transaction and no producer
// id, so it needs Write on the topic and nothing else; a copy written
// twice by a retry is the same request.
func writeDrainRequest(ctx context.Context, cfg fencing.Config, req codec.DrainRequest) (int64, error) {
	val, err := codec.EncodeRecord(codec.Record{Drain: &req})
	if err != nil {
		return -1, err
	}
	sc, err := cfg.Sarama()
	if err != nil {
		return -1, err
	}
	fail := func(err error) (int64, error) {
		err = fmt.Errorf("writing the drain request of %s to topic %s: %w", req.Member, cfg.Topic, err)
		if ae := fencing.AuthorizationOf(err, fencing.AuthorizationError{Operation: "WRITE", Resource: fencing.ResourceTopic, Name: cfg.Topic}); ae != nil {
			return -1, ae
		}
		return -1, explain.RunError(cfg, err)
	}
	client, err := ctxcall.Do(ctx, nil, func() (sarama.Client, error) { return sarama.NewClient(cfg.Brokers, sc) })
	if err != nil {
		return fail(err)
	}
	defer client.Close()
	parts, err := ctxcall.Do(ctx, nil, func() ([]int32, error) { return client.Partitions(cfg.Topic) })
	if err != nil {
		return fail(err)
	}
	key := codec.DrainKey(req.Member)
	msg := &sarama.ProducerMessage{Topic: cfg.Topic, Key: sarama.ByteEncoder(key.Encode()), Value: sarama.ByteEncoder(val),
		Partition: codec.KeyPartition(key, int32(len(parts)))}
	return ctxcall.Do(ctx, nil, func() (int64, error) {
		p, err := sarama.NewSyncProducerFromClient(client)
		if err != nil {
			_, err = fail(err)
			return -1, err
		}
		defer p.Close()
		_, off, err := p.SendMessage(msg)
		if err != nil {
			_, err = fail(err)
			return -1, err
		}
		return off, nil
	})
}

// awaitDrained waits until the view shows that member drained the
// session incarnation nonce on the request at offset off: its heartbeat
// says it drains (or that incarnation's session ended after the
// request), and no live lease names it. It also returns, for an error,
// how far the member got: whether it drains, and the roles whose live
// lease names it (-1: not counted).
func awaitDrained(ctx context.Context, lv *liveview.View, member codec.MemberID, nonce string, off int64) (draining bool, held int, err error) {
	held = -1
	for {
		se, ok, err := lv.Session(ctx, member)
		if err != nil {
			return draining, held, err
		}
		if ok && se.Heartbeat.Session.Nonce == nonce {
			// A record after the request (the same partition: offsets
			// compare) that says it drains, or that it left.
			draining = draining || se.Offset > off && (se.Heartbeat.Drain || se.Heartbeat.End)
		} else if ok {
			return draining, held, fmt.Errorf("member %s started a new session before it drained: run krole drain again to drain the new one", member)
		}
		if draining {
			if held, err = heldBy(ctx, lv, member); err != nil {
				return draining, held, err
			}
			if held == 0 {
				return true, 0, nil
			}
		}
		if err := ctxcall.Sleep(ctx, 50*time.Millisecond); err != nil {
			return draining, held, err
		}
	}
}

// progress says how far a drain got: whether the member's heartbeats say
// it drains, and how many roles it still holds.
func progress(draining bool, held int) string {
	switch {
	case !draining:
		return "its heartbeats do not say it drains yet"
	case held > 0:
		return fmt.Sprintf("it drains, and still holds %d roles", held)
	}
	return "it drains"
}

// heldBy counts the roles whose lease, live as the view judges it, names
// member.
func heldBy(ctx context.Context, lv *liveview.View, member codec.MemberID) (int, error) {
	roles, err := lv.Roles(ctx)
	if err != nil {
		return -1, err
	}
	holders, err := lv.Holders(ctx, roles, time.Time{})
	if err != nil {
		return -1, err
	}
	n := 0
	for _, m := range holders {
		if m == member {
			n++
		}
	}
	return n, nil
}
