package server

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/group"
	"github.com/krabka/krole/internal/groupsum"
)

// GroupReader is what GET /v1/groups reads each group's live members
// from: *view.View implements it, and so does [WithSessions] of a table
// that does.
type GroupReader interface {
	Groups(ctx context.Context, now time.Time) (map[string][]group.Member, error)
}

// MoveReader is what GET /v1/groups reads each group's recent moves from:
// *view.View implements it, and so does [WithSessions] of a table that
// does. A GroupReader that is none shows no moves.
type MoveReader interface {
	GroupMoves(ctx context.Context, name string) ([]group.Move, error)
}

// DefaultMoves is how many of each group's latest moves GET /v1/groups
// shows unless ?moves=N says otherwise.
const DefaultMoves = 20

// GroupMoves is the moves of the table's group name, when it reads
// moves; none otherwise.
func (s sessionGroupTable) GroupMoves(ctx context.Context, name string) ([]group.Move, error) {
	if mr, ok := s.gr.(MoveReader); ok {
		return mr.GroupMoves(ctx, name)
	}
	return nil, nil
}

// ReadMoves returns the moves of each of groups that mr reads (nil mr:
// none).
func ReadMoves(ctx context.Context, mr MoveReader, groups map[string][]group.Member) (map[string][]group.Move, error) {
	out := map[string][]group.Move{}
	if mr == nil {
		return out, nil
	}
	for name := range groups {
		ms, err := mr.GroupMoves(ctx, name)
		if err != nil {
			return nil, err
		}
		out[name] = ms
	}
	return out, nil
}

// HeldRoles counts, per member, the roles whose lease in rows is live and
// names it: what a group's member holds, as the rows judge it.
func HeldRoles(rows []Row) map[codec.MemberID]int {
	out := map[codec.MemberID]int{}
	for _, r := range rows {
		if r.Holder != nil && !r.Holder.Expired {
			out[r.Holder.Member]++
		}
	}
	return out
}

// groups answers GET /v1/groups: every group with a live member, as
// `krole table --members -o json` prints them (package groupsum), the
// holdings judged as GET /v1/roles judges the leases, with each group's
// last DefaultMoves moves (?moves=N: the last N, 0 for none).
func (s *server) groups(w http.ResponseWriter, r *http.Request) {
	if s.groupReader == nil {
		writeJSON(w, http.StatusNotFound, errorBody("this server reads no groups"))
		return
	}
	last := DefaultMoves
	if q := r.URL.Query().Get("moves"); q != "" {
		n, err := strconv.Atoi(q)
		if err != nil || n < 0 {
			writeJSON(w, http.StatusBadRequest, errorBody("moves must be a whole number of moves, 0 or more"))
			return
		}
		last = n
	}
	ctx, cancel := s.ctx(r)
	defer cancel()
	rows, err := SettledRows(ctx, s.t, s.opts.Clock)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	members, err := s.groupReader.Groups(ctx, s.opts.Clock())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	mr, _ := s.groupReader.(MoveReader)
	moves, err := ReadMoves(ctx, mr, members)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, groupsum.Build(members, HeldRoles(rows), moves, last))
}
