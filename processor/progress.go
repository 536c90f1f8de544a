package processor

import (
	"sync"
	"time"

	"github.com/krabka/krole/codec"
)

// progress is, per other member, when this member last saw a new lease of
// it in any of its roles: how rule 7 tells a live candidate ahead that is
// taking roles from one that is live but not taking this one.
type progress struct {
	mu   sync.Mutex
	seen map[codec.MemberID]time.Time
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
