package processor_test

import (
	"fmt"
	"maps"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/processor"
)

// TestHarnessHoldManyRoles is a measuring harness for many roles held at
// once, not a test of `make test`: it is skipped unless KROLE_HOLD is set, and it
// asserts nothing about speed. It runs M members (KROLE_HOLD_MEMBERS,
// default 1), each with its own transport and view, holding K roles
// between them (each member runs K/M roles of its own), waits until every
// role is held (or KROLE_HOLD_SETTLE has passed), then measures for KROLE_HOLD_FOR (default 60s):
//
//	KROLE_HOLD=K@LEASE      e.g. 1000@3s (heartbeat interval LEASE/5)
//	KROLE_HOLD_MEMBERS=M    members sharing the roles
//	KROLE_HOLD_FOR=T        measuring window
//	KROLE_HOLD_PROFILE=F    write a CPU profile of this process to F
//	KROLE_HOLD_MAX_IN_FLIGHT=N  the members' Settings.MaxInFlight
//	KROLE_HOLD_SETTLE=D     measure after D (default 2m) even if not all held
//	KROLE_HOLD_CLUSTER_PID=P  also report the CPU of process P (the `krole dev` process) over the window
//
// Run the cluster in another process so that the process's CPU time is
// the members' (and their views') own, for example:
//
//	go build -o /tmp/krole . && /tmp/krole dev --partitions 12 &
//	KROLE_BROKERS=127.0.0.1:9092 KROLE_HOLD=1000@3s go test -run HarnessHoldManyRoles -v -timeout 30m ./processor/
//
// It reports: roles held at the end, roles lost (revoked for any reason
// but the end of the run) during the window, renewals done against the
// target rate, renew latency (each write of a held lease, timed by the
// transport wrapper from the date the lease carries: waiting for a call
// slot included) p50/p99/max, the longest gap between two successful
// writes of one role, and the process's CPU per 1,000 renewals.
func TestHarnessHoldManyRoles(t *testing.T) {
	spec := os.Getenv("KROLE_HOLD")
	if spec == "" {
		t.Skip("a measuring harness: set KROLE_HOLD=K@LEASE (see its doc)")
	}
	k, lease := parseHold(t, spec)
	members := envInt(t, "KROLE_HOLD_MEMBERS", 1)
	window := envDur(t, "KROLE_HOLD_FOR", time.Minute)
	s := processor.Settings{LeaseDuration: lease, MaxInFlight: envInt(t, "KROLE_HOLD_MAX_IN_FLIGHT", 0)}.WithDefaults()

	// No observer view: the process's work is the members' own.
	e := newEnv(t, s.TransactionTimeout, withPartitions(12), withoutObserver())
	roles := roleNames("hold-%05d", k)
	h := &holdStats{lastWrite: map[codec.Role]time.Time{}, lostBy: map[processor.Reason]int{}, toks: map[codec.Role]codec.Token{}}
	reg := prometheus.NewRegistry()
	var ms []*node
	for i := range members {
		id := codec.MemberID(fmt.Sprintf("member-%02d", i))
		var mine []codec.Role
		for j := i; j < k; j += members {
			mine = append(mine, roles[j])
		}
		ms = append(ms, e.start(id, mine, s, nil, onLeaseWrite(h.leaseWritten), runErrTo(make(chan error, 1)),
			withOptions(func(o *processor.Options) { o.OnEvent, o.Registerer = h.onEvent, reg })))
	}
	t.Cleanup(func() { // all at once: each member's own cleanup then finds it stopped
		for _, m := range ms {
			m.cancel()
		}
		for _, m := range ms {
			<-m.done
		}
	})
	start := time.Now()
	settle := envDur(t, "KROLE_HOLD_SETTLE", 2*time.Minute)
	for last := start; h.heldCount() < k; {
		if time.Since(start) > settle {
			t.Logf("after %v: %d of %d roles held; measuring anyway", time.Since(start).Round(time.Second), h.heldCount(), k)
			break
		}
		if time.Since(last) > 5*time.Second {
			last = time.Now()
			t.Logf("%v: %d of %d roles held; queued %v, lost %v", time.Since(start).Round(time.Second), h.heldCount(), k,
				gauge(t, reg, "krole_queued_roles"), h.lostSoFar())
		}
		time.Sleep(100 * time.Millisecond) // the progress poll's interval
	}
	t.Logf("%d of %d roles held after %v", h.heldCount(), k, time.Since(start).Round(time.Millisecond))
	time.Sleep(s.HeartbeatInterval) // on purpose: past the burst of elections

	if f := os.Getenv("KROLE_HOLD_PROFILE"); f != "" {
		out, err := os.Create(f)
		require.NoError(t, err)
		require.NoError(t, pprof.StartCPUProfile(out))
		defer func() { pprof.StopCPUProfile(); _ = out.Close() }()
	}
	clusterPID := envInt(t, "KROLE_HOLD_CLUSTER_PID", 0)
	h.begin()
	cpu0, t0 := processCPU(), time.Now()
	ccpu0 := pidCPU(t, clusterPID)
	time.Sleep(window) // the measuring window, on purpose
	cpu, wall := processCPU()-cpu0, time.Since(t0)
	ccpu := pidCPU(t, clusterPID) - ccpu0
	r := h.end()

	target := float64(k) * wall.Seconds() / s.HeartbeatInterval.Seconds()
	t.Logf("K=%d lease=%v heartbeat interval=%v members=%d max in flight=%d window=%v", k, lease, s.HeartbeatInterval, members, s.MaxInFlight, wall.Round(time.Millisecond))
	t.Logf("held at the end: %d of %d; lost during the window: %d %v", h.heldCount(), k, r.lost, r.lostBy)
	t.Logf("renewals: %d, %.0f%% of the target %.0f (one per role per heartbeat interval)", r.renewals, 100*float64(r.renewals)/target, target)
	t.Logf("renew latency: p50 %v p99 %v max %v (p99 / heartbeat interval = %.2f)", r.p50, r.p99, r.max, r.p99.Seconds()/s.HeartbeatInterval.Seconds())
	t.Logf("longest gap between two writes of a role: %v (heartbeat deadline %v)", r.gap, s.HeartbeatDeadline)
	if r.renewals > 0 {
		t.Logf("process CPU: %v over %v (%.2f cores); %.1f ms per 1,000 renewals", cpu.Round(time.Millisecond), wall.Round(time.Millisecond),
			cpu.Seconds()/wall.Seconds(), float64(cpu.Milliseconds())*1000/float64(r.renewals))
		if clusterPID > 0 {
			t.Logf("cluster process %d CPU: %v (%.2f cores); %.1f ms per 1,000 renewals", clusterPID, ccpu.Round(time.Millisecond),
				ccpu.Seconds()/wall.Seconds(), float64(ccpu.Milliseconds())*1000/float64(r.renewals))
		}
	}
}

// pidCPU is the CPU time (user and system) process pid has used, from
// /proc (0: none).
func pidCPU(t *testing.T, pid int) time.Duration {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	require.NoError(t, err)
	// The fields after the command (in parentheses, which may hold
	// spaces): utime and stime are the 12th and 13th, in clock ticks
	// (100 a second on Linux).
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	ut, err := strconv.ParseInt(f[11], 10, 64)
	require.NoError(t, err)
	st, err := strconv.ParseInt(f[12], 10, 64)
	require.NoError(t, err)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// holdStats collects what the members report: who holds what, renewals
// and their latency (the time from the renewal's start, as the member
// measures it, read from the transport wrapper: the call itself) during
// the window.
type holdStats struct {
	mu        sync.Mutex
	held      map[codec.Role]bool
	measuring bool
	lost      int
	lostBy    map[processor.Reason]int
	lats      []time.Duration
	lastWrite map[codec.Role]time.Time
	gap       time.Duration
	renewals  atomic.Int64
	toks      map[codec.Role]codec.Token // the token of each role's last lease write
}

type holdResult struct {
	lost          int
	lostBy        map[processor.Reason]int
	renewals      int64
	p50, p99, max time.Duration
	gap           time.Duration
}

func (h *holdStats) heldCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.held)
}

func (h *holdStats) onEvent(ev processor.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.held == nil {
		h.held = map[codec.Role]bool{}
	}
	switch ev.Kind {
	case processor.Elected:
		h.held[ev.Role] = true
	case processor.Revoked:
		delete(h.held, ev.Role)
		if ev.Reason != processor.ReasonContextEnded {
			h.lostBy[ev.Reason]++ // before the window too, until begin
			if h.measuring {
				h.lost++
			}
		}
	}
}

// renewed records a renewal that began at start and took d.
func (h *holdStats) renewed(role codec.Role, start time.Time, d time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if last, ok := h.lastWrite[role]; ok && h.measuring {
		h.gap = max(h.gap, start.Sub(last))
	}
	h.lastWrite[role] = start
	if h.measuring {
		h.lats = append(h.lats, d)
		h.renewals.Add(1)
	}
}

func (h *holdStats) lostSoFar() map[processor.Reason]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.lostBy)
}

// gauge sums the gauge name over its labels.
func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	fams, err := reg.Gather()
	require.NoError(t, err)
	sum := 0.0
	for _, f := range fams {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				sum += m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

func (h *holdStats) begin() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.measuring, h.lostBy = true, map[processor.Reason]int{}
}

func (h *holdStats) end() holdResult {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.measuring = false
	r := holdResult{lost: h.lost, lostBy: h.lostBy, renewals: int64(len(h.lats)), gap: h.gap}
	if n := len(h.lats); n > 0 {
		slices.Sort(h.lats)
		r.p50, r.p99, r.max = h.lats[n/2], h.lats[n*99/100], h.lats[n-1]
	}
	return r
}

// leaseWritten times each lease write of a held lease (a renewal: not a
// release, under a token already written once) from the member's call.
func (h *holdStats) leaseWritten(w write) {
	if w.Lease.Released() {
		return
	}
	h.mu.Lock()
	renewal := h.toks[w.Role] == w.Token
	h.toks[w.Role] = w.Token
	h.mu.Unlock()
	if renewal {
		// The lease is dated from the renewal's start, before the wait
		// for a call slot: the latency a holder sees.
		began := time.UnixMilli(w.Lease.GrantedAt)
		h.renewed(w.Role, began, w.End.Sub(began))
	}
}

func parseHold(t *testing.T, spec string) (int, time.Duration) {
	k, l, ok := strings.Cut(spec, "@")
	require.True(t, ok, "KROLE_HOLD=K@LEASE")
	n, err := strconv.Atoi(k)
	require.NoError(t, err)
	d, err := time.ParseDuration(l)
	require.NoError(t, err)
	return n, d
}

func envInt(t *testing.T, name string, def int) int {
	if v := os.Getenv(name); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, name)
		return n
	}
	return def
}

func envDur(t *testing.T, name string, def time.Duration) time.Duration {
	if v := os.Getenv(name); v != "" {
		d, err := time.ParseDuration(v)
		require.NoError(t, err, name)
		return d
	}
	return def
}

// processCPU is the CPU time (user and system) this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
