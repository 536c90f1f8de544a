package chaos_test

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/krabka/krole/internal/chaos"
	"github.com/krabka/krole/internal/testdb"
)

// TestMain stops the PostgreSQL server the runs wrote to (package testdb).
func TestMain(m *testing.M) { os.Exit(testdb.Run(m)) }

// gateSeed is the seed of the run that `make test` (and CI) includes: a
// gate replays one schedule of faults, so that it fails on a change of
// krole, not on a draw. Exploring new schedules is `make chaos`'s job
// (CHAOS_SEED=random unless given).
const gateSeed = 7130356208474190219

// TestChaos runs the suite against an embedded 3-broker cluster for
// CHAOS_DURATION (default 30s) with seed CHAOS_SEED (gateSeed when unset,
// a fresh one when "random"; logged first so that a failing run can be
// replayed), and fails when the auditor reports any violation. CHAOS_DIR
// keeps the event and fault logs and the history (history.json, to audit
// again with CHAOS_HISTORY) there (default: a temporary directory, removed
// afterwards). CHAOS_ONLY ("member", "request" or "cluster") restricts the
// faults to one class; CHAOS_FAULT_EVERY sets the mean pause between
// faults (default 1s); CHAOS_PIPELINE sets the members' Pipeline (auto,
// on, off; default auto, which is off on kfake); CHAOS_ROLES the number of
// roles (default 40: eight per member, each member's renewed by its one
// member session); CHAOS_GROUP makes the members one group of that name.
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("the chaos run takes CHAOS_DURATION")
	}
	dur := 30 * time.Second
	if s := os.Getenv("CHAOS_DURATION"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("CHAOS_DURATION=%q: %v", s, err)
		}
		dur = d
	}
	seed := uint64(gateSeed)
	switch s := os.Getenv("CHAOS_SEED"); s {
	case "":
	case "random":
		var b [8]byte
		_, _ = rand.Read(b[:])
		seed = binary.LittleEndian.Uint64(b[:]) >> 1
	default:
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("CHAOS_SEED=%q: want a number or \"random\": %v", s, err)
		}
		seed = v
	}
	t.Logf("seed: %d (replay with CHAOS_SEED=%d CHAOS_DURATION=%s)", seed, seed, dur)
	var every time.Duration
	if s := os.Getenv("CHAOS_FAULT_EVERY"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			t.Fatalf("CHAOS_FAULT_EVERY=%q: want a positive duration such as 4s", s)
		}
		every = d
	}
	var roles int
	if s := os.Getenv("CHAOS_ROLES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("CHAOS_ROLES=%q: want a positive number of roles", s)
		}
		roles = n
	}
	cfg := chaos.Config{
		Duration: dur,
		Seed:     seed,
		Only:     os.Getenv("CHAOS_ONLY"),
		Pipeline: os.Getenv("CHAOS_PIPELINE"),
		// The mean pause between faults (default 1s). Sparser faults
		// (4s) leave the quiet stretches in which the gap audit's bounds
		// are short.
		FaultEvery: every,
		// Roles (default 40): members hold many roles each.
		Roles: roles,
		// Members' clocks apart by up to 10 s, five leases: package
		// processor judges expiry on the observer's clock.
		MaxClockOffset: 5 * time.Second,
		Group:          os.Getenv("CHAOS_GROUP"),
	}
	switch sc := os.Getenv("CHAOS_SCENARIO"); sc {
	case "":
	case chaos.ScenarioMassFailover:
		cfg = massFailover(t, cmp.Or(roles, 1000))
		cfg.Duration, cfg.Seed = dur, seed
	default:
		t.Fatalf("CHAOS_SCENARIO=%q: want %q or nothing", sc, chaos.ScenarioMassFailover)
	}
	runSuite(t, cfg)
}

// TestChaosGroup is the gate's schedule of faults (20 s of it) with the
// members one group: they spread the roles by the group's plan, hand
// roles over as members come and go, and drain on SIGTERM. It fails on
// any violation, a role won twice within one vacancy included.
func TestChaosGroup(t *testing.T) {
	if testing.Short() {
		t.Skip("the group's chaos run takes 20s")
	}
	runSuite(t, chaos.Config{Duration: 20 * time.Second, Seed: gateSeed, MaxClockOffset: 5 * time.Second, Group: "shards"})
}

// massFailover is the Config of the mass-failover scenario with roles
// roles and CHAOS_CANDIDATES (default 2) candidates beside the holder.
func massFailover(t *testing.T, roles int) chaos.Config {
	t.Helper()
	cands := 2
	if s := os.Getenv("CHAOS_CANDIDATES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("CHAOS_CANDIDATES=%q: want a positive number", s)
		}
		cands = n
	}
	return chaos.Config{
		Scenario:       chaos.ScenarioMassFailover,
		Members:        1 + cands,
		Roles:          roles,
		MaxClockOffset: 5 * time.Second,
	}
}

// TestChaosMassFailover runs the mass-failover scenario with 1000 roles, a
// holder and two candidates (CHAOS_CANDIDATES), and fails on any
// violation: every role the holder's kill leaves vacant is won once. Each
// candidate takes its share; taking it lasts about a lease (2 s), so a
// candidate that stops deferring to the one ahead of it on a role races it.
func TestChaosMassFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("the mass failover takes about half a minute")
	}
	cfg := massFailover(t, 1000)
	cfg.Duration = 2 * time.Minute
	runSuite(t, cfg)
}

// runSuite builds the member program and runs the suite with cfg (its
// Member, Dir and Log filled in here: CHAOS_DIR, or a temporary
// directory), and fails on any violation. The random faults' scenario
// gets the test binary's PostgreSQL server as its Postgres, started while
// the member builds; the mass failover none: a thousand first
// transactions in the burst of its takeover would slow the candidate it
// measures.
func runSuite(t *testing.T, cfg chaos.Config) {
	t.Helper()
	dir := os.Getenv("CHAOS_DIR")
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Duration+5*time.Minute)
	defer cancel()
	var bin string
	built := make(chan error, 1)
	go func() {
		var err error
		bin, err = chaos.BuildMember(ctx, dir)
		built <- err
	}()
	if cfg.Scenario == "" {
		cfg.Postgres = testdb.Postgres(t).DSN
	}
	if err := <-built; err != nil {
		t.Fatal(err)
	}
	cfg.Member, cfg.Dir, cfg.Log = bin, dir, testLog{t}
	rep, _, err := chaos.Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	rep.Write(&sb)
	t.Logf("seed: %d\n%s", cfg.Seed, sb.String())
	if len(rep.Violations) > 0 {
		logViolatedRoles(t, dir, rep.Violations)
		t.Errorf("%d violations (seed %d, logs in %s)", len(rep.Violations), cfg.Seed, dir)
	}
}

// logViolatedRoles logs what the members wrote about the first five roles
// with a violation, their events (writes left out) and their stderr (at most 60
// lines a file and role), so that a run
// whose directory is gone (make test's, CI's) can still be diagnosed.
func logViolatedRoles(t *testing.T, dir string, vs []chaos.Violation) {
	// At most five roles: a mass failover may have hundreds violated.
	roles := map[string]bool{}
	for _, v := range vs {
		if len(roles) < 5 {
			roles[v.Role] = true
		}
	}
	stderr, _ := filepath.Glob(filepath.Join(dir, "m*.stderr"))
	events, _ := filepath.Glob(filepath.Join(dir, "m*.events"))
	for role := range roles {
		for _, f := range append(events, stderr...) {
			b, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			var lines []string
			for _, l := range strings.Split(string(b), "\n") {
				switch {
				case strings.Contains(l, `"kind":"write"`) || strings.Contains(l, `"kind":"commit"`):
				case strings.Contains(l, `"role":"`+role+`"`),
					strings.Contains(l, "role="+role+" ") || strings.HasSuffix(l, "role="+role):
					lines = append(lines, l)
				}
			}
			if n := len(lines); n > 60 {
				lines = append(lines[:30], append([]string{fmt.Sprintf("... %d lines left out ...", n-60)}, lines[n-30:]...)...)
			}
			if len(lines) > 0 {
				t.Logf("%s about %s:\n%s", filepath.Base(f), role, strings.Join(lines, "\n"))
			}
		}
	}
}

// TestAuditAgain judges again the history a run left in CHAOS_HISTORY (the
// history.json of its CHAOS_DIR), after a change of the auditor; skipped
// when CHAOS_HISTORY is unset.
func TestAuditAgain(t *testing.T) {
	path := os.Getenv("CHAOS_HISTORY")
	if path == "" {
		t.Skip("CHAOS_HISTORY names no history to judge")
	}
	h, err := chaos.ReadHistory(path)
	if err != nil {
		t.Fatal(err)
	}
	rep := chaos.Audit(*h)
	var sb strings.Builder
	rep.Write(&sb)
	t.Logf("%s\n%s", path, sb.String())
	if len(rep.Violations) > 0 {
		t.Errorf("%d violations", len(rep.Violations))
	}
}

type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
