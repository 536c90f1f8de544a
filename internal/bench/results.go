package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/krabka/krole/internal/chart"
)

// ReadResults reads the JSON results in path (one or more objects), their
// samples sorted.
func ReadResults(path string) ([]chart.Result, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []chart.Result
	dec := json.NewDecoder(f)
	for {
		var r chart.Result
		if err := dec.Decode(&r); err == io.EOF {
			return out, nil
		} else if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		chart.Summarize(r.SamplesMS) // sorts them, whatever wrote them
		out = append(out, r)
	}
}

// WriteChart draws results as SVG into the file at path, under title.
func WriteChart(path, title string, results []chart.Result) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := chart.SVG(f, title, results); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// DrawChart draws res, and the results in the files peers beside it, as
// SVG into the file at path (krole bench --chart, --peer).
func DrawChart(path string, res chart.Result, peers []string) error {
	results := []chart.Result{res}
	for _, p := range peers {
		more, err := ReadResults(p)
		if err != nil {
			return err
		}
		results = append(results, more...)
	}
	return WriteChart(path, "krole bench "+res.Kind, results)
}

// Compare writes the results in the files paths to w side by side, with
// the ratios of krole to each, and draws them into the file chartPath
// when it is not "" (krole bench compare).
func Compare(w io.Writer, paths []string, chartPath string) error {
	var results []chart.Result
	for _, p := range paths {
		rs, err := ReadResults(p)
		if err != nil {
			return err
		}
		results = append(results, rs...)
	}
	for _, r := range results {
		chart.WriteText(w, r)
	}
	fmt.Fprintln(w)
	chart.WriteRatios(w, results)
	if chartPath != "" {
		return WriteChart(chartPath, chart.Title(results), results)
	}
	return nil
}

// WriteDetails writes the lines that follow the latencies in the text of
// a renew of roles roles.
func (res *RenewResult) WriteDetails(w io.Writer, roles int) {
	fmt.Fprintf(w, "%-16s transactions/s %.1f (%d commits, %d aborts)  held %d -> %d of %d  member CPU %.3f s/s",
		"", res.TransactionsPerS, res.Commits, res.Aborts, res.HeldAtStart, res.HeldAtEnd, roles, res.CPUSPerS)
	if res.ClusterCPUSPerS != nil {
		fmt.Fprintf(w, "  cluster+bench process %.3f s/s", *res.ClusterCPUSPerS)
	}
	fmt.Fprintf(w, "\n%-16s memory per held role: member %.0f B heap + %.0f B stacks (%.0f B heap per role campaigned for), view %.0f B (%d roles in the view)\n", "",
		res.MemberBytesPerRole, res.MemberStackBytesPerRole, res.MemberBytesPerCampaignedRole, res.ViewBytesPerRole, res.ViewRoles)
	if len(res.Members) > 1 {
		for _, f := range res.Members {
			fmt.Fprintf(w, "%-16s %s: held %d -> %d of %d  transactions/s %.1f  CPU %.3f s/s\n", "",
				f.Member, f.HeldAtStart, f.HeldAtEnd, f.Roles, f.TransactionsPerS, f.CPUSPerS)
		}
	}
}

// WriteDetails writes the lines that follow the latencies in the text of
// a failover-many.
func (res *FailoverManyResult) WriteDetails(w io.Writer) {
	fmt.Fprintf(w, "%-16s killed %s holding %d roles: %d held again, the last after %.2f s (first %.2f s)\n", "",
		res.Settings["killed"], res.KilledRoles, res.HeldAgain, res.FailoverS, res.FirstS)
	fmt.Fprintf(w, "%-16s acquisition rate %.1f roles/s (its leases fell due over %.2f s; bound: lease + roles/rate = %.2f s)  acquired twice %d  survivors lost %d\n", "",
		res.AcquisitionRate, res.DueSpreadS, res.BoundS, res.AcquiredTwice, res.SurvivorsLost)
	fmt.Fprintf(w, "%-16s longest overlap %.1f ms (roles two members held at once: %d)", "", res.LongestOverlapMS, res.OverlapRoles)
	if o := res.LongestOverlap; o != nil {
		fmt.Fprintf(w, ": %s by %s and %s", o.Role, o.Members[0], o.Members[1])
	}
	fmt.Fprintln(w)
	for _, f := range res.Members[1:] {
		fmt.Fprintf(w, "%-16s %s: acquired %d (%.2f to %.2f s after the kill), lost %d, longest heartbeat gap %.0f ms\n", "",
			f.Member, f.Acquired, f.AcquiredFirstS, f.AcquiredLastS, f.Lost, f.HeartbeatGapMaxMS)
	}
}

// WriteDetails writes the lines that follow the gaps in the text of a
// steady run at lease.
func (res *SteadyResult) WriteDetails(w io.Writer, lease time.Duration) {
	fmt.Fprintf(w, "%-16s renewals %d  elections %d  handovers %d  releases %d  epochs without lease %d  needless %d  "+
		"max renew gap %.0f ms of a %v lease\n", "", res.Renewals, res.Elections, res.Handovers, res.Releases,
		res.EpochsWithoutLease, res.Needless, res.MaxRenewGapMS, lease)
	for _, ev := range res.Rounds {
		fmt.Fprintf(w, "%-16s election at offset %.0f, %.0f ms after the renewal before it, epoch +%.0f, handover %v\n",
			"", ev["offset"], ev["gap_ms"], ev["epoch_step"], ev["handover"] == 1)
	}
}

// WriteSaid writes, one line each, what the members said (their last
// lines on stderr), for a run with needless changes.
func (res *SteadyResult) WriteSaid(w io.Writer) {
	for name, said := range res.Said {
		fmt.Fprintf(w, "%s said: %s\n", name, strings.ReplaceAll(strings.TrimSpace(said), "\n", " | "))
	}
}
