package runner

import (
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// ServeMetrics serves a registry of its own at http://addr/metrics, for the
// member to register its metrics in, and returns the address it listens
// on. An empty addr serves nothing and returns a nil registerer (no
// metrics) and an empty address.
func ServeMetrics(addr string) (prometheus.Registerer, string, func(), error) {
	if addr == "" {
		return nil, "", func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", nil, fmt.Errorf("--metrics-listen: cannot listen on %s: %w", addr, err)
	}
	reg := prometheus.NewRegistry()
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln) // returns when srv is closed
	}()
	return reg, ln.Addr().String(), func() { _ = srv.Close(); <-done }, nil
}
