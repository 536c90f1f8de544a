// Package server is krole's HTTP lookup API over a view: read-only JSON
// answers from the view's local table, and a server-sent-events stream of
// its changes. Like the view, it reports what the table believes, not the
// broker's fence.
//
// Routes (all GET):
//
//	/healthz                      200 once the view has caught up, else 503
//	/v1/roles                     {"roles": [...]}, sorted
//	/v1/roles/{role}              the role's state; 404 when the table does not know it
//	/v1/roles/{role}/holder       {"role", "held", "lease", "at"}; ?at=<unix ms> (default now)
//	/v1/roles/{role}/candidates   {"role", "candidates": [...]}, in rank order
//	/v1/snapshot                  {"roles": [...]}: every role at one instant
//	/v1/stats                     the view's counters
//	/v1/watch?role=a&role=b       text/event-stream of changes ("event: change"); no role: all
//
// A lookup made before the view has caught up waits up to Options.Wait and
// then answers 503 with Retry-After; so does every lookup once the view has
// stopped. Errors are JSON: {"error": "..."}.
package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/view"
)

// Table is what the server reads: *view.View implements it.
type Table interface {
	Lookup(ctx context.Context, role codec.Role) (view.RoleState, bool, error)
	Holder(ctx context.Context, role codec.Role, now time.Time) (codec.Lease, bool, error)
	Candidates(ctx context.Context, role codec.Role) ([]view.Candidate, error)
	Roles(ctx context.Context) ([]codec.Role, error)
	Snapshot(ctx context.Context) ([]view.RoleState, error)
	Watch(ctx context.Context, roles ...codec.Role) <-chan view.Change
	CaughtUp() bool
	Stats() view.Stats
}

var _ Table = (*view.View)(nil)

// DefaultWait is the default of [Options].Wait.
const DefaultWait = 5 * time.Second

// Options configure [New].
type Options struct {
	// Wait bounds how long a lookup waits for the view to catch up before
	// answering 503. Default 5s.
	Wait time.Duration
	// Clock gives "now" for holder lookups without ?at. Default time.Now.
	Clock func() time.Time
	// Logger receives request errors at debug level. Default: discarded.
	Logger *slog.Logger
}

type server struct {
	t    Table
	opts Options
}

// New returns the HTTP handler of the lookup API over t. The handler is
// safe for concurrent use; a watch request holds its connection until the
// client goes away or the view stops.
func New(t Table, opts Options) http.Handler {
	if opts.Wait <= 0 {
		opts.Wait = DefaultWait
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &server{t: t, opts: opts}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", s.health)
	mux.HandleFunc("GET /v1/roles", s.roles)
	mux.HandleFunc("GET /v1/roles/{role}", s.role)
	mux.HandleFunc("GET /v1/roles/{role}/holder", s.holder)
	mux.HandleFunc("GET /v1/roles/{role}/candidates", s.candidates)
	mux.HandleFunc("GET /v1/snapshot", s.snapshot)
	mux.HandleFunc("GET /v1/stats", s.stats)
	mux.HandleFunc("GET /v1/watch", s.watch)
	return mux
}

func (s *server) ctx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), s.opts.Wait)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func (s *server) fail(w http.ResponseWriter, r *http.Request, err error) {
	code := http.StatusInternalServerError
	switch {
	case errors.Is(err, view.ErrNotCaughtUp), errors.Is(err, view.ErrStopped):
		code = http.StatusServiceUnavailable
		w.Header().Set("Retry-After", "1")
	case errors.Is(err, codec.ErrInvalid):
		code = http.StatusBadRequest
	}
	s.opts.Logger.Debug("lookup failed", "path", r.URL.Path, "status", code, "err", err)
	writeJSON(w, code, map[string]string{"error": err.Error()})
}

func pathRole(r *http.Request) (codec.Role, error) { return codec.NewRole(r.PathValue("role")) }

func (s *server) health(w http.ResponseWriter, _ *http.Request) {
	code := http.StatusOK
	if !s.t.CaughtUp() {
		code = http.StatusServiceUnavailable
	}
	writeJSON(w, code, map[string]bool{"caught_up": code == http.StatusOK})
}

func (s *server) roles(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.ctx(r)
	defer cancel()
	rs, err := s.t.Roles(ctx)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if rs == nil {
		rs = []codec.Role{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"roles": rs})
}

func (s *server) role(w http.ResponseWriter, r *http.Request) {
	role, err := pathRole(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ctx, cancel := s.ctx(r)
	defer cancel()
	st, ok, err := s.t.Lookup(ctx, role)
	switch {
	case err != nil:
		s.fail(w, r, err)
	case !ok:
		writeJSON(w, http.StatusNotFound, map[string]string{"error": fmt.Sprintf("role %s has no lease and no candidate", role)})
	default:
		writeJSON(w, http.StatusOK, st)
	}
}

func (s *server) holder(w http.ResponseWriter, r *http.Request) {
	role, err := pathRole(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	at := s.opts.Clock()
	if q := r.URL.Query().Get("at"); q != "" {
		ms, err := strconv.ParseInt(q, 10, 64)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "at must be Unix milliseconds"})
			return
		}
		at = time.UnixMilli(ms)
	}
	ctx, cancel := s.ctx(r)
	defer cancel()
	l, held, err := s.t.Holder(ctx, role, at)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var lease *codec.Lease
	if l != (codec.Lease{}) {
		lease = &l
	}
	writeJSON(w, http.StatusOK, map[string]any{"role": role, "held": held, "lease": lease, "at": at.UnixMilli()})
}

func (s *server) candidates(w http.ResponseWriter, r *http.Request) {
	role, err := pathRole(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ctx, cancel := s.ctx(r)
	defer cancel()
	cs, err := s.t.Candidates(ctx, role)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if cs == nil {
		cs = []view.Candidate{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"role": role, "candidates": cs})
}

func (s *server) snapshot(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.ctx(r)
	defer cancel()
	snap, err := s.t.Snapshot(ctx)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if snap == nil {
		snap = []view.RoleState{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"roles": snap})
}

type partitionStats struct {
	Partition     int32 `json:"partition"`
	Next          int64 `json:"next"`
	HighWatermark int64 `json:"high_watermark"`
	Lag           int64 `json:"lag"`
	CaughtUpTo    int64 `json:"caught_up_to"`
}

func (s *server) stats(w http.ResponseWriter, _ *http.Request) {
	st := s.t.Stats()
	out := map[string]any{
		"applied":   st.Applied,
		"skipped":   st.Skipped,
		"roles":     st.Roles,
		"caught_up": st.CaughtUp,
	}
	if !st.LastCatchUp.IsZero() {
		out["last_catch_up"] = st.LastCatchUp.UTC().Format(time.RFC3339Nano)
	}
	if st.ProbeError != nil {
		out["probe_error"] = st.ProbeError.Error()
	}
	parts := make([]partitionStats, 0, len(st.Partitions))
	for _, p := range st.Partitions {
		parts = append(parts, partitionStats(p))
	}
	out["partitions"] = parts
	writeJSON(w, http.StatusOK, out)
}

// watch streams changes as server-sent events until the client goes away
// or the view stops. Nothing is sent before the view has caught up.
func (s *server) watch(w http.ResponseWriter, r *http.Request) {
	var roles []codec.Role
	for _, q := range r.URL.Query()["role"] {
		role, err := codec.NewRole(q)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		roles = append(roles, role)
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "streaming unsupported"})
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	changes := s.t.Watch(ctx, roles...)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	flusher.Flush()
	for c := range changes {
		b, err := json.Marshal(c)
		if err != nil {
			s.opts.Logger.Debug("encoding a change", "err", err)
			continue
		}
		if _, err := fmt.Fprintf(w, "event: change\ndata: %s\n\n", b); err != nil {
			cancel()
			for range changes {
			}
			return
		}
		flusher.Flush()
	}
}
