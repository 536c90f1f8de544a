package render

import (
	"fmt"
	"time"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/server"
	"github.com/krabka/krole/rolestate"
)

// Lease is a role's newest lease as `krole describe` shows it.
type Lease struct {
	State  string         `json:"state"` // live, released or expired
	Member codec.MemberID `json:"member"`
	Token  codec.Token    `json:"token"`
	// Fence is the holding's fencing number (server.Holder.Fence).
	Fence  int64 `json:"fence"`
	LeftMS int64 `json:"left_ms"`
	// VouchedAt is the holder's latest renewal (server.Holder.VouchedAt).
	VouchedAt int64 `json:"vouched_at,omitempty"`
}

// LeaseOf returns st's lease judged at now, nil without one.
func LeaseOf(st rolestate.State, now time.Time) *Lease {
	h := server.JudgedRow(st, now).Holder
	if h == nil {
		return nil
	}
	l := &Lease{Member: h.Member, Token: h.Token, Fence: h.Fence, LeftMS: h.LeftMS, VouchedAt: h.VouchedAt, State: "live"}
	switch {
	case h.Released():
		l.State = "released"
	case h.Expired:
		l.State = "expired"
	}
	return l
}

// LeaseText is the LEASE column of `krole describe`.
func LeaseText(l *Lease) string {
	switch {
	case l == nil:
		return "none"
	case l.State == "live":
		return fmt.Sprintf("live: %s (token %s, fence %d), %s left", l.Member, l.Token, l.Fence, FormatLeft(time.Duration(l.LeftMS)*time.Millisecond))
	case l.State == "released":
		return fmt.Sprintf("released by %s (token %s, fence %d): nobody holds the role", l.Member, l.Token, l.Fence)
	}
	return fmt.Sprintf("expired: %s (token %s, fence %d) stopped renewing", l.Member, l.Token, l.Fence)
}
