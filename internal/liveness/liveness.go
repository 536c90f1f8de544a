// Package liveness judges whether a role's newest lease still holds, and
// whether a candidate's member session is gone: [Judge] and [Session] are
// the one judgement of a holder's liveness, time left and last renewal
// behind every answer of the CLI and of krole serve (leader, table and
// its --watch, records, describe, prune; serve's rows, streams, history
// and metrics). It counts the records the succession rules count (package
// processor): the lease and the heartbeats of the member session it names
// (rolestate.State.Renewal). An answer may come from a process that read
// the lease only a moment ago.
//
// A reader that follows the role topic counts a lease's span from when it
// read the lease record (rolestate.State.LeaseEnd), on its own clock:
// that needs no agreement between clocks, and it is what the succession
// rules do. But a fresh process reads every lease when it starts, so it
// credits a holder that died long ago with a whole new span: on that
// count alone, `krole leader` would name a holder SIGKILLed twelve
// seconds before as live, with a lease of 3s. This package adds what the
// lease record says of its own age, and a wait:
//
//   - The holder's clock: a lease whose Deadline (the holder's wall
//     clock when its write began, plus its span) is more than
//     [ClockTolerance] behind this machine's clock ran out, as far as the
//     clocks say. A holder's renewal is its member session's heartbeat
//     (the lease itself is written again only hourly), so the Deadline
//     judged is that of the latest renewal: the lease's, or that of the
//     latest heartbeat of the incarnation the lease names that vouches
//     for the role (see [Judge]). A live holder renews every HeartbeatInterval and stops
//     acting as holder HeartbeatDeadline (at most its span) after its last
//     renewal began, so with clocks within ClockTolerance of each other
//     the newest lease of a live holder never looks like that.
//   - A wait, for clocks that disagree by more: such a lease is reported
//     live while this process waits for a renewal, at most
//     [RenewalWait] (half the lease's span) after it read the lease;
//     then dead. A holder renews well within half its span (every fifth
//     of it by default, and at most 0.425 of it under load with the
//     default timings), so a live holder's renewal shows in that time
//     whatever the clocks say.
//
// The bound: a one-shot answer never reports as live a holder whose lease
// ran out more than ClockTolerance ago by its holder's clock, as this
// machine's clock reads it (with the two clocks within ClockTolerance of
// each other, at most 2*ClockTolerance ago), nor, whatever the clocks, a
// lease its reader read more than a span ago without a renewal. A live
// holder is reported dead only when both the clocks disagree by more than
// ClockTolerance plus what its span leaves after a renewal, and its
// renewals are more than half its span apart. The wait costs a one-shot
// answer up to half the span when the holder is dead.
//
// This is advice, as every answer read from the topic is: safety rests on
// the broker's fence, never on this judgement or on clocks.
package liveness

import (
	"context"
	"fmt"
	"time"

	"github.com/krabka/krole/rolestate"
)

// ClockTolerance is how far the clocks of a holder and of a one-shot
// reader may disagree for the reader's answer to keep its bound (see the
// package doc).
const ClockTolerance = time.Second

// RenewalWait is how long after a one-shot reader read a lease of span
// span it waits for a renewal when the holder's clock says the lease ran
// out: half the span.
func RenewalWait(span time.Duration) time.Duration { return span / 2 }

// Verdict is the judgement of one role's newest lease at one moment.
type Verdict struct {
	// Live: the lease is reported live.
	Live bool
	// Pending: live only while the reader waits for a renewal (the
	// holder's clock says the lease ran out); it is dead at End unless a
	// renewal shows first.
	Pending bool
	// End is when the lease stops being live as this judgement stands
	// (without a renewal); zero without a lease.
	End time.Time
	// RanOut is when the lease ran out by its holder's clock (the latest
	// renewal's Deadline), zero without a lease or for a release.
	RanOut time.Time
	// VouchedAt is the latest renewal's GrantedAt (Unix ms, the holder's
	// clock): the lease's, or its member session's latest heartbeat that
	// vouches for the role, whichever is later; 0 without a lease or for a
	// release.
	VouchedAt int64
	// RenewalSeen is when the reader saw that renewal, on its clock; zero
	// when it does not say.
	RenewalSeen time.Time
}

// Judge judges st's lease at now, on the reader's clock: the one
// judgement of a holder's liveness, time left and last renewal that every
// answer of the CLI and of the HTTP API gives. st.LeaseSeenAt must be when
// this reader read the lease record (a zero LeaseSeenAt counts as read
// when it was granted, by the holder's clock, as
// rolestate.State.LeaseEnd counts it). Without a lease, or for a release,
// the verdict is not live. The lease is judged by its latest renewal
// (rolestate.State.Renewal): the lease record, or the latest heartbeat of
// the member session it names that vouches for the role (st.Session), the
// same records the succession rules count; a session record that drops
// the role makes the verdict not live, as a release does.
func Judge(st rolestate.State, now time.Time) Verdict {
	if st.Lease == nil {
		return Verdict{}
	}
	r := st.Renewal()
	if st.Lease.Released() || r.Dropped {
		return Verdict{End: now}
	}
	end, clockEnd := bound(r.SeenAt, r.GrantedAt, r.Deadline, r.Span, r.End)
	v := Verdict{End: end, RanOut: time.UnixMilli(r.Deadline), Live: now.Before(end), VouchedAt: r.GrantedAt, RenewalSeen: r.SeenAt}
	v.Pending = v.Live && !now.Before(clockEnd)
	return v
}

// End is when st's lease stops being live as [Judge] judges it without a
// renewal; the zero time without a lease, or for a lease that is not live
// at any time (a release, or one its session dropped).
func End(st rolestate.State) time.Time {
	return Judge(st, time.Time{}).End // a verdict's End does not depend on now, but for a release's
}

// bound returns when a renewal stops counting, and when its holder's
// clock says it ran out plus [ClockTolerance]. The renewal was granted at
// granted with deadline deadline (the holder's clock, Unix ms) and span
// span, seen at seen (zero: counted from granted); own is the reader's
// own count of its end, which bounds it.
func bound(seen time.Time, granted, deadline int64, span time.Duration, own time.Time) (end, clockEnd time.Time) {
	if seen.IsZero() {
		seen = time.UnixMilli(granted)
	}
	clockEnd = time.UnixMilli(deadline).Add(ClockTolerance)
	end = own
	if waited := seen.Add(RenewalWait(span)); clockEnd.Before(end) {
		end = maxTime(clockEnd, minTime(waited, end))
	}
	return end, clockEnd
}

// SessionVerdict is the judgement of a member's session, as its latest
// record says, at one moment.
type SessionVerdict struct {
	// Gone: the session ended, or its latest heartbeat ran out as [Judge]
	// judges a renewal (one heartbeat span from when the reader saw it, or
	// ClockTolerance past its deadline by the member's clock after the
	// wait for the next one).
	Gone bool
	// Pending: not gone only while the reader waits for the next
	// heartbeat (the member's clock says the latest ran out).
	Pending bool
	// RanOut is the latest heartbeat's deadline by the member's clock;
	// zero for a session end.
	RanOut time.Time
}

// Session judges member session se (its latest record, as a reader saw
// it) at now, with the rule [Judge] judges a holder's renewal by. A
// member's session heartbeats every heartbeat interval whether or not it
// holds a role (see package processor, "Member sessions"), so a candidate
// whose session is gone is not running. Without a record (se nil: none
// was read) nothing is known, and the verdict is not gone.
func Session(se *rolestate.SessionSeen, now time.Time) SessionVerdict {
	if se == nil {
		return SessionVerdict{}
	}
	if se.Heartbeat.End {
		return SessionVerdict{Gone: true}
	}
	end, clockEnd := sessionEnd(se)
	v := SessionVerdict{Gone: !now.Before(end), RanOut: time.UnixMilli(se.Heartbeat.Deadline)}
	v.Pending = !v.Gone && !now.Before(clockEnd)
	return v
}

// sessionEnd is [bound] for the latest heartbeat of a session: its span
// counted from when the reader saw it.
func sessionEnd(se *rolestate.SessionSeen) (end, clockEnd time.Time) {
	h := se.Heartbeat
	span := rolestate.HeartbeatSpan(h)
	seen := se.SeenAt
	if seen.IsZero() {
		seen = time.UnixMilli(h.GrantedAt)
	}
	return bound(seen, h.GrantedAt, h.Deadline, span, seen.Add(span))
}

// pending returns how long past now st asks a one-shot reader to wait
// for a renewal: of its lease, or of a candidate's session.
func pending(st rolestate.State, now time.Time) time.Duration {
	var wait time.Duration
	if v := Judge(st, now); v.Pending {
		wait = v.End.Sub(now)
	}
	for _, c := range st.Candidates {
		if c.Session != nil && Session(c.Session, now).Pending {
			end, _ := sessionEnd(c.Session)
			wait = max(wait, end.Sub(now))
		}
	}
	return wait
}

// pollEvery is how often [Settle] reads the states again while it waits.
const pollEvery = 25 * time.Millisecond

// Settle reads states with read until none of them is [Verdict].Pending
// at now(), nor has a candidate whose [SessionVerdict] is (see [Session]
// and rolestate.Candidate.Session): a renewal showed, or the wait ran out. It returns the last
// states read. The wait is bounded by the longest wait the first pending
// verdict asks for (at most [RenewalWait] after the lease was read), and
// by ctx: when ctx ends, it returns the states as they are and ctx's
// error.
func Settle(ctx context.Context, read func(context.Context) ([]rolestate.State, error), now func() time.Time) ([]rolestate.State, error) {
	states, err := read(ctx)
	if err != nil {
		return nil, err
	}
	var until time.Time // on the real clock, so that a frozen now() ends too
	for {
		at := now()
		var wait time.Duration
		for _, st := range states {
			wait = max(wait, pending(st, at))
		}
		if wait <= 0 {
			return states, nil
		}
		if until.IsZero() {
			until = time.Now().Add(wait)
		}
		left := time.Until(until)
		if left <= 0 {
			return states, nil
		}
		t := time.NewTimer(min(left, pollEvery))
		select {
		case <-ctx.Done():
			t.Stop()
			return states, ctx.Err()
		case <-t.C:
		}
		next, err := read(ctx)
		if err != nil {
			return states, err
		}
		states = next
	}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// NotHeld says why the newest lease of st, judged dead at now, holds no
// more (`krole leader`'s line for a role without a live holder); "" for
// a role without a lease.
func NotHeld(st rolestate.State, now time.Time) string {
	l := st.Lease
	switch {
	case l == nil:
		return ""
	case l.Released():
		return fmt.Sprintf("%s released it (token %s)", l.Member, l.Token)
	case st.SessionVouch() == rolestate.Dropped:
		return fmt.Sprintf("%s released it (token %s) when its member session gave the role up", l.Member, l.Token)
	}
	v := Judge(st, now)
	if !v.RanOut.IsZero() && !v.RanOut.After(now) {
		return fmt.Sprintf("the lease of %s (token %s) ran out at %s by its holder's clock, %v ago, and no renewal came",
			l.Member, l.Token, v.RanOut.Local().Format("15:04:05.000"), now.Sub(v.RanOut).Round(100*time.Millisecond))
	}
	return fmt.Sprintf("the lease of %s (token %s) ran out", l.Member, l.Token)
}
