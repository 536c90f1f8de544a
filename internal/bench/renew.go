package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/chart"
	"github.com/krabka/krole/processor"
)

// RenewOptions are a `krole bench renew` run.
type RenewOptions struct {
	// Roles over Members member processes: member i (from 0) campaigns
	// for roles Run-i*Roles/Members ... alone (nobody else wants them).
	Roles, Members int
	Settings       processor.Settings
	// Duration is the measured window, which begins once every member
	// is steady (see [Line]).
	Duration time.Duration
	// Run tags the role and member names.
	Run string
	// MemberCPUProfile: a pprof profile of the first member's window.
	MemberCPUProfile string
	// NoViewMemory skips the first member's measure of a fresh view's
	// memory (a view of the whole topic read from its start, which at
	// 100,000 roles takes longer than the bench waits for the report).
	NoViewMemory bool
}

// MemberFigures are one member's figures in a renew result.
type MemberFigures struct {
	Member      codec.MemberID `json:"member"`
	Roles       int            `json:"roles"`
	HeldAtStart int            `json:"held_at_start"`
	HeldAtEnd   int            `json:"held_at_end"`
	// TransactionsPerS: its EndTxn requests (commits and aborts) per
	// second of its window.
	TransactionsPerS float64 `json:"transactions_per_s"`
	// CPUSPerS: its process's CPU seconds per second of its window.
	CPUSPerS float64 `json:"cpu_s_per_s"`
	// BytesPerRole: (live heap at the window's end - live heap before
	// its campaign) / roles held at the end; its view's growth included.
	BytesPerRole float64 `json:"bytes_per_role"`
	HeapBytes    uint64  `json:"heap_bytes"`
	Missed       int     `json:"missed"`
	Renewals     int     `json:"renewals"`
}

// RenewResult is what `krole bench renew` prints: the renew latencies as
// samples (chart.Result) and the many-roles figures beside them
// (docs/BENCHMARKS.md, "Many roles").
type RenewResult struct {
	chart.Result
	// TransactionsPerS: every EndTxn request (commit or abort) the
	// members' transports sent, per second of the window, summed over
	// the members: heartbeats, lease writes (at election, on RewriteLease
	// and hourly rewrites), releases and session ends. Commits and
	// Aborts are the counts.
	TransactionsPerS float64 `json:"transactions_per_s"`
	Commits          uint64  `json:"commits"`
	Aborts           uint64  `json:"aborts"`
	// CPUSPerS: the member processes' CPU seconds per second, summed;
	// ClusterCPUSPerS: this process's (the embedded cluster and the
	// bench's view; absent with --brokers, where the cluster is
	// elsewhere).
	CPUSPerS        float64  `json:"cpu_s_per_s"`
	ClusterCPUSPerS *float64 `json:"cluster_cpu_s_per_s,omitempty"`
	// HeldAtStart and HeldAtEnd: roles held, summed over the members,
	// when the window began and ended.
	HeldAtStart int `json:"held_at_start"`
	HeldAtEnd   int `json:"held_at_end"`
	// MemberBytesPerRole: the members' live heap growth since before
	// their campaigns over the roles they held at the end (each
	// member's view included: every view holds every role of the
	// topic). ViewBytesPerRole: the live heap of a fresh view of the
	// topic in the first member's process over the roles it knows.
	MemberBytesPerRole float64 `json:"member_bytes_per_role"`
	// MemberBytesPerCampaignedRole: the same growth over every role the
	// members campaign for (held or queued): what a member pays for
	// the roles it was given when it holds only some.
	MemberBytesPerCampaignedRole float64 `json:"member_bytes_per_campaigned_role"`
	// MemberStackBytesPerRole: the growth of the members' goroutine
	// stacks (not heap: a goroutine per role) over the roles held at
	// the end; add it to MemberBytesPerRole for a member's whole cost.
	MemberStackBytesPerRole float64         `json:"member_stack_bytes_per_role"`
	ViewBytesPerRole        float64         `json:"view_bytes_per_role"`
	ViewRoles               int             `json:"view_roles"`
	Members                 []MemberFigures `json:"members"`
}

// memberSplit is member i's share of n roles over m: [from, from+count).
func memberSplit(n, m, i int) (from, count int) {
	from = i * n / m
	return from, (i+1)*n/m - from
}

// Renew runs `krole bench renew`: o.Members member processes hold
// o.Roles roles between them, each its own share, for o.Duration once
// all of them are steady. selfCPU is read at the window's start and end
// for the cluster's CPU.
func Renew(ctx context.Context, c Cluster, o RenewOptions) (*RenewResult, error) {
	if o.Members < 1 || o.Roles < o.Members {
		return nil, fmt.Errorf("bench renew: %d roles over %d members: need at least one role per member", o.Roles, o.Members)
	}
	prefix := "bench-renew-" + o.Run + "-"
	procs := make([]*proc, 0, o.Members)
	defer func() {
		for _, p := range procs {
			p.leave(Wait)
		}
	}()
	for i := range o.Members {
		from, count := memberSplit(o.Roles, o.Members, i)
		name := codec.MemberID("bench-renew-" + o.Run)
		if o.Members > 1 {
			name = codec.MemberID(fmt.Sprintf("bench-renew-%s-m%d", o.Run, i))
		}
		spec := memberSpec{name: name, prefix: prefix, from: from, count: count, s: o.Settings, viewMemory: i == 0 && !o.NoViewMemory}
		if i == 0 {
			spec.cpuProfile = o.MemberCPUProfile
		}
		p, err := c.start(spec)
		if err != nil {
			return nil, err
		}
		procs = append(procs, p)
	}
	c.progress("renew: %d roles over %d member(s), waiting for each to hold its roles (or for the count held to stop growing)", o.Roles, o.Members)
	settle := o.Settings.LeaseDuration + 11*Wait // the member's own bound, and a margin
	var electedS float64                         // the slowest member's time to steady
	for _, p := range procs {
		l, err := p.next(ctx, "steady", settle)
		if err != nil {
			return nil, err
		}
		electedS = max(electedS, l.ElectedS)
	}
	c.progress("renew: measuring for %v", o.Duration)
	cpu0 := SelfCPU()
	for _, p := range procs {
		if err := p.send("window " + o.Duration.String()); err != nil {
			return nil, fmt.Errorf("member %s: %w", p.name, err)
		}
	}
	reps := make([]*MemberReport, len(procs))
	var cpu1 float64
	for i, p := range procs {
		l, err := p.next(ctx, "report", o.Duration+settle)
		if err != nil {
			return nil, err
		}
		if l.MemberReport == nil {
			return nil, errors.New("bench renew: a report without figures")
		}
		reps[i] = l.MemberReport
		if i == 0 {
			cpu1 = SelfCPU()
		}
	}
	res := &RenewResult{Result: chart.Result{Kind: "renew", System: "krole"}}
	var samples, writes []float64
	var missed, failed int
	var windowS, grown, stacks float64
	missedBy := map[string]int{}
	for i, r := range reps {
		_, count := memberSplit(o.Roles, o.Members, i)
		samples = append(samples, r.RenewMS...)
		writes = append(writes, r.WriteMS...)
		missed += r.Missed
		failed += r.Failed
		for k, v := range r.MissedBy {
			missedBy[k] += v
		}
		windowS = max(windowS, r.WindowS)
		res.Commits += r.Commits
		res.Aborts += r.Aborts
		res.TransactionsPerS += float64(r.Commits+r.Aborts) / r.WindowS
		res.CPUSPerS += r.CPUS / r.WindowS
		res.HeldAtStart += r.HeldAtStart
		res.HeldAtEnd += r.HeldAtEnd
		grown += float64(r.HeapBytes) - float64(r.BaseHeapBytes)
		stacks += float64(r.StackBytes) - float64(r.BaseStackBytes)
		f := MemberFigures{Member: procs[i].name, Roles: count, HeldAtStart: r.HeldAtStart, HeldAtEnd: r.HeldAtEnd,
			TransactionsPerS: float64(r.Commits+r.Aborts) / r.WindowS, CPUSPerS: r.CPUS / r.WindowS,
			HeapBytes: r.HeapBytes, Missed: r.Missed, Renewals: len(r.RenewMS)}
		if r.HeldAtEnd > 0 {
			f.BytesPerRole = (float64(r.HeapBytes) - float64(r.BaseHeapBytes)) / float64(r.HeldAtEnd)
		}
		res.Members = append(res.Members, f)
		if r.ViewRoles > 0 {
			res.ViewRoles = r.ViewRoles
			res.ViewBytesPerRole = float64(r.ViewHeapBytes) / float64(r.ViewRoles)
		}
	}
	if res.HeldAtEnd > 0 {
		res.MemberBytesPerRole = grown / float64(res.HeldAtEnd)
		res.MemberStackBytesPerRole = stacks / float64(res.HeldAtEnd)
	}
	res.MemberBytesPerCampaignedRole = grown / float64(o.Roles)
	n := float64(len(samples))
	rate := n / windowS
	per1000, cl := 0.0, 0.0
	var memberCPU float64
	for _, r := range reps {
		memberCPU += r.CPUS
	}
	if n > 0 {
		per1000 = memberCPU / n * 1000
		cl = (cpu1 - cpu0) / n * 1000
	}
	res.SamplesMS = samples
	res.RenewalsPerS, res.MissedDeadlines, res.CPUSPer1000 = &rate, &missed, &per1000
	if c.Embedded {
		res.ClusterCPUSPer1000 = &cl
		perS := (cpu1 - cpu0) / windowS
		res.ClusterCPUSPerS = &perS
	}
	if len(writes) > 0 {
		res.Phases = map[string]*chart.Dist{"write": chart.NewDist(writes)}
	}
	res.Stats = chart.Summarize(res.SamplesMS)
	res.Settings = map[string]any{
		"roles": o.Roles, "members": o.Members, "lease_duration": o.Settings.LeaseDuration.String(),
		"heartbeat_interval": o.Settings.HeartbeatInterval.String(), "duration": o.Duration.String(),
		"failed_renewals": failed, "missed_by": missedBy, "elected_s": chart.Round3(electedS),
		"samples": "a renewal is one heartbeat round of a member's session: from the round's start (before its DescribeMany) to the heartbeat's answer; phase write: the heartbeat's write alone",
		"cpu": "cpu_s_per_1000 and cpu_s_per_s: the member processes (krole bench member: view, transport, processor), summed; " +
			"cluster_cpu_s_per_1000 and cluster_cpu_s_per_s: the bench process (the embedded cluster when there is one, and the bench's view)",
		"transactions": "transactions_per_s: EndTxn requests (commits + aborts) the members' transports sent, per second of the window, summed",
		"memory": "member_bytes_per_role: live heap growth of the member processes since before their campaigns (their views included) " +
			"over the roles held at the end (member_stack_bytes_per_role: their goroutine stacks' growth, likewise); view_bytes_per_role: a fresh view's live heap in the first member's process over view_roles",
	}
	return res, nil
}
