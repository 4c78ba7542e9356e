// SPDX-License-Identifier: Apache-2.0

// Package metrics exports the load balancer's datapath counters to
// Prometheus. Every metric is defined here once, read from the maps at
// scrape time, so there is no second copy of the counters to keep in sync.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/swiftlane/swiftlane/internal/lb/bpf"
)

// Source is what the collector reads; *balancer.Balancer implements it.
type Source interface {
	Stats() (bpf.Stats, error)
	LiveSessions() int
	Attached() int
}

const ns = "swiftlane_lb_"

var (
	packetsDesc    = prometheus.NewDesc(ns+"packets_total", "Packets translated, by direction (forward: client to backend; reply: backend to client).", []string{"direction"}, nil)
	icmpDesc       = prometheus.NewDesc(ns+"icmp_errors_translated_total", "ICMP errors about a session rewritten for the original sender.", nil, nil)
	fragDesc       = prometheus.NewDesc(ns+"fragments_translated_total", "Non-first IPv4 fragments translated via their first fragment's ports.", nil, nil)
	sessionsDesc   = prometheus.NewDesc(ns+"sessions", "Live connections (forward+reply session pairs) at the last sweep.", nil, nil)
	createdDesc    = prometheus.NewDesc(ns+"sessions_created_total", "Connections given a backend.", nil, nil)
	allocDesc      = prometheus.NewDesc(ns+"snat_allocations_total", "Source ports allocated for SNAT (NodePort, hairpin, reply-tuple clashes).", nil, nil)
	triesDesc      = prometheus.NewDesc(ns+"snat_port_tries", "Tries per SNAT port allocation that succeeded (at most 16 per allocation); failures are in drops_total{reason=\"no_port\"}.", nil, nil)
	staleDesc      = prometheus.NewDesc(ns+"stale_backend_sessions_total", "Sessions moved to another backend because theirs was removed.", nil, nil)
	neighDesc      = prometheus.NewDesc(ns+"neighbour_misses_total", "Translated packets forwarded with bpf_redirect_neigh because the node had no neighbour entry yet (backends' are resolved ahead).", nil, nil)
	affinityDesc   = prometheus.NewDesc(ns+"affinity_hits_total", "New connections sent to the backend the client's ClientIP affinity remembers.", nil, nil)
	passedDesc     = prometheus.NewDesc(ns+"passed_to_stack_total", "Translated packets handed to the kernel stack instead of redirected (local destination, TTL expiry).", nil, nil)
	dropsDesc      = prometheus.NewDesc(ns+"drops_total", "Packets dropped, by reason.", []string{"reason"}, nil)
	hostDesc       = prometheus.NewDesc(ns+"host_translations_total", "The node's own sockets sent to a backend instead of a frontend, by call (connect: TCP and connected UDP; sendmsg: unconnected UDP datagrams).", []string{"call"}, nil)
	hostRefDesc    = prometheus.NewDesc(ns+"host_refused_total", "The node's own connects and datagrams to a frontend refused (no backend, or its source ranges keep the node out).", nil, nil)
	attachedDesc   = prometheus.NewDesc(ns+"attached_interfaces", "Interfaces the tc program is attached to.", nil, nil)
	scrapeErrsDesc = prometheus.NewDesc(ns+"scrape_errors", "1 if reading the datapath counters failed in this scrape.", nil, nil)
)

type collector struct{ src Source }

// NewCollector returns a collector for src.
func NewCollector(src Source) prometheus.Collector { return collector{src} }

func (collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{packetsDesc, icmpDesc, fragDesc, sessionsDesc, createdDesc, allocDesc,
		triesDesc, staleDesc, affinityDesc, neighDesc, passedDesc, dropsDesc, hostDesc, hostRefDesc, attachedDesc, scrapeErrsDesc} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	counter := func(d *prometheus.Desc, v uint64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), l...)
	}
	gauge(sessionsDesc, float64(c.src.LiveSessions()))
	gauge(attachedDesc, float64(c.src.Attached()))
	st, err := c.src.Stats()
	if err != nil {
		gauge(scrapeErrsDesc, 1)
		return
	}
	gauge(scrapeErrsDesc, 0)
	counter(packetsDesc, st.FwdPackets, "forward")
	counter(packetsDesc, st.ReplyPackets, "reply")
	counter(icmpDesc, st.ICMPTranslated)
	counter(fragDesc, st.FragTranslated)
	counter(createdDesc, st.SessionsCreated)
	counter(allocDesc, st.SNATAllocation)
	counter(staleDesc, st.StaleBackend)
	counter(affinityDesc, st.AffinityHits)
	counter(neighDesc, st.NeighRedirects)
	counter(passedDesc, st.PassedToStack)
	for _, r := range bpf.DropReasons {
		counter(dropsDesc, st.Drops[r], r)
	}
	counter(hostDesc, st.HostConnects, "connect")
	counter(hostDesc, st.HostDatagrams, "sendmsg")
	counter(hostRefDesc, st.HostRefused)
	// The kernel keeps exact per-try counts, which map onto a histogram
	// with one bucket per try.
	buckets := map[float64]uint64{}
	var n, sum uint64
	for i, v := range st.PortTries {
		n += v
		sum += uint64(i+1) * v
		buckets[float64(i+1)] = n
	}
	ch <- prometheus.MustNewConstHistogram(triesDesc, n, float64(sum), buckets)
}
