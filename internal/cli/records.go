package cli

import (
	"fmt"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/krabka/krole/fencing"
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
		return writeJSON(stdout(c), render.Records(recs, st, now))
	}
	if len(recs) == 0 {
		_, err := fmt.Fprintf(stdout(c), "role %s has no records\n", role)
		return err
	}
	return render.RecordsTable(stdout(c), recs, st, now)
}
