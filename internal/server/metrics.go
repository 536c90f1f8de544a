package server

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/krabka/krole/view"
)

// The metrics of GET /metrics. The view's are read from [view.View.Stats]
// at scrape time, so they cannot drift from what the view counts:
//
//	krole_view_records_applied_total           records folded into the table since the view started
//	krole_view_records_skipped_total{reason}   records skipped, by reason (bad_key, bad_value, ...)
//	krole_view_lag_records{partition}          high watermark minus the next offset to read (an upper bound)
//	krole_view_caught_up                       1 once the view has caught up and while it runs, else 0
//	krole_view_healthy                         1 while the view is healthy (view.View.Health, as /healthz), else 0
//	krole_view_roles                           roles the table knows
//	krole_lookups_total{endpoint}              API requests served, by route (e.g. /v1/roles/{role})
//
// Every name starts with krole_; the Go runtime and process collectors are
// left to the embedding program's own registry.
var (
	descApplied = prometheus.NewDesc("krole_view_records_applied_total",
		"Records of the role topic folded into the view's table since the view started.", nil, nil)
	descSkipped = prometheus.NewDesc("krole_view_records_skipped_total",
		"Records of the role topic the view skipped, by reason.", []string{"reason"}, nil)
	descLag = prometheus.NewDesc("krole_view_lag_records",
		"High watermark minus the next offset the view reads, per partition: an upper bound of the records still to read (transaction markers count).",
		[]string{"partition"}, nil)
	descCaughtUp = prometheus.NewDesc("krole_view_caught_up",
		"1 once the view has caught up with the role topic and while it runs, else 0.", nil, nil)
	descHealthy = prometheus.NewDesc("krole_view_healthy",
		"1 while the view is healthy: a broker answered it and it was confirmed caught up within its bound (as /healthz), else 0.", nil, nil)
	descRoles = prometheus.NewDesc("krole_view_roles",
		"Roles the view's table knows (with a lease or a candidate).", nil, nil)
)

// statsSource is what the view collector reads.
type statsSource interface {
	Stats() view.Stats
	Health() view.Health
}

// viewCollector exports a view's Stats, read once per scrape.
type viewCollector struct{ t statsSource }

func (c viewCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descApplied, descSkipped, descLag, descCaughtUp, descHealthy, descRoles} {
		ch <- d
	}
}

func (c viewCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.t.Stats()
	ch <- prometheus.MustNewConstMetric(descApplied, prometheus.CounterValue, float64(st.Applied))
	for _, r := range view.SkipReasons {
		ch <- prometheus.MustNewConstMetric(descSkipped, prometheus.CounterValue, float64(st.Skipped[r]), string(r))
	}
	for _, p := range st.Partitions {
		ch <- prometheus.MustNewConstMetric(descLag, prometheus.GaugeValue, float64(p.Lag), strconv.Itoa(int(p.Partition)))
	}
	caught := 0.0
	if st.CaughtUp {
		caught = 1
	}
	ch <- prometheus.MustNewConstMetric(descCaughtUp, prometheus.GaugeValue, caught)
	healthy := 0.0
	if c.t.Health().Healthy {
		healthy = 1
	}
	ch <- prometheus.MustNewConstMetric(descHealthy, prometheus.GaugeValue, healthy)
	ch <- prometheus.MustNewConstMetric(descRoles, prometheus.GaugeValue, float64(st.Roles))
}

// newLookups returns krole_lookups_total, with a zero series for each
// endpoint so that a scrape shows every one before its first request.
func newLookups(endpoints []string) *prometheus.CounterVec {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "krole_lookups_total",
		Help: "Requests of the lookup API served, by endpoint (the route pattern).",
	}, []string{"endpoint"})
	for _, e := range endpoints {
		v.WithLabelValues(e)
	}
	return v
}
