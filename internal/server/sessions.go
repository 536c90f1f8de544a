package server

import (
	"context"
	"time"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/group"
	"github.com/krabka/krole/rolestate"
	"github.com/krabka/krole/view"
)

// SessionReader is what [WithSessions] reads a member's session from:
// *view.View implements it.
type SessionReader interface {
	Session(ctx context.Context, member codec.MemberID) (rolestate.SessionSeen, bool, error)
}

// WithSessions returns t with each candidate's member session joined to
// the states it hands out (rolestate.Candidate.Session), read from t
// itself, so that [NewRow] can tell a candidate whose session is gone. It
// returns t as it is when t cannot read sessions. When t is a
// [GroupReader], so is the table returned.
func WithSessions(t Table) Table {
	sr, ok := t.(SessionReader)
	if !ok {
		return t
	}
	st := sessionTable{Table: t, sr: sr}
	if gr, ok := t.(GroupReader); ok {
		return sessionGroupTable{sessionTable: st, gr: gr}
	}
	return st
}

// sessionGroupTable is a sessionTable that reads groups as its table does.
type sessionGroupTable struct {
	sessionTable
	gr GroupReader
}

func (s sessionGroupTable) Groups(ctx context.Context, now time.Time) (map[string][]group.Member, error) {
	return s.gr.Groups(ctx, now)
}

type sessionTable struct {
	Table
	sr SessionReader
}

// join sets the Session of each candidate of st, reading each member once
// per call through seen.
func (s sessionTable) join(ctx context.Context, st *rolestate.State, seen map[codec.MemberID]*rolestate.SessionSeen) error {
	if len(st.Candidates) == 0 {
		return nil
	}
	st.Candidates = append([]rolestate.Candidate(nil), st.Candidates...)
	for i, c := range st.Candidates {
		se, ok := seen[c.Member]
		if !ok {
			got, found, err := s.sr.Session(ctx, c.Member)
			if err != nil {
				return err
			}
			if found {
				se = &got
			}
			seen[c.Member] = se
		}
		st.Candidates[i].Session = se
	}
	return nil
}

func (s sessionTable) Lookup(ctx context.Context, role codec.Role) (rolestate.State, bool, error) {
	st, ok, err := s.Table.Lookup(ctx, role)
	if err != nil {
		return st, ok, err
	}
	return st, ok, s.join(ctx, &st, map[codec.MemberID]*rolestate.SessionSeen{})
}

func (s sessionTable) Snapshot(ctx context.Context) ([]rolestate.State, error) {
	sts, err := s.Table.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	seen := map[codec.MemberID]*rolestate.SessionSeen{}
	for i := range sts {
		if err := s.join(ctx, &sts[i], seen); err != nil {
			return nil, err
		}
	}
	return sts, nil
}

// Watch is t's Watch with the sessions joined to each change's After. Its
// goroutine ends, and closes the channel, once t's channel closes.
func (s sessionTable) Watch(ctx context.Context, roles ...codec.Role) <-chan view.Change {
	in := s.Table.Watch(ctx, roles...)
	out := make(chan view.Change)
	go func() {
		defer close(out)
		for c := range in {
			// A failed read leaves the sessions out: it fails only when
			// ctx ends or the view stops, which ends in too.
			_ = s.join(ctx, &c.After, map[codec.MemberID]*rolestate.SessionSeen{})
			select {
			case out <- c:
			case <-ctx.Done():
				for range in {
				}
				return
			}
		}
	}()
	return out
}
