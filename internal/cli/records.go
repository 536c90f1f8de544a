package cli

import (
	"fmt"
	"strconv"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/liveness"
	"github.com/krabka/krole/internal/render"
	"github.com/krabka/krole/internal/roleread"
)

func recordsCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "records",
		Usage:     "list a role's records (registrations, leases, tombstones) in offset order",
		UsageText: "krole records ROLE [--timeout D]",
		Description: "Reads the role's partition from its start with read_committed isolation (an\n" +
			"aborted lease write never shows) and lists the role's records in offset order.\n" +
			"A registration's offset is its member's join sequence. Compaction may have\n" +
			"removed records that a later record of the same key replaced.\n\n" +
			"JSON: an array, [] when the role has no records:\n" +
			"  {\"offset\":N,\"kind\":\"registration\",\"member\":M,\"registered_at\":MS}\n" +
			"  {\"offset\":N,\"kind\":\"lease\",\"member\":M,\"token\":{\"producer_id\":N,\"epoch\":N},\"fence\":N,\"granted_at\":MS,\"deadline\":MS}\n" +
			"  {\"offset\":N,\"kind\":\"registration\",\"member\":M,\"tombstone\":true}  (a deregistration)\n" +
			"  {\"offset\":N,\"kind\":\"lease\",\"tombstone\":true}\n" +
			"A lease's \"fence\" is its holding's fencing number: the offset of the holding's\n" +
			"first lease, which the holding's later leases carry.\n" +
			"Times are Unix milliseconds. A lease that its holder released on resigning has\n" +
			"granted_at 0 and deadline 1 (the table says \"lease (released)\").\n\n" +
			"The newest lease is renewed by its holder's member session's heartbeats, not by\n" +
			"new lease records (written again only hourly): records reads the holder's\n" +
			"latest heartbeat with it and judges the lease as 'krole table' does. Its row\n" +
			"says \"lease (live)\" or \"lease (expired)\", and its DEADLINE is that of its\n" +
			"latest renewal (\"by heartbeat\" when a heartbeat renewed it). In JSON it has\n" +
			"  \"live\":BOOL,\"vouched_at\":MS,\"renewed_until\":MS,\"left_ms\":N\n" +
			"besides: when its latest renewal began and ran until (the holder's clock), and\n" +
			"the time left as this machine judges it.",
		ArgsUsage: "ROLE",
		Flags:     []ucli.Flag{timeoutFlag()},
		Action:    withTimeout(runRecords, false),
	}
}

// recordJSON is one element of the JSON output of `krole records`. A
// tombstone has kind and offset, member for a registration's, and
// "tombstone":true; it has no times or token.
type recordJSON struct {
	Offset       int64        `json:"offset"`
	Kind         string       `json:"kind"`
	Member       string       `json:"member,omitempty"`
	Tombstone    bool         `json:"tombstone,omitempty"`
	RegisteredAt *int64       `json:"registered_at,omitempty"`
	Value        string       `json:"value,omitempty"` // a registration's value, when it has one
	Token        *codec.Token `json:"token,omitempty"`
	Fence        *int64       `json:"fence,omitempty"` // a lease's holding's fencing number
	GrantedAt    *int64       `json:"granted_at,omitempty"`
	Deadline     *int64       `json:"deadline,omitempty"`
	// The newest lease's liveness (see liveness.Judge): left out on other
	// records and on a release.
	Live         *bool  `json:"live,omitempty"`
	VouchedAt    *int64 `json:"vouched_at,omitempty"`
	RenewedUntil *int64 `json:"renewed_until,omitempty"`
	LeftMS       *int64 `json:"left_ms,omitempty"`
}

// judged adds to j, the newest lease's record, its liveness v.
func (j *recordJSON) judged(v liveness.Verdict, now time.Time) {
	left := int64(0)
	if v.Live {
		left = v.End.Sub(now).Milliseconds()
	}
	until := v.RanOut.UnixMilli()
	j.Live, j.VouchedAt, j.RenewedUntil, j.LeftMS = &v.Live, &v.VouchedAt, &until, &left
}

func toJSON(r fencing.RoleRecord) recordJSON {
	j := recordJSON{Offset: r.Offset, Kind: r.Key.Kind.String(), Member: string(r.Key.Member)}
	switch {
	case r.Record.Registration != nil:
		g := r.Record.Registration
		j.Member, j.RegisteredAt, j.Value = string(g.Member), &g.RegisteredAt, g.Value
	case r.Record.Lease != nil:
		l := r.Record.Lease
		j.Member, j.Token, j.GrantedAt, j.Deadline = string(l.Member), &l.Token, &l.GrantedAt, &l.Deadline
		fence := r.Offset // a holding's first lease
		if l.Fence > 0 {
			fence = l.Fence
		}
		j.Fence = &fence
	default:
		j.Tombstone = true
	}
	return j
}

func runRecords(c *ucli.Context) error {
	rc, err := openRole(c, roleNeeds{})
	if err != nil {
		return err
	}
	defer rc.close()
	role, t := rc.role, rc.t
	recs, st, err := roleread.Settled(c.Context, t, role)
	if err != nil {
		return err
	}
	now := time.Now()
	verdict := liveness.Judge(st, now)
	newest := func(r fencing.RoleRecord) bool {
		return st.Lease != nil && !st.Lease.Released() && r.Offset == st.LeaseOffset && r.Record.Lease != nil
	}
	if s, ok := t.(fencing.SkipCounter); ok && s.NewerRecordsSkipped() > 0 {
		fmt.Fprintf(stderr(c), "krole: warning: skipped %d record(s) of a newer format: a newer krole writes to topic %s\n",
			s.NewerRecordsSkipped(), c.String("topic"))
	}
	if s, ok := t.(fencing.SkipCounter); ok && s.ForgedLeasesSkipped() > 0 {
		fmt.Fprintf(stderr(c), "krole: warning: skipped %d forged lease record(s) of role %s: not written in a transaction under their own token, or under a producer id that is not transactional id %s's (someone other than the role's members wrote them to topic %s)\n",
			s.ForgedLeasesSkipped(), role, c.String("txn-prefix")+string(role), c.String("topic"))
	}
	if u, ok := t.(interface{ UnverifiedLeasesKept() uint64 }); ok && u.UnverifiedLeasesKept() > 0 {
		fmt.Fprintf(stderr(c), "krole: warning: could not verify who wrote %d lease record(s) of role %s: not authorized to Describe transactional id %s; they count by their record batch alone\n",
			u.UnverifiedLeasesKept(), role, c.String("txn-prefix")+string(role))
	}
	if outputFormat(c) == FormatJSON {
		out := make([]recordJSON, 0, len(recs)) // [] rather than null when empty
		for _, r := range recs {
			j := toJSON(r)
			if newest(r) {
				j.judged(verdict, now)
			}
			out = append(out, j)
		}
		return writeJSON(stdout(c), out)
	}
	if len(recs) == 0 {
		_, err := fmt.Fprintf(stdout(c), "role %s has no records\n", role)
		return err
	}
	tw := render.NewTable(stdout(c), "OFFSET", "KIND", "MEMBER", "TOKEN", "TIME", "DEADLINE")
	for _, r := range recs {
		j := toJSON(r)
		kind := j.Kind
		var tok, at, deadline string
		switch {
		case j.Tombstone:
			kind += " tombstone"
		case j.RegisteredAt != nil:
			at = render.HumanTime(*j.RegisteredAt, now)
		case j.Token != nil && r.Record.Lease.Released():
			kind += " (released)"
			tok = j.Token.String()
		case j.Token != nil && newest(r):
			tok = j.Token.String()
			at = render.HumanTime(*j.GrantedAt, now)
			kind += " (expired)"
			if verdict.Live {
				kind = "lease (live)"
			}
			deadline = render.HumanTime(verdict.RanOut.UnixMilli(), now)
			if verdict.VouchedAt > *j.GrantedAt {
				deadline += " by heartbeat"
			}
		case j.Token != nil:
			tok = j.Token.String()
			at = render.HumanTime(*j.GrantedAt, now)
			deadline = render.HumanTime(*j.Deadline, now)
		}
		tw.Row(strconv.FormatInt(j.Offset, 10), kind, j.Member, tok, at, deadline)
	}
	return tw.Flush()
}
