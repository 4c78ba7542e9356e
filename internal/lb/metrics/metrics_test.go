// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/swiftlane/swiftlane/internal/lb/bpf"
)

type fake struct{}

func (fake) Stats() (bpf.Stats, error) {
	return bpf.Stats{FwdPackets: 10, ReplyPackets: 9, Drops: map[string]uint64{"no_port": 2},
		PortTries: [bpf.SNATTries]uint64{3, 1}, AffinityHits: 5, NeighRedirects: 1,
		HostConnects: 7, HostDatagrams: 3, HostRefused: 1}, nil
}
func (fake) LiveSessions() int { return 4 }
func (fake) Attached() int     { return 2 }

func TestCollectorExposesStats(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewCollector(fake{}))
	want := `
# HELP swiftlane_lb_drops_total Packets dropped, by reason.
# TYPE swiftlane_lb_drops_total counter
swiftlane_lb_drops_total{reason="fib"} 0
swiftlane_lb_drops_total{reason="frag"} 0
swiftlane_lb_drops_total{reason="no_backend"} 0
swiftlane_lb_drops_total{reason="no_port"} 2
swiftlane_lb_drops_total{reason="session_map"} 0
swiftlane_lb_drops_total{reason="source_range"} 0
# HELP swiftlane_lb_sessions Live connections (forward+reply session pairs) at the last sweep.
# TYPE swiftlane_lb_sessions gauge
swiftlane_lb_sessions 4
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "swiftlane_lb_drops_total", "swiftlane_lb_sessions"); err != nil {
		t.Fatal(err)
	}
	more := `
# HELP swiftlane_lb_affinity_hits_total New connections sent to the backend the client's ClientIP affinity remembers.
# TYPE swiftlane_lb_affinity_hits_total counter
swiftlane_lb_affinity_hits_total 5
# HELP swiftlane_lb_neighbour_misses_total Translated packets forwarded with bpf_redirect_neigh because the node had no neighbour entry yet (backends' are resolved ahead).
# TYPE swiftlane_lb_neighbour_misses_total counter
swiftlane_lb_neighbour_misses_total 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(more), "swiftlane_lb_affinity_hits_total", "swiftlane_lb_neighbour_misses_total"); err != nil {
		t.Fatal(err)
	}
	host := `
# HELP swiftlane_lb_host_refused_total The node's own connects and datagrams to a frontend refused (no backend, or its source ranges keep the node out).
# TYPE swiftlane_lb_host_refused_total counter
swiftlane_lb_host_refused_total 1
# HELP swiftlane_lb_host_translations_total The node's own sockets sent to a backend instead of a frontend, by call (connect: TCP and connected UDP; sendmsg: unconnected UDP datagrams).
# TYPE swiftlane_lb_host_translations_total counter
swiftlane_lb_host_translations_total{call="connect"} 7
swiftlane_lb_host_translations_total{call="sendmsg"} 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(host), "swiftlane_lb_host_translations_total", "swiftlane_lb_host_refused_total"); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg, "swiftlane_lb_snat_port_tries"); err != nil || n != 1 {
		t.Fatalf("tries histogram count %d err %v", n, err)
	}
}
