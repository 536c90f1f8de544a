package server

import (
	"context"
	"net/http"
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
// holdings judged as GET /v1/roles judges the leases.
func (s *server) groups(w http.ResponseWriter, r *http.Request) {
	if s.groupReader == nil {
		writeJSON(w, http.StatusNotFound, errorBody("this server reads no groups"))
		return
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
	writeJSON(w, http.StatusOK, groupsum.Build(members, HeldRoles(rows)))
}
