// SPDX-License-Identifier: Apache-2.0

package balancer

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/swiftlane/swiftlane/internal/lb/bpf"
	"github.com/swiftlane/swiftlane/internal/lb/labnet"
	"github.com/swiftlane/swiftlane/internal/lb/services"
)

const cfgYAML = `
nodeAddresses: [198.18.0.1]
interfaces: [none]
services:
  - name: web
    clusterIP: 10.96.0.10
    ports: [{port: 80, targetPort: 8080, nodePort: 30080}]
    endpoints: [{address: 10.244.2.2}, {address: 10.244.3.2}]
  - name: dns
    clusterIP: 10.96.0.53
    ports: [{port: 53, protocol: UDP}]
    endpoints: [{address: 10.244.4.2}]
`

func TestApplyIsIncremental(t *testing.T) {
	labnet.RequireRoot(t)
	cfg, err := services.Parse([]byte(cfgYAML))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Open(cfg, Options{noRedirect: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	again, _ := services.Parse([]byte(cfgYAML))
	if ch, err := b.Apply(again); err != nil || ch != (Changes{}) {
		t.Fatalf("re-applying the same config changed %v (err %v)", ch, err)
	}

	// Mark one web endpoint terminating: both web frontends (ClusterIP and
	// NodePort) lose it from their slots, dns is untouched, and the backend
	// stays so its connections drain.
	again.Services[0].Endpoints[1].Terminating = true
	ch, err := b.Apply(again)
	if err != nil || ch != (Changes{ServicesPut: 2}) {
		t.Fatalf("terminating endpoint: %v (err %v), want 2 frontends rewritten only", ch, err)
	}
	// Remove it: only the backend entry goes.
	again.Services[0].Endpoints = again.Services[0].Endpoints[:1]
	if ch, err := b.Apply(again); err != nil || ch != (Changes{BackendsDeleted: 1}) {
		t.Fatalf("removed endpoint: %v (err %v)", ch, err)
	}
	// Drop the dns service.
	again.Services = again.Services[:1]
	if ch, err := b.Apply(again); err != nil || ch != (Changes{ServicesDeleted: 1, BackendsDeleted: 1}) {
		t.Fatalf("removed service: %v (err %v)", ch, err)
	}
	if _, ok := b.backendIDs[netip.MustParseAddrPort("10.244.2.2:8080")]; !ok {
		t.Fatal("remaining backend lost")
	}
}

func TestApplyMaglevSelection(t *testing.T) {
	labnet.RequireRoot(t)
	cfg, err := services.Parse([]byte(cfgYAML))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Open(cfg, Options{noRedirect: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	webIP := netip.MustParseAddr("10.96.0.10")
	webSlots := func() []uint32 {
		for fe, st := range b.programmed {
			if fe.Addr == webIP {
				return st.slots
			}
		}
		t.Fatal("web frontend not programmed")
		return nil
	}

	// Switching web to Maglev rewrites its two frontends (ClusterIP and
	// NodePort) with a full table; dns stays as it is.
	again, _ := services.Parse([]byte(cfgYAML))
	again.Services[0].Selection = services.SelectionMaglev
	if ch, err := b.Apply(again); err != nil || ch != (Changes{ServicesPut: 2}) {
		t.Fatalf("switch to maglev: %v (err %v), want 2 frontends rewritten", ch, err)
	}
	table := webSlots()
	if len(table) != MaglevTableSize {
		t.Fatalf("maglev frontend has %d slots, want %d", len(table), MaglevTableSize)
	}
	// The endpoints' order in the config does not change the table.
	eps := again.Services[0].Endpoints
	eps[0], eps[1] = eps[1], eps[0]
	if ch, err := b.Apply(again); err != nil || ch != (Changes{}) {
		t.Fatalf("reordered endpoints changed %v (err %v)", ch, err)
	}
	// And back: one slot per backend again.
	again.Services[0].Selection = services.SelectionRandom
	if ch, err := b.Apply(again); err != nil || ch != (Changes{ServicesPut: 2}) {
		t.Fatalf("switch back to random: %v (err %v)", ch, err)
	}
	if n := len(webSlots()); n != 2 {
		t.Fatalf("random frontend has %d slots, want 2", n)
	}
}

// A reload that brings IPv6 Services to a balancer loaded without IPv6 is
// refused whole, naming the setting, instead of failing half applied.
func TestApplyRefusesIPv6WithoutTheNodeSetting(t *testing.T) {
	labnet.RequireRoot(t)
	cfg, err := services.Parse([]byte(cfgYAML))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Open(cfg, Options{noRedirect: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	next, err := services.Parse([]byte("ipv6: true\n" + cfgYAML + `  - name: v6
    clusterIP: "fd00:96::10"
    ports: [{port: 80}]
    endpoints: [{address: "fd00:244:2::2"}]
`))
	if err != nil {
		t.Fatal(err)
	}
	ch, err := b.Apply(next)
	if err == nil || !strings.Contains(err.Error(), "IPv6 needs ipv6: true in the node settings") || ch != (Changes{}) {
		t.Fatalf("Apply = %v, %v; want a refusal naming the setting and no change", ch, err)
	}
}

// With no ready endpoint, the terminating ones take new connections rather
// than none (kube-proxy's fallback), cluster-wide as for a Local policy.
func TestDesiredTerminatingFallback(t *testing.T) {
	cfg, err := services.Parse([]byte(cfgYAML))
	if err != nil {
		t.Fatal(err)
	}
	for i := range cfg.Services[0].Endpoints {
		cfg.Services[0].Endpoints[i].Terminating = true
	}
	fes, _ := desired(cfg)
	w := fes[bpf.Frontend{Addr: netip.MustParseAddr("10.96.0.10"), Port: 80, Proto: bpf.TCP}]
	if len(w.ready) != 2 {
		t.Fatalf("all endpoints terminating: %d take new connections, want both", len(w.ready))
	}
	cfg.Services[0].Endpoints[0].Terminating = false
	fes, _ = desired(cfg)
	w = fes[bpf.Frontend{Addr: netip.MustParseAddr("10.96.0.10"), Port: 80, Proto: bpf.TCP}]
	if len(w.ready) != 1 || w.ready[0].Addr() != cfg.Services[0].Endpoints[0].Address {
		t.Fatalf("one endpoint ready: %v take new connections, want only it", w.ready)
	}
}

// loadBalancerSourceRanges guard the load-balancer IPs of their family
// only, as kube-proxy's firewall chain does: not the cluster IP, the
// NodePort or the external IPs. A family without ranges admits nobody; a
// range holding a node address admits the load-balancer IP itself.
func TestDesiredSourceRanges(t *testing.T) {
	cfg, err := services.Parse([]byte(`
ipv6: true
nodeAddresses: [198.18.0.1, "fd00:18::1"]
interfaces: [none]
services:
  - name: lb
    clusterIP: 10.96.0.10
    externalIPs: [203.0.113.9]
    loadBalancerIPs: [203.0.113.10, "fd00:113::10"]
    loadBalancerSourceRanges: [192.0.2.0/24, 198.18.0.0/16, 192.0.2.7/24]
    ports: [{port: 80, nodePort: 30080}]
    endpoints: [{address: 10.244.2.2}]
  - name: open
    clusterIP: 10.96.0.11
    loadBalancerIPs: [203.0.113.11]
    ports: [{port: 80}]
    endpoints: [{address: 10.244.2.2}]
`))
	if err != nil {
		t.Fatal(err)
	}
	fes, _ := desired(cfg)
	fe := func(a string) want {
		w, ok := fes[bpf.Frontend{Addr: netip.MustParseAddr(a), Port: 80, Proto: bpf.TCP}]
		if !ok {
			w, ok = fes[bpf.Frontend{Addr: netip.MustParseAddr(a), Port: 30080, Proto: bpf.TCP}]
		}
		if !ok {
			t.Fatalf("no frontend on %s", a)
		}
		return w
	}
	lb := fe("203.0.113.10")
	wantRanges := []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("198.18.0.0/16"), netip.MustParsePrefix("203.0.113.10/32")}
	if !lb.restricted || !samePrefixes(lb.ranges, wantRanges) || len(lb.ranges) != len(wantRanges) {
		t.Fatalf("load-balancer IP: restricted %v to %v, want %v (the node's range admits the IP itself)", lb.restricted, lb.ranges, wantRanges)
	}
	if lb6 := fe("fd00:113::10"); !lb6.restricted || len(lb6.ranges) != 0 {
		t.Fatalf("IPv6 load-balancer IP with only IPv4 ranges: restricted %v to %v, want closed to everyone", lb6.restricted, lb6.ranges)
	}
	for _, a := range []string{"10.96.0.10", "203.0.113.9", "198.18.0.1", "203.0.113.11"} {
		if w := fe(a); w.restricted {
			t.Errorf("%s restricted to %v; only load-balancer IPs of a Service with ranges are", a, w.ranges)
		}
	}
	// The flag reaches the map entry.
	b := &Balancer{backendIDs: map[netip.AddrPort]uint32{}}
	if flags, _ := b.slots(lb); flags&bpf.FlagSourceRanges == 0 {
		t.Fatalf("flags %#x lack FlagSourceRanges", flags)
	}
}
