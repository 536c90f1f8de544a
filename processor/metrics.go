package processor

import (
	"errors"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/krabka/krole/codec"
)

// metrics is what a Member reports to Prometheus; noMetrics is the quiet
// default.
type metrics interface {
	holder(role codec.Role, member codec.MemberID, holds bool)
	transition(role codec.Role, what string)
	heartbeat(d time.Duration, result string)
	leaseRewritten(d time.Duration, result string)
	fenced(role codec.Role)
	workFailed(role codec.Role, backoff time.Duration)
	campaignBackoff(role codec.Role, d time.Duration)
	queued(member codec.MemberID, roles int)
}

type noMetrics struct{}

func (noMetrics) holder(codec.Role, codec.MemberID, bool)   {}
func (noMetrics) transition(codec.Role, string)             {}
func (noMetrics) heartbeat(time.Duration, string)           {}
func (noMetrics) leaseRewritten(time.Duration, string)      {}
func (noMetrics) fenced(codec.Role)                         {}
func (noMetrics) workFailed(codec.Role, time.Duration)      {}
func (noMetrics) campaignBackoff(codec.Role, time.Duration) {}
func (noMetrics) queued(codec.MemberID, int)                {}

// promMetrics are the Prometheus collectors of a Member, listed in the
// doc of Options.Registerer.
type promMetrics struct {
	holding     *prometheus.GaugeVec
	transitions *prometheus.CounterVec
	beat        *prometheus.HistogramVec
	rewrite     *prometheus.HistogramVec
	fencedTotal *prometheus.CounterVec
	workFails   *prometheus.CounterVec
	backoff     *prometheus.GaugeVec
	queue       *prometheus.GaugeVec
}

// newMetrics registers the collectors with reg, or returns the quiet
// default when reg is nil. Collectors already registered (another Member
// in the same process) are shared.
func newMetrics(reg prometheus.Registerer) (metrics, error) {
	if reg == nil {
		return noMetrics{}, nil
	}
	m := &promMetrics{
		holding: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "krole_holder",
			Help: "1 while this member holds the role, 0 otherwise.",
		}, []string{"role", "member"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "krole_transitions_total",
			Help: "Transitions of this member per role: elected, or the revocation reason.",
		}, []string{"role", "transition"}),
		beat: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "krole_heartbeat_duration_seconds",
			Help:    "Latency of the member session's heartbeat rounds (one per round, whatever the roles held), from the round's start to the heartbeat's answer, by result: ok, late (committed after a vouched role's local deadline), fenced, unknown (no definite answer), error.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"result"}),
		rewrite: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "krole_lease_rewrite_duration_seconds",
			Help:    "Latency of lease rewrites (hourly per held role, or asked for by RewriteLease), call-slot wait included, by result: ok, fenced, retired (the token was retired), error.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"result"}),
		fencedTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "krole_fenced_total",
			Help: "Losses of the role to a later member: a write under this member's token refused (a lease, a release, work's), or its session's round found the role's token moved at the coordinator.",
		}, []string{"role"}),
		workFails: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "krole_work_failures_total",
			Help: "Runs of the member's work that returned an error while the role was held.",
		}, []string{"role"}),
		backoff: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "krole_campaign_backoff_seconds",
			Help: "The wait before campaigning again after the last failure of work; 0 once elected.",
		}, []string{"role"}),
		queue: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "krole_queued_roles",
			Help: "Roles this member is registered for but does not campaign for now: campaigns pause after a challenge timed out.",
		}, []string{"member"}),
	}
	var err error
	if m.holding, err = register(reg, m.holding); err != nil {
		return nil, err
	}
	if m.transitions, err = register(reg, m.transitions); err != nil {
		return nil, err
	}
	if m.beat, err = register(reg, m.beat); err != nil {
		return nil, err
	}
	if m.rewrite, err = register(reg, m.rewrite); err != nil {
		return nil, err
	}
	if m.fencedTotal, err = register(reg, m.fencedTotal); err != nil {
		return nil, err
	}
	if m.workFails, err = register(reg, m.workFails); err != nil {
		return nil, err
	}
	if m.backoff, err = register(reg, m.backoff); err != nil {
		return nil, err
	}

	if m.queue, err = register(reg, m.queue); err != nil {
		return nil, err
	}
	return m, nil
}

func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		return c, err
	}
	return c, nil
}

func (m *promMetrics) holder(role codec.Role, member codec.MemberID, holds bool) {
	v := 0.0
	if holds {
		v = 1
	}
	m.holding.WithLabelValues(string(role), string(member)).Set(v)
}

func (m *promMetrics) transition(role codec.Role, what string) {
	m.transitions.WithLabelValues(string(role), strings.ReplaceAll(what, " ", "_")).Inc()
}

func (m *promMetrics) heartbeat(d time.Duration, result string) {
	m.beat.WithLabelValues(result).Observe(d.Seconds())
}

func (m *promMetrics) leaseRewritten(d time.Duration, result string) {
	m.rewrite.WithLabelValues(result).Observe(d.Seconds())
}

func (m *promMetrics) fenced(role codec.Role) { m.fencedTotal.WithLabelValues(string(role)).Inc() }

func (m *promMetrics) workFailed(role codec.Role, backoff time.Duration) {
	m.workFails.WithLabelValues(string(role)).Inc()
	m.campaignBackoff(role, backoff)
}

func (m *promMetrics) campaignBackoff(role codec.Role, d time.Duration) {
	m.backoff.WithLabelValues(string(role)).Set(d.Seconds())
}

func (m *promMetrics) queued(member codec.MemberID, roles int) {
	m.queue.WithLabelValues(string(member)).Set(float64(roles))
}
