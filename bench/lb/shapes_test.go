// SPDX-License-Identifier: Apache-2.0

package main

import (
	"net/netip"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/swiftlane/swiftlane/internal/lb/labnet"
	"github.com/swiftlane/swiftlane/internal/lb/services"
)

// The comparison is only fair if every shape really serves the service:
// one request through each, ClusterIP and NodePort.
func TestShapesServe(t *testing.T) {
	labnet.RequireRoot(t)
	for _, v := range []string{"iptables", "nftables", "ipvs"} {
		t.Run(v, func(t *testing.T) { serveThrough(t, v, options{services: 1}, nil) })
	}
}

// With -services 200 every variant still serves the measured Service, and
// the iptables shape really is kube-proxy's for 200 Services.
func TestServicesServe(t *testing.T) {
	labnet.RequireRoot(t)
	const n = 200
	bin := filepath.Join(t.TempDir(), "swiftlane")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/swiftlane/swiftlane").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v: %s", err, out)
	}
	for _, v := range []string{"iptables", "nftables", "ipvs", "swiftlane"} {
		t.Run(v, func(t *testing.T) {
			var check func(*labnet.Topology)
			if v == "iptables" {
				check = func(topo *labnet.Topology) { checkKubeServices(t, topo, n) }
			}
			serveThrough(t, v, options{services: n, swiftlane: bin}, check)
		})
	}
}

// serveThrough sets variant v up on a new topology, asks the service once
// over ClusterIP and once over NodePort, runs check (if any) on the setup,
// tears it down and checks that nothing answers any more.
func serveThrough(t *testing.T, v string, o options, check func(*labnet.Topology)) {
	t.Helper()
	topo, err := labnet.New(2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { topo.Close() })
	for _, b := range topo.Backends {
		l, err := b.Listen(":8080")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		go serveShort(l)
	}
	if v == "ipvs" {
		if err := ipvsAvailable(topo); err != nil {
			t.Skip(err) // not in every kernel (this host's has none)
		}
	}
	b := &bench{o: o, topo: topo, tmp: t.TempDir()}
	done, err := b.setup(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := topo.Client.Do(func() error { return request("10.96.0.10:80") }); err != nil {
		t.Errorf("ClusterIP: %v", err)
	}
	if err := topo.External.Do(func() error { return request("198.18.0.1:30080") }); err != nil {
		t.Errorf("NodePort: %v", err)
	}
	if v != "swiftlane" {
		if n, _ := topo.Node.ConntrackCount(); n == 0 {
			t.Error("the kube-proxy shapes must be using conntrack")
		}
	}
	if check != nil {
		check(topo)
	}
	// The benchmark reuses one topology: a teardown must leave nothing
	// that still answers the service.
	done()
	if err := teardown(topo, v); err != nil {
		t.Fatal(err)
	}
	if err := topo.Client.Do(func() error { return request("10.96.0.10:80") }); err == nil {
		t.Fatal("ClusterIP still answers after teardown")
	}
}

// checkKubeServices reads the iptables shape back from the node: one
// KUBE-SVC chain per Service port (web has two), n ClusterIPs in
// KUBE-SERVICES with web's after half the dummies, and every NodePort in
// KUBE-NODEPORTS, reached by KUBE-SERVICES' last rule.
func checkKubeServices(t *testing.T, topo *labnet.Topology, n int) {
	t.Helper()
	out, err := topo.Node.Run("iptables-save", "-t", "nat")
	if err != nil {
		t.Fatal(err)
	}
	var svcChains, nodePorts int
	var dispatch []string // KUBE-SERVICES rules, in order
	for _, l := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(l, ":KUBE-SVC-"):
			svcChains++
		case strings.HasPrefix(l, "-A KUBE-SERVICES "):
			dispatch = append(dispatch, l)
		case strings.HasPrefix(l, "-A KUBE-NODEPORTS "):
			nodePorts++
		}
	}
	if want := n - 1 + len(webPorts); svcChains != want {
		t.Errorf("%d KUBE-SVC chains, want %d (%d dummies + web's %d ports)", svcChains, want, n-1, len(webPorts))
	}
	ips := map[string]bool{}
	webAt := -1
	for i, l := range dispatch {
		if f := strings.Fields(l); len(f) > 3 && f[2] == "-d" {
			ips[f[3]] = true
			if f[3] == clusterIP.String()+"/32" && webAt < 0 {
				webAt = i
			}
		}
	}
	if len(ips) != n {
		t.Errorf("KUBE-SERVICES matches %d ClusterIPs, want %d", len(ips), n)
	}
	if webAt != (n-1)/2 {
		t.Errorf("web's first rule is KUBE-SERVICES rule %d, want %d (after half the dummies)", webAt, (n-1)/2)
	}
	if last := dispatch[len(dispatch)-1]; !strings.HasSuffix(last, "-j KUBE-NODEPORTS") {
		t.Errorf("KUBE-SERVICES ends with %q, want the jump to KUBE-NODEPORTS", last)
	}
	if want := n - 1 + len(webPorts); nodePorts != want {
		t.Errorf("%d KUBE-NODEPORTS rules, want %d", nodePorts, want)
	}
}

// The dummies must not collide with each other, the measured Service or
// the topology, and swiftlane must accept the most -services allows.
func TestServicesDummies(t *testing.T) {
	ds := dummies(maxServices)
	if len(ds) != maxServices-1 {
		t.Fatalf("%d dummies, want %d", len(ds), maxServices-1)
	}
	// labnet's pods are 10.244.1-n.x, its external link 198.18.0.0/24, and
	// swiftlane's hairpin address 169.254.42.1.
	used := []netip.Prefix{netip.MustParsePrefix("10.244.0.0/17"), netip.MustParsePrefix("198.18.0.0/15"), netip.MustParsePrefix("169.254.0.0/16")}
	seen := map[netip.Addr]bool{clusterIP: true}
	ports := map[uint16]bool{}
	for _, p := range webPorts {
		ports[p.nodePort] = true
	}
	withNodePort := 0
	for _, d := range ds {
		for _, a := range append([]netip.Addr{d.clusterIP}, d.endpoints...) {
			if seen[a] || slices.ContainsFunc(used, func(p netip.Prefix) bool { return p.Contains(a) }) {
				t.Fatalf("dummy %d: address %v taken", d.id, a)
			}
			seen[a] = true
		}
		if d.nodePort != 0 {
			if ports[d.nodePort] || d.nodePort < nodePortMin || d.nodePort > nodePortMax {
				t.Fatalf("dummy %d: NodePort %d taken or out of range", d.id, d.nodePort)
			}
			ports[d.nodePort] = true
			withNodePort++
		}
	}
	if want := nodePortMax - nodePortMin + 1 - len(webPorts); withNodePort != want {
		t.Errorf("%d dummies have a NodePort, want %d (the whole range)", withNodePort, want)
	}
	topo := &labnet.Topology{NodeIP: netip.MustParseAddr("198.18.0.1"), BackendIPs: []netip.Addr{netip.MustParseAddr("10.244.2.2")}}
	cfg, err := services.Parse([]byte(swiftlaneConfig(topo, maxServices, defaultSessionsMax)))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Services) != maxServices {
		t.Errorf("swiftlane config has %d services, want %d", len(cfg.Services), maxServices)
	}
}
