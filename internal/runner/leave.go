package runner

import (
	"context"
	"time"

	"github.com/krabka/krole/codec"
)

// LeaveBudget is how long `krole run`, once leaving (interrupted, or
// CMD exited by itself), waits for its member to resign, deregister and
// stop, and for its view and transport to close. When they have not by
// then, krole run leaves without them (CMD stopped first) and says what
// was left unconfirmed: the rest of cli.ExitWithin is the margin for the
// process to exit.
const LeaveBudget = 8 * time.Second

// leaveWithin runs run (the session's Run) and returns its error. Once
// leaving has ended (the session's context), run has budget() to return;
// when it has not by then, leaveWithin waits for cmdStopped (CMD must be
// gone before krole exits: it returns nil when no CMD runs) and returns
// abandoned true, leaving run running.
func leaveWithin(leaving context.Context, budget func() time.Duration, cmdStopped func() <-chan struct{}, run func() error) (err error, abandoned bool) {
	done := make(chan error, 1)
	go func() { done <- run() }()
	select {
	case err := <-done:
		return err, false
	case <-leaving.Done():
	}
	t := time.NewTimer(budget())
	defer t.Stop()
	select {
	case err := <-done:
		return err, false
	case <-t.C:
	}
	if ch := cmdStopped(); ch != nil {
		select {
		case err := <-done:
			return err, false
		case <-ch:
		}
	}
	return nil, true
}

// unconfirmedLine is the last line of a `krole run` that left without a
// confirmed release or deregistration: what was left undone, and when it
// undoes itself. held is the token this member still held as its events
// say (nil: none), role the role it held under it; what names what the
// member campaigned for; abandoned says that krole run stopped waiting for the
// cluster after LeaveBudget.
func unconfirmedLine(role codec.Role, what string, me codec.MemberID, held *codec.Token, lease time.Duration, abandoned bool) string {
	why := "the cluster did not answer"
	if abandoned {
		why = "the cluster did not answer within " + LeaveBudget.String()
	}
	if held == nil {
		return "left " + what + " without a confirmed deregistration (" + why +
			"): the registration of " + string(me) + " stays until a holder prunes it"
	}
	return "release of " + string(role) + " (token " + held.String() + ") not confirmed: " + why +
		"; the lease runs out in at most " + lease.String()
}

// StartInterruptible runs start, a constructor that dials the cluster and
// takes no ctx (a transport's), and returns its result, or ctx's error as
// soon as ctx ends; what start returns after that is closed.
func StartInterruptible[T interface{ Close() error }](ctx context.Context, start func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := start()
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		go func() {
			if r := <-ch; r.err == nil {
				_ = r.v.Close()
			}
		}()
		var zero T
		return zero, ctx.Err()
	}
}
