// SPDX-License-Identifier: Apache-2.0

package balancer

import (
	"net/netip"
	"strings"
	"testing"

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
