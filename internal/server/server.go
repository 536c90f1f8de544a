// Package server is krole's HTTP lookup API over a view: read-only JSON
// answers from the view's local table, server-sent-event streams of its
// changes, Prometheus metrics and a small live HTML page. Like the view, it
// reports what the table believes, not the broker's fence.
//
// Routes (all GET):
//
//	/                        an HTML page of the table, updated live (no external assets): a timeline of
//	                         each role's holders, the members, and each role's history (Options.History)
//	/healthz                 200 when the view is healthy, else 503 with the reason (see below)
//	/metrics                 Prometheus text format, every name prefixed krole_
//	/v1/roles                [Row, ...]: every role the table knows, sorted (as `krole table -o json`)
//	/v1/roles/{role}         Row; 404 {"error": ...} when the table does not know the role
//	/v1/roles/{role}/watch   text/event-stream of the role's rows: the current one, then one per change
//	/v1/watch?role=a&role=b  text/event-stream of the rows of the roles named (no role: every role)
//	                         (either with ?snapshot=1: the current rows in one event, see below)
//	/v1/stats                the view's counters as JSON
//	/v1/source               {"brokers":[...],"topic":T,"history_window_ms":N}: what the server reads (Options.Source)
//	/v1/roles/{role}/history RoleHistory: the role's changes of holder in the history's window (Options.History)
//	/v1/history              [RoleHistory, ...]: every role's, sorted by role (Options.History)
//	/v1/groups               every group with a live member: its members, what each holds, its balance
//	                         (package groupsum, as `krole table --members -o json`)
//
// The history routes answer 404 {"error": ...} when the server keeps no
// history (Options.History nil), /v1/groups when the table is no
// [GroupReader].
//
// A [Row] is {"role", "holder", "candidates"}; see [NewRow]. Its "expired"
// and "left_ms" are judged when the answer is made, with the server's
// clock, from when the view applied the lease record plus the lease's
// span ([LeaseEnd]), never from the holder's wall-clock deadline alone.
// GET /v1/roles and /v1/roles/{role} judge a lease also by what its
// holder's clock says of its age ([JudgedRow], package liveness): when
// that says the lease ran out more than 1s ago, the answer waits for a
// renewal, up to half the lease's span after the view read it (bounded
// by Options.Wait), and then says "expired"; so a server that has just
// started never answers a holder dead for long as live.
//
// Every response carries X-Content-Type-Options: nosniff.
//
// /healthz answers [view.View.Health]:
//
//	{"healthy":BOOL, "caught_up":BOOL, "unreachable":BOOL,
//	 "reason":"..." (only when not healthy),
//	 "last_contact":TIME, "caught_up_at":TIME (each only once it happened)}
//
// with 200 when healthy, 503 otherwise: before the view has caught up,
// once it has stopped, when no broker has answered it for longer than the
// view's StaleAfter ("unreachable": true), when it has not been confirmed
// caught up for longer than that, or when the topic's offsets went
// backwards. last_contact is when a broker last answered the view,
// caught_up_at when its data was last confirmed current (RFC 3339, UTC).
// Lookups keep answering from the table meanwhile.
//
// A lookup made before the view has caught up waits up to Options.Wait and
// then answers 503 with Retry-After; so does every lookup once the view has
// stopped. Errors are JSON: {"error": "..."}.
//
// An event stream sends "data: <Row>" events: first the current row of
// each role it follows (sorted by role; a role the table does not know
// gives a row with holder null and no candidates), then one per change of
// the table, and one when a lease shown as live runs out (see [Follow]).
// With ?snapshot=1 the current rows come instead as one event named
// "snapshot" whose data is their JSON array ("event: snapshot" then
// "data: [Row, ...]"), so that a client of many roles learns them in one
// message; the changes follow as plain events, as without it.
// Before the view has caught up it sends only heartbeats (": ping"
// comments, every Options.Heartbeat). It ends when the client goes away,
// the server shuts down (the request's context ends) or the view stops;
// EventSource clients reconnect on their own and get the current rows
// again.
package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/internal/liveness"
	"github.com/krabka/krole/rolestate"
	"github.com/krabka/krole/view"
)

// Table is what the server reads: *view.View implements it.
type Table interface {
	Lookuper
	CaughtUp() bool
	Stats() view.Stats
	Health() view.Health
}

var _ Table = (*view.View)(nil)

// Defaults of [Options].
const (
	DefaultWait      = 5 * time.Second
	DefaultHeartbeat = 15 * time.Second
)

// Options configure [New].
type Options struct {
	// Wait bounds how long a lookup waits for the view to catch up before
	// answering 503. Default 5s.
	Wait time.Duration
	// Heartbeat is the interval of the ": ping" comments on event streams,
	// which keep proxies from closing an idle stream. Default 15s.
	Heartbeat time.Duration
	// Clock gives "now", against which leases are judged expired. A
	// lease's end is counted from when the view applied it, on the view's
	// clock (see [LeaseEnd]), so this must be the view's clock
	// (view.Options.Clock). Default time.Now, the view's default.
	Clock func() time.Time
	// Registry receives the server's collectors (see metrics.go), and
	// /metrics serves it. Default: a registry of the server's own, never
	// the global default registry. New fails when the collectors are
	// already registered in it.
	Registry *prometheus.Registry
	// Logger receives request errors at debug level. Default: discarded.
	Logger *slog.Logger
	// Source names the cluster and topic the view reads, for the page and
	// /v1/source. Default: unnamed.
	Source Source
	// History, when set, serves the holders' history; the caller runs it
	// ([History.Run]) on the same view. Default nil: no history.
	History *History
}

// Source is what the server's view reads.
type Source struct {
	Brokers []string `json:"brokers"`
	Topic   string   `json:"topic"`
}

type server struct {
	t           Table
	groupReader GroupReader // nil when t reads no groups
	opts        Options
	lookups     *prometheus.CounterVec
}

// The API routes counted in krole_lookups_total, by pattern.
var apiRoutes = []string{
	"/v1/roles",
	"/v1/roles/{role}",
	"/v1/roles/{role}/watch",
	"/v1/watch",
	"/v1/stats",
	"/v1/source",
	"/v1/roles/{role}/history",
	"/v1/history",
	"/v1/groups",
}

// APIRoutes returns the patterns of the API's routes (those under /v1/, as
// counted in krole_lookups_total), for help texts to list.
func APIRoutes() []string { return append([]string(nil), apiRoutes...) }

// New returns the HTTP handler of the lookup API over t. The handler is
// safe for concurrent use; an event stream holds its connection until the
// client goes away, the request's context ends or the view stops (so a
// server that shuts down should cancel its requests' base context: see
// http.Server.BaseContext).
func New(t Table, opts Options) (http.Handler, error) {
	if opts.Wait <= 0 {
		opts.Wait = DefaultWait
	}
	if opts.Heartbeat <= 0 {
		opts.Heartbeat = DefaultHeartbeat
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Registry == nil {
		opts.Registry = prometheus.NewRegistry()
	}
	s := &server{t: t, opts: opts, lookups: newLookups(apiRoutes)}
	s.groupReader, _ = t.(GroupReader)
	for _, c := range []prometheus.Collector{viewCollector{t}, s.lookups} {
		if err := opts.Registry.Register(c); err != nil {
			return nil, fmt.Errorf("server: registering metrics: %w", err)
		}
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", page)
	mux.HandleFunc("GET /healthz", s.health)
	mux.Handle("GET /metrics", promhttp.HandlerFor(opts.Registry, promhttp.HandlerOpts{}))
	api := map[string]http.HandlerFunc{
		"/v1/roles":                s.roles,
		"/v1/roles/{role}":         s.role,
		"/v1/roles/{role}/watch":   s.watchRole,
		"/v1/watch":                s.watch,
		"/v1/stats":                s.stats,
		"/v1/source":               s.source,
		"/v1/roles/{role}/history": s.roleHistory,
		"/v1/history":              s.history,
		"/v1/groups":               s.groups,
	}
	for _, route := range apiRoutes {
		mux.Handle("GET "+route, s.counted(route, api[route]))
	}
	mux.HandleFunc("/", notFound)
	return nosniff(mux), nil
}

// nosniff sets X-Content-Type-Options: nosniff on every response (pages,
// JSON, errors, event streams, metrics), so that no browser reads an
// answer as another type than the one it declares.
func nosniff(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		h.ServeHTTP(w, r)
	})
}

func (s *server) counted(route string, h http.HandlerFunc) http.Handler {
	c := s.lookups.WithLabelValues(route)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.Inc()
		h(w, r)
	})
}

func notFound(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeJSON(w, http.StatusMethodNotAllowed, errorBody("method %s not allowed: the API is read-only", r.Method))
		return
	}
	writeJSON(w, http.StatusNotFound, errorBody("no such endpoint %s", r.URL.Path))
}

func (s *server) ctx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), s.opts.Wait)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

func errorBody(format string, args ...any) map[string]string {
	return map[string]string{"error": fmt.Sprintf(format, args...)}
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
	writeJSON(w, code, errorBody("%s", err.Error()))
}

func pathRole(r *http.Request) (codec.Role, error) { return codec.NewRole(r.PathValue("role")) }

// healthBody is the JSON of GET /healthz; see the package doc.
type healthBody struct {
	Healthy     bool   `json:"healthy"`
	CaughtUp    bool   `json:"caught_up"`
	Unreachable bool   `json:"unreachable"`
	Reason      string `json:"reason,omitempty"`
	LastContact string `json:"last_contact,omitempty"`
	CaughtUpAt  string `json:"caught_up_at,omitempty"`
}

// newHealthBody returns h (and whether the view has caught up) as
// GET /healthz shows it.
func newHealthBody(h view.Health, caughtUp bool) healthBody {
	b := healthBody{Healthy: h.Healthy, CaughtUp: caughtUp, Unreachable: h.Unreachable, Reason: h.Reason}
	if !h.LastContact.IsZero() {
		b.LastContact = h.LastContact.UTC().Format(time.RFC3339Nano)
	}
	if !h.CaughtUpAt.IsZero() {
		b.CaughtUpAt = h.CaughtUpAt.UTC().Format(time.RFC3339Nano)
	}
	return b
}

type sourceBody struct {
	Source
	HistoryWindowMS int64 `json:"history_window_ms"` // 0 without a history
}

func (s *server) source(w http.ResponseWriter, _ *http.Request) {
	b := sourceBody{Source: s.opts.Source}
	if b.Brokers == nil {
		b.Brokers = []string{}
	}
	if s.opts.History != nil {
		b.HistoryWindowMS = s.opts.History.Window().Milliseconds()
	}
	writeJSON(w, http.StatusOK, b)
}

func (s *server) roleHistory(w http.ResponseWriter, r *http.Request) {
	role, err := pathRole(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if s.opts.History == nil {
		writeJSON(w, http.StatusNotFound, errorBody("this server keeps no history"))
		return
	}
	writeJSON(w, http.StatusOK, s.opts.History.Role(role))
}

func (s *server) history(w http.ResponseWriter, _ *http.Request) {
	if s.opts.History == nil {
		writeJSON(w, http.StatusNotFound, errorBody("this server keeps no history"))
		return
	}
	writeJSON(w, http.StatusOK, s.opts.History.Roles())
}

func (s *server) health(w http.ResponseWriter, _ *http.Request) {
	h := s.t.Health()
	code := http.StatusOK
	if !h.Healthy {
		code = http.StatusServiceUnavailable
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, code, newHealthBody(h, s.t.CaughtUp()))
}

// nowHeader carries the server's clock (Unix ms) with GET /v1/roles and
// /v1/roles/{role}: the moment at which the rows' "expired" and "left_ms"
// were judged.
const nowHeader = "X-Krole-Now"

func (s *server) roles(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.ctx(r)
	defer cancel()
	var now time.Time
	rows, err := SettledRows(ctx, s.t, func() time.Time { now = s.opts.Clock(); return now })
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set(nowHeader, strconv.FormatInt(now.UnixMilli(), 10))
	writeJSON(w, http.StatusOK, rows)
}

func (s *server) role(w http.ResponseWriter, r *http.Request) {
	role, err := pathRole(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ctx, cancel := s.ctx(r)
	defer cancel()
	var ok bool
	sts, err := liveness.Settle(ctx, func(ctx context.Context) ([]rolestate.State, error) {
		st, found, err := s.t.Lookup(ctx, role)
		ok = found
		return []rolestate.State{st}, err
	}, s.opts.Clock)
	switch {
	case err != nil:
		s.fail(w, r, err)
	case !ok:
		writeJSON(w, http.StatusNotFound, errorBody("role %s is not in the table: it has no lease and no candidate", role))
	default:
		now := s.opts.Clock()
		w.Header().Set(nowHeader, strconv.FormatInt(now.UnixMilli(), 10))
		writeJSON(w, http.StatusOK, JudgedRow(sts[0], now))
	}
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

func (s *server) watchRole(w http.ResponseWriter, r *http.Request) {
	role, err := pathRole(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.stream(w, r, []codec.Role{role})
}

// snapshotParam reports whether the request asks for the current rows as
// one "snapshot" event (?snapshot=1, or true).
func snapshotParam(r *http.Request) (bool, error) {
	v := r.URL.Query().Get("snapshot")
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("snapshot=%q: want 1 or 0: %w", v, codec.ErrInvalid)
	}
	return b, nil
}

func (s *server) watch(w http.ResponseWriter, r *http.Request) {
	var roles []codec.Role
	for _, q := range r.URL.Query()["role"] {
		for _, name := range strings.Split(q, ",") {
			role, err := codec.NewRole(name)
			if err != nil {
				s.fail(w, r, err)
				return
			}
			roles = append(roles, role)
		}
	}
	s.stream(w, r, roles)
}

// stream sends the rows of roles (every role when none) as server-sent
// events, until the client goes away, the request's context ends or the
// view stops.
func (s *server) stream(w http.ResponseWriter, r *http.Request, roles []codec.Role) {
	snapshot, err := snapshotParam(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	// retry: how long an EventSource waits before it reconnects.
	if _, err := fmt.Fprint(w, "retry: 2000\n\n"); err != nil {
		return
	}
	if !s.t.CaughtUp() {
		fmt.Fprint(w, ": waiting for the view to catch up\n\n")
	}
	if err := rc.Flush(); err != nil {
		s.opts.Logger.Debug("event stream: cannot flush", "err", err)
		return
	}

	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	st := Follow(ctx, s.t, s.opts.Clock, roles...)
	defer func() {
		cancel()
		for range st.C {
		}
	}()
	beat := time.NewTicker(s.opts.Heartbeat)
	defer beat.Stop()
	first := true // the next batch is the current rows of every role followed
	for {
		select {
		case rows, ok := <-st.C:
			if !ok {
				if err := st.Err(); err != nil {
					s.opts.Logger.Debug("event stream ended", "path", r.URL.Path, "err", err)
				}
				return
			}
			if first && snapshot {
				first = false
				b, err := json.Marshal(rows)
				if err != nil {
					s.opts.Logger.Debug("encoding the snapshot", "err", err)
					return
				}
				if _, err := fmt.Fprintf(w, "event: snapshot\ndata: %s\n\n", b); err != nil {
					return
				}
				break
			}
			first = false
			for _, row := range rows {
				b, err := json.Marshal(row)
				if err != nil {
					s.opts.Logger.Debug("encoding a row", "err", err)
					continue
				}
				if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
					return
				}
			}
		case <-beat.C:
			if _, err := fmt.Fprint(w, ": ping\n\n"); err != nil {
				return
			}
		}
		if err := rc.Flush(); err != nil {
			return
		}
	}
}
