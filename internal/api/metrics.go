// SPDX-License-Identifier: Apache-2.0

package api

import (
	"context"
	"math"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/swiftlane/swiftlane/internal/auth"
)

type serverMetrics struct {
	requests  *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	auditLost prometheus.Counter
}

func (s *Server) initMetrics() {
	s.reg = prometheus.NewRegistry()
	s.met.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "swiftlane_api_requests_total", Help: "API requests by operation and status code.",
	}, []string{"op", "code"})
	s.met.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "swiftlane_api_request_seconds", Help: "API request latency by operation.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 4, 9),
	}, []string{"op"})
	s.met.auditLost = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "swiftlane_api_audit_entries_lost_total", Help: "Audit entries the store refused: they are only in the server's log.",
	})
	s.reg.MustRegister(s.met.requests, s.met.latency, s.met.auditLost,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "swiftlane_api_watchers", Help: "Open strategy watch streams.",
		}, func() float64 { return float64(s.hub.count()) }),
		nodeCollector{s})
}

var (
	descUp       = prometheus.NewDesc("swiftlane_node_healthy", "1 if the node heartbeated within three periods.", []string{"node", "mode"}, nil)
	descRev      = prometheus.NewDesc("swiftlane_node_applied_revision", "Strategy revision the node has applied.", []string{"node"}, nil)
	descEnqueued = prometheus.NewDesc("swiftlane_node_enqueued_total", "Enqueues by class, as last reported by the node.", []string{"node", "class"}, nil)
	descWait     = prometheus.NewDesc("swiftlane_node_runqueue_wait_seconds", "Run-queue wait by class, as last reported by the node.", []string{"node", "class"}, nil)
	descUnmatch  = prometheus.NewDesc("swiftlane_node_strategies_unmatchable", "1 for each strategy that matches no process on the node, with the reason, as last reported by the node.",
		[]string{"node", "strategy", "reason"}, nil)
)

// nodeCollector exports the nodes' last heartbeats.
type nodeCollector struct{ s *Server }

func (nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descUp
	ch <- descRev
	ch <- descEnqueued
	ch <- descWait
	ch <- descUnmatch
}

func (c nodeCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	nodes, err := c.s.o.Store.ListNodes(ctx)
	if err != nil {
		return
	}
	now := time.Now()
	for _, n := range nodes {
		up := 0.0
		if n.IsHealthy(now) {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, up, n.Name, n.Mode)
		ch <- prometheus.MustNewConstMetric(descRev, prometheus.GaugeValue, float64(n.AppliedRevision), n.Name)
		// One series per strategy and reason: an agent listing one twice
		// must not fail the whole scrape (a duplicate series is an error).
		seen := map[[2]string]bool{}
		for _, u := range n.Unmatchable {
			if k := [2]string{u.Strategy, u.Reason}; !seen[k] {
				seen[k] = true
				ch <- prometheus.MustNewConstMetric(descUnmatch, prometheus.GaugeValue, 1, n.Name, u.Strategy, u.Reason)
			}
		}
		if n.Counters == nil {
			continue
		}
		for class, v := range n.Counters.Enqueued {
			ch <- prometheus.MustNewConstMetric(descEnqueued, prometheus.CounterValue, float64(v), n.Name, class)
		}
		for class, h := range n.Counters.RunqueueWait {
			buckets := map[float64]uint64{}
			var cum uint64
			for i, v := range h.Buckets {
				cum += v
				buckets[math.Ldexp(1, i)*1e-6] = cum
			}
			ch <- prometheus.MustNewConstHistogram(descWait, h.Count, float64(h.SumNs)/1e9, buckets, n.Name, class)
		}
	}
}

func (s *Server) prometheus(w http.ResponseWriter, r *http.Request, _ *auth.Claims) error {
	promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}).ServeHTTP(w, r)
	return nil
}
