// SPDX-License-Identifier: Apache-2.0

package noderuntime

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/swiftlane/swiftlane/internal/applier"
)

// collectorSlot lets the metrics endpoint outlive scheduler reloads: it
// serves whichever scheduler is loaded now, or nothing between loads. A
// scrape holds the read lock while it collects, so set returns only once
// no scrape still reads what the old collector reads (maps about to close).
type collectorSlot struct {
	mu sync.RWMutex
	c  prometheus.Collector
}

func (s *collectorSlot) set(c prometheus.Collector) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.c = c
}

func (s *collectorSlot) Describe(chan<- *prometheus.Desc) {} // unchecked collector

func (s *collectorSlot) Collect(ch chan<- prometheus.Metric) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.c != nil {
		s.c.Collect(ch)
	}
}

// endpoint is what the node's HTTP server reports: the loaded scheduler's
// metrics and whether the node is ready (the scheduler attached, or an
// agent observing).
type endpoint struct {
	slot  collectorSlot
	auto  collectorSlot // automatic mode's carriers, from its start on
	ready atomic.Bool
	// applier: the node's, once made (observe mode and between scheduler
	// loads too), for what no scheduler's counters say.
	applier atomic.Pointer[applier.Applier]
}

// Describe: unchecked, like collectorSlot.
func (e *endpoint) Describe(chan<- *prometheus.Desc) {}

// Collect exports the strategies that match nothing here, so a strategy
// that silently protects nothing shows in swiftlane stats and alerts.
func (e *endpoint) Collect(ch chan<- prometheus.Metric) {
	if a := e.applier.Load(); a != nil {
		collectUnmatchable(ch, a)
	}
}

// serve serves the endpoint's /metrics, /healthz (the process answers) and
// /readyz on addr, and with profiling Go's profiles under /debug/pprof/. It
// prints the address it listens on to out, also in the server's Addr
// (useful with port 0).
func (e *endpoint) serve(addr string, profiling bool, out io.Writer) (*http.Server, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(&e.slot, &e.auto, e)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr %s: %w (pick another address, or pass --metrics-addr='' to turn it off)", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !e.ready.Load() {
			http.Error(w, "scheduler not attached", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	if profiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	srv := &http.Server{Addr: ln.Addr().String(), Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	fmt.Fprintf(out, "swiftlane: metrics on http://%s/metrics\n", srv.Addr)
	return srv, nil
}
