package cli

import (
	"fmt"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/liveness"
	"github.com/krabka/krole/internal/render"
	"github.com/krabka/krole/internal/roleread"
	"github.com/krabka/krole/rolestate"
)

func resignCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "resign",
		Usage:     "remove a member from a role's candidates (its deregistration)",
		UsageText: "krole resign ROLE --member M [--wait D] [--timeout D]",
		Description: "Writes a tombstone on M's registration for ROLE, which removes M from the\n" +
			"candidates. Resigning a member that is not registered is harmless.\n\n" +
			"When M holds the role, its running member (krole run, or a program on package\n" +
			"processor) sees its registration removed and steps down: it stops its work\n" +
			"(krole run: CMD's whole process tree) while its member session's heartbeats go\n" +
			"on renewing the role, then releases the role, which passes to the next candidate\n" +
			"in milliseconds, and then joins the candidates again at the back (stop M's\n" +
			"process to remove it for good).\n" +
			"So no two CMDs run at once, however long M's CMD takes to stop. The CLI\n" +
			"holds no token of the role and cannot end M's lease itself: resign waits up to\n" +
			"--wait for M's release and says what happened. When none comes (M's process is\n" +
			"not running, or is a krole older than this), the role passes on when the lease\n" +
			"ends.",
		ArgsUsage: "ROLE",
		Flags: []ucli.Flag{memberFlag(), timeoutFlag(),
			&ucli.DurationFlag{Name: "wait", Value: 5 * time.Second,
				Usage: "how long to wait for a holding M to release the role, `D` (0: do not wait); --timeout includes it"}},
		Action: withTimeout(runResign, true),
	}
}

// resignResult is the JSON output of `krole resign`.
type resignResult struct {
	Role   string `json:"role"`
	Member string `json:"member"`
	// Released is the token M released the role under, when M held it and
	// released it within --wait.
	Released *codec.Token `json:"released,omitempty"`
	// Holder is the member that held the role next, when resign saw it.
	Holder codec.MemberID `json:"holder,omitempty"`
	// StillHeldUntil is the deadline of M's latest renewal (Unix ms, M's
	// clock: its lease's, or its member session's latest heartbeat's) when
	// M held the role and did not release it within --wait.
	StillHeldUntil int64 `json:"still_held_until,omitempty"`
}

func runResign(c *ucli.Context) error {
	rc, err := openRole(c, roleNeeds{member: true})
	if err != nil {
		return err
	}
	defer rc.close()
	role, member, t := rc.role, rc.member, rc.t

	// Read first, only to warn about a likely mistake; a read that fails
	// does not stop the resignation.
	wait := c.Duration("wait")
	if wait < 0 {
		return Usagef(c, "--wait %v: must not be negative", wait)
	}
	recs, rerr := t.ReadRoleRecords(c.Context, role)
	registered, holds, lease := roleread.Standing(recs, member)

	if err := t.Deregister(c.Context, role, member); err != nil {
		return err
	}
	now := time.Now()
	if rerr == nil && !registered {
		fmt.Fprintf(stderr(c), "krole: note: %s had no registration for role %s (check the name with 'krole records %s')\n", member, role, role)
	}
	res := resignResult{Role: string(role), Member: string(member)}
	var said string
	// Whether M's holding is live, judged as a one-shot answer is, by its
	// latest renewal (its member session's heartbeat, see package
	// liveness); a dead holder has no release to wait for.
	ranOut := lease.Deadline
	if holds {
		st := rolestate.Fold(role, recs)
		if err := roleread.WithSession(c.Context, t, &st, func(int64) time.Time { return now }); err == nil && st.Lease != nil {
			v := liveness.Judge(st, now)
			holds = v.Live
			ranOut = v.RanOut.UnixMilli()
		}
	}
	if holds {
		released, next := roleread.AwaitRelease(c.Context, t, role, lease, wait)
		switch {
		case released != nil:
			res.Released, res.Holder = &released.Token, next
			said = fmt.Sprintf("; %s released the role (token %s)", member, released.Token)
			if next != "" {
				said += fmt.Sprintf(" and %s holds it now", next)
			}
			said += fmt.Sprintf("; %s joins the candidates again at the back unless its process stops", member)
		case next != "":
			res.Holder = next
			said = fmt.Sprintf("; %s holds the role now", next)
		default:
			res.StillHeldUntil = ranOut
			fmt.Fprintf(stderr(c), "krole: note: %s did not release role %s within --wait %v (its work is still stopping, and it "+
				"keeps the role renewed until it has; or its process is not running, or is older than this krole): its latest renewal read "+
				"before the resignation runs until %s; the role passes on at %s's release, or when its renewals stop\n",
				member, role, wait, render.HumanTime(ranOut, time.Now()), member)
		}
	}
	if outputFormat(c) == FormatJSON {
		return writeJSON(stdout(c), res)
	}
	_, err = fmt.Fprintf(stdout(c), "resigned %s from role %s%s\n", member, role, said)
	return err
}
