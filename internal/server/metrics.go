package server

import (
	"context"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/krabka/krole/rolestate"
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
//	krole_roles{state}                         roles by state, judged at scrape time as the rows are (NewRow):
//	                                           held (a live holder), dead (candidates, all gone, and no live holder),
//	                                           unheld (any other)
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
	descRoleStates = prometheus.NewDesc("krole_roles",
		"Roles by state as the rows judge them at scrape time: held (a live holder), dead (candidates, all gone, and no live holder), unheld (any other).",
		[]string{"state"}, nil)
)

// roleStatesWait bounds the snapshot a scrape reads for krole_roles.
const roleStatesWait = 2 * time.Second

// statsSource is what the view collector reads.
type statsSource interface {
	Stats() view.Stats
	Health() view.Health
	Snapshot(ctx context.Context) ([]rolestate.State, error)
}

// viewCollector exports a view's Stats, read once per scrape, and the
// roles by state, judged at the scrape on this machine's clock.
type viewCollector struct{ t statsSource }

func (c viewCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descApplied, descSkipped, descLag, descCaughtUp, descHealthy, descRoles, descRoleStates} {
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
	if !st.CaughtUp {
		return // a snapshot would wait for the catch-up
	}
	ctx, cancel := context.WithTimeout(context.Background(), roleStatesWait)
	defer cancel()
	states, err := c.t.Snapshot(ctx)
	if err != nil {
		return
	}
	counts := map[string]float64{"held": 0, "unheld": 0, "dead": 0}
	now := time.Now()
	for _, rs := range states {
		r := NewRow(rs, now)
		switch {
		case r.Holder != nil && !r.Holder.Expired:
			counts["held"]++
		case r.Dead:
			counts["dead"]++
		default:
			counts["unheld"]++
		}
	}
	for _, state := range []string{"held", "unheld", "dead"} {
		ch <- prometheus.MustNewConstMetric(descRoleStates, prometheus.GaugeValue, counts[state], state)
	}
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
