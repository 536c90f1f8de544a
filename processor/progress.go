package processor

import (
	"context"
	"sync"
	"time"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/rolestate"
)

// progress is what rule 7's deference needs of the other members, once
// per Member: when each was last seen taking a role, and which roles defer
// to whom, so that one watch wakes them when one stops heartbeating.
type progress struct {
	mu       sync.Mutex
	seen     map[codec.MemberID]time.Time
	deferred map[codec.MemberID]map[*runner]struct{}
}

// won records that member was seen winning (or rewriting) a lease at now.
func (p *progress) won(member codec.MemberID, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.seen == nil {
		p.seen = map[codec.MemberID]time.Time{}
	}
	if now.After(p.seen[member]) {
		p.seen[member] = now
	}
}

// last returns when member was last seen winning a lease; zero for never.
func (p *progress) last(member codec.MemberID) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seen[member]
}

// deferTo records that r defers to the members ahead: [progress.watch]
// wakes r once one of them stops heartbeating.
func (p *progress) deferTo(r *runner, ahead []codec.MemberID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.deferred == nil {
		p.deferred = map[codec.MemberID]map[*runner]struct{}{}
	}
	for _, m := range ahead {
		if p.deferred[m] == nil {
			p.deferred[m] = map[*runner]struct{}{}
		}
		p.deferred[m][r] = struct{}{}
	}
}

// watch looks up, every HeartbeatInterval until ctx ends, the member session
// of each member some role defers to, and wakes those roles once it has
// stopped counting as alive ([aliveUntil]). A woken role decides again;
// one no longer deferring ignores the wake.
func (p *progress) watch(ctx context.Context, ss SessionSource, s Settings, clk Clock) {
	for {
		t := clk.NewTimer(s.HeartbeatInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		p.mu.Lock()
		members := make([]codec.MemberID, 0, len(p.deferred))
		for m := range p.deferred {
			members = append(members, m)
		}
		p.mu.Unlock()
		now := clk.Now()
		for _, m := range members {
			if se, found, err := ss.Session(ctx, m); err == nil && found && now.Before(aliveUntil(se, now, s)) {
				continue
			}
			p.mu.Lock()
			rs := p.deferred[m]
			delete(p.deferred, m)
			p.mu.Unlock()
			for r := range rs {
				r.poke()
			}
		}
	}
}

// aliveUntil is until when a candidate whose latest session record is se
// counts as alive to the members behind it (rule 7): two
// HeartbeatIntervals (at most a heartbeat span) after the source saw it;
// zero for a session end or a record without a plausible time seen.
func aliveUntil(se rolestate.SessionSeen, now time.Time, s Settings) time.Time {
	if se.Heartbeat.End || se.SeenAt.IsZero() || se.SeenAt.After(now) {
		return time.Time{}
	}
	return se.SeenAt.Add(min(2*s.HeartbeatInterval, rolestate.HeartbeatSpan(se.Heartbeat)))
}
