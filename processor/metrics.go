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
	renewed(role codec.Role, d time.Duration, result string)
	fenced(role codec.Role)
}

type noMetrics struct{}

func (noMetrics) holder(codec.Role, codec.MemberID, bool)   {}
func (noMetrics) transition(codec.Role, string)             {}
func (noMetrics) renewed(codec.Role, time.Duration, string) {}
func (noMetrics) fenced(codec.Role)                         {}

// promMetrics are the Prometheus collectors of a Member:
//
//	krole_holder{role,member}                  1 while this member holds role, else 0
//	krole_transitions_total{role,transition}   elected, fenced, lease_lost, resigned, context_ended, work_failed
//	krole_renew_duration_seconds{role,result}  latency of renewals; result ok, fenced or error
//	krole_fenced_total{role}                   writes refused because a later member holds role
type promMetrics struct {
	holding     *prometheus.GaugeVec
	transitions *prometheus.CounterVec
	renew       *prometheus.HistogramVec
	fencedTotal *prometheus.CounterVec
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
		renew: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "krole_renew_duration_seconds",
			Help:    "Latency of lease renewals by result (ok, fenced, error).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"role", "result"}),
		fencedTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "krole_fenced_total",
			Help: "Lease writes of this member refused because a later member holds the role.",
		}, []string{"role"}),
	}
	var err error
	if m.holding, err = register(reg, m.holding); err != nil {
		return nil, err
	}
	if m.transitions, err = register(reg, m.transitions); err != nil {
		return nil, err
	}
	if m.renew, err = register(reg, m.renew); err != nil {
		return nil, err
	}
	if m.fencedTotal, err = register(reg, m.fencedTotal); err != nil {
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

func (m *promMetrics) renewed(role codec.Role, d time.Duration, result string) {
	m.renew.WithLabelValues(string(role), result).Observe(d.Seconds())
}

func (m *promMetrics) fenced(role codec.Role) { m.fencedTotal.WithLabelValues(string(role)).Inc() }
