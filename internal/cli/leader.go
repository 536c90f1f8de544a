package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/liveness"
	"github.com/krabka/krole/internal/server"
	"github.com/krabka/krole/rolestate"
)

func leaderCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "leader",
		Usage:     "print the value of a role's live holder (or its member id), for scripts",
		UsageText: "krole leader ROLE [--timeout D]",
		Description: "Reads the role topic as 'krole table' does and prints the value the live holder\n" +
			"of ROLE registered with (krole run --value V), or its member id when it has none.\n" +
			"Exit codes: 0 with a live holder; 1 when ROLE has no live holder (none, expired\n" +
			"or released), with a line on stderr; 3 when krole could not find out (no broker\n" +
			"answered, the topic does not exist, the view did not catch up within --timeout,\n" +
			"the cluster refused the read), with a line saying why; 2 for a usage error.\n" +
			"\"Live\" is as this machine judges the lease, as the LEFT column of\n" +
			"'krole table' does; it is what the topic says, not the broker's fence.\n\n" +
			"A holder whose lease ran out more than 1s ago by its own clock (as this\n" +
			"machine's clock reads it) is never named: when the lease's deadline says so,\n" +
			"leader waits for a renewal, up to half the lease after it read it, and exits 1\n" +
			"if none comes. With the holder's clock and this machine's within 1s of each\n" +
			"other, a holder is never named more than 2s after its lease ran out; a live\n" +
			"holder is never reported dead for a clock difference alone, as long as it\n" +
			"renews at least every half lease (the default is every fifth).\n\n" +
			"JSON: {\"role\":R,\"member\":M,\"value\":V,\"token\":{\"producer_id\":N,\"epoch\":N},\"fence\":N,\"left_ms\":N},\n" +
			"\"value\" left out when the holder has none; \"fence\" is the holding's fencing\n" +
			"number (see 'krole run --help').",
		ArgsUsage: "ROLE",
		Flags: []ucli.Flag{
			viewTimeoutFlag(),
		},
		Action: runLeader,
	}
}

// leaderResult is the JSON output of `krole leader`.
type leaderResult struct {
	Role   codec.Role     `json:"role"`
	Member codec.MemberID `json:"member"`
	Value  string         `json:"value,omitempty"`
	Token  codec.Token    `json:"token"`
	Fence  int64          `json:"fence"`
	LeftMS int64          `json:"left_ms"`
}

// ExitLeaderUnknown is the exit code of `krole leader` when it could not
// find out whether the role has a live holder: no broker answered, the
// topic does not exist, the view did not catch up within --timeout, the
// cluster refused the read. It differs from [ExitFailure], which there
// means "no live holder", so that a script can tell a vacant role from a
// cluster it cannot read.
const ExitLeaderUnknown = 3

// NoHolderError is the error of `krole leader` when the role has no live
// holder: exit code 1 ([ExitFailure]).
type NoHolderError struct {
	Role codec.Role
	// Why says what the role's newest lease says, "" without one.
	Why string
}

func (e *NoHolderError) Error() string {
	if e.Why == "" {
		return fmt.Sprintf("role %s has no live holder", e.Role)
	}
	return fmt.Sprintf("role %s has no live holder: %s", e.Role, e.Why)
}

// leaderUnknown is a failure of `krole leader` other than a usage error or
// a vacant role: its message is the cause's, its exit code
// [ExitLeaderUnknown].
type leaderUnknown struct{ err error }

func (e *leaderUnknown) Error() string { return e.err.Error() }
func (e *leaderUnknown) Unwrap() error { return e.err }
func (e *leaderUnknown) ExitCode() int { return ExitLeaderUnknown }

func runLeader(c *ucli.Context) error {
	err := findLeader(c)
	var ue *UsageError
	var nh *NoHolderError
	if err == nil || errors.As(err, &ue) || errors.As(err, &nh) {
		return err
	}
	return &leaderUnknown{err: err}
}

func findLeader(c *ucli.Context) error {
	rc, err := openRole(c, roleNeeds{view: true})
	if err != nil {
		return err
	}
	defer rc.close()
	role, lv := rc.role, rc.lv
	// A lease whose holder's clock says it ran out: wait for a renewal
	// (package liveness), bounded by the lease.
	sts, err := liveness.Settle(c.Context, func(ctx context.Context) ([]rolestate.State, error) {
		st, err := lv.Role(ctx, role)
		return []rolestate.State{st}, err
	}, time.Now)
	if err != nil {
		return err
	}
	now := time.Now()
	h := server.JudgedRow(sts[0], now).Holder
	if h == nil || h.Expired {
		return &NoHolderError{Role: role, Why: liveness.NotHeld(sts[0], now)}
	}
	if outputFormat(c) == FormatJSON {
		return writeJSON(stdout(c), leaderResult{Role: role, Member: h.Member, Value: h.Value, Token: h.Token, Fence: h.Fence, LeftMS: h.LeftMS})
	}
	// The value was read from the topic: escaped when it holds a control
	// character (codec.PrintableValue), so none reaches a terminal or a
	// script.
	out := codec.PrintableValue(h.Value)
	if out == "" {
		out = string(h.Member)
	}
	_, err = fmt.Fprintln(stdout(c), out)
	return err
}
