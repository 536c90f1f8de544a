package cli

import (
	"context"
	"time"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/election"
)

// ExitWithin is how long `krole run`, serve, observe and table --watch
// take at most to return after SIGINT or SIGTERM, whatever the cluster
// does (a cluster that stopped answering, say); `krole run` adds the time
// CMD takes to stop, at most --kill-timeout. The readers' views shut
// their connections when they stop (see package view, "Stopping"), and
// `krole run` gives its member [runLeaveBudget] to resign.
const ExitWithin = 10 * time.Second

// runLeaveBudget is how long `krole run`, once leaving (interrupted, or
// CMD exited by itself), waits for its member to resign, deregister and
// stop, and for its view and transport to close. When they have not by
// then, krole run leaves without them (CMD stopped first) and says what
// was left unconfirmed: the rest of [ExitWithin] is the margin for the
// process to exit.
const runLeaveBudget = 8 * time.Second

// leaveWithin runs run (the session's Run) and returns its error. Once
// leaving has ended (the session's context), run has budget to return;
// when it has not by then, leaveWithin waits for cmdStopped (CMD must be
// gone before krole exits: it returns nil when no CMD runs) and returns
// abandoned true, leaving run running.
func leaveWithin(leaving context.Context, budget time.Duration, cmdStopped func() <-chan struct{}, run func() error) (err error, abandoned bool) {
	done := make(chan error, 1)
	go func() { done <- run() }()
	select {
	case err := <-done:
		return err, false
	case <-leaving.Done():
	}
	t := time.NewTimer(budget)
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

// cmdStopped returns a channel closed when the work running CMD has
// returned (CMD stopped), or nil when none runs.
func (s *runSession) cmdStopped() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.working
}

// unconfirmedLine is the last line of a `krole run` that left without a
// confirmed release or deregistration: what was left undone, and when it
// undoes itself. held is the token this member still held as its events
// say (nil: none); abandoned says that krole run stopped waiting for the
// cluster after runLeaveBudget.
func unconfirmedLine(role codec.Role, me codec.MemberID, held *codec.Token, lease time.Duration, abandoned bool) string {
	why := "the cluster did not answer"
	if abandoned {
		why = "the cluster did not answer within " + runLeaveBudget.String()
	}
	if held == nil {
		return "left " + string(role) + " without a confirmed deregistration (" + why +
			"): the registration of " + string(me) + " stays until a holder prunes it"
	}
	return "release of " + string(role) + " (token " + held.String() + ") not confirmed: " + why +
		"; the lease runs out in at most " + lease.String()
}

// startInterruptible runs start, a constructor that dials the cluster and
// takes no ctx (a transport's), and returns its result, or ctx's error as
// soon as ctx ends; what start returns after that is closed.
func startInterruptible[T interface{ Close() error }](ctx context.Context, start func() (T, error)) (T, error) {
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

// newSessionUntil returns election.New, made to return as soon as ctx
// ends (see startInterruptible): New dials the cluster and takes no ctx.
func newSessionUntil(ctx context.Context) func(election.Config) (*election.Session, error) {
	return func(cfg election.Config) (*election.Session, error) {
		return startInterruptible(ctx, func() (*election.Session, error) { return election.New(cfg) })
	}
}
