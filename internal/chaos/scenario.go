package chaos

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ScenarioMassFailover is the Config.Scenario in which one member holding
// every role is SIGKILLed while the others are candidates for all of them
// (see docs/CHAOS.md, "The mass failover").
const ScenarioMassFailover = "massfailover"

// massFailover runs the mass-failover scenario: the first member campaigns
// alone until it holds every role, the others start one after another,
// each once every registration of the one before shows on the role
// topic (so they rank in that order on every role), and half a lease
// later the first is SIGKILLed and left down. It returns a lease after
// every role has been elected by another member since the kill (late
// challenges settle), or, without an error, when that takes
// longer than Config.Duration; the auditor judges what it took. It fails
// when the first member does not take every role, or a candidate's
// registrations do not show, within Config.Duration.
func (d *driver) massFailover(ctx context.Context) error {
	holder, cands := d.members[0], d.members[1:]
	if err := d.start(holder, d.offset()); err != nil {
		return err
	}
	d.logf("%s campaigns alone for %d roles", holder.name, len(d.roles))
	if err := d.await(ctx, func() bool { return len(d.held([]*proc{holder}, 0)) == len(d.roles) }); err != nil {
		return fmt.Errorf("%s did not take every role: %w", holder.name, err)
	}
	d.logf("%s holds every role", holder.name)
	for _, m := range cands {
		if err := d.start(m, d.offset()); err != nil {
			return err
		}
		if err := d.awaitRegistrations(ctx, m.name); err != nil {
			return err
		}
		d.logf("%s is a candidate for every role", m.name)
	}
	// The candidates' member sessions heartbeat (the deferral to a live
	// candidate ahead reads them) and their views settle.
	time.Sleep(d.cfg.Lease / 2)

	holder.mu.Lock()
	holder.busy = true // not started again
	holder.mu.Unlock()
	k := now()
	holder.signal(syscall.SIGKILL)
	d.record(Fault{Kind: FaultKill, Target: holder.name, Detail: fmt.Sprintf(" holding %d roles", len(d.roles)), Start: k, End: k})
	d.logf("kill %s, holding %d roles; %d candidates", holder.name, len(d.roles), len(cands))
	if err := d.await(ctx, func() bool { return len(d.held(cands, k)) == len(d.roles) }); err != nil {
		d.logf("not every role taken within %s: %v", d.cfg.Duration, err)
		return nil
	}
	d.logf("every role taken %d ms after the kill", now()-k)
	time.Sleep(d.cfg.Lease)
	return nil
}

// await polls done every 100 ms until it is true, for Config.Duration at
// most.
func (d *driver) await(ctx context.Context, done func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.Duration)
	defer cancel()
	for !done() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

// held returns the roles that members of ms hold now, by their event
// logs, under holdings that began at since or later.
func (d *driver) held(ms []*proc, since int64) map[string]bool {
	var h History
	for _, m := range ms {
		evs, _ := ReadEvents(m.events)
		h.Events = append(h.Events, evs...)
	}
	out := map[string]bool{}
	t := now()
	for _, hd := range holdings(h) {
		if hd.from >= since && hd.until > t {
			out[hd.role] = true
		}
	}
	return out
}

// awaitRegistrations reads the role topic with kgo until it shows a
// registration of member for every role, for Config.Duration at most.
func (d *driver) awaitRegistrations(ctx context.Context, member string) error {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.Duration)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(d.cl.ListenAddrs()...), kgo.ConsumeTopics(roleTopic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return err
	}
	defer cl.Close()
	seen := map[string]bool{}
	suffix := "/" + member
	for len(seen) < len(d.roles) {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return fmt.Errorf("%s registered for %d of %d roles: %w", member, len(seen), len(d.roles), ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			if role, ok := strings.CutPrefix(string(r.Key), "krole/reg/"); ok && r.Value != nil && strings.HasSuffix(role, suffix) {
				seen[strings.TrimSuffix(role, suffix)] = true
			}
		})
	}
	return nil
}
