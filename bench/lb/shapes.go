// SPDX-License-Identifier: Apache-2.0

package main

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"

	"github.com/swiftlane/swiftlane/internal/lb/labnet"
)

// svcPort is one service port of the benchmarked service "web".
type svcPort struct {
	port, target, nodePort uint16
}

var (
	clusterIP = netip.MustParseAddr("10.96.0.10")
	podCIDR   = "10.244.0.0/16"
	webPorts  = []svcPort{{80, 8080, 30080}, {5001, 8081, 30501}}
)

// The -services dummies' addresses. ClusterIPs from 10.100.0.1 on: inside
// kube's default service range (10.96.0.0/12), away from web's 10.96.0.10.
// Endpoints from 10.244.128.1 on: pod addresses, but in half of the pod
// range that labnet never uses (its pods are 10.244.1-n.2), and unrouted in
// the node, so nothing ever reaches them.
var (
	dummyClusterIPs = netip.MustParseAddr("10.100.0.0")
	dummyEndpoints  = netip.MustParseAddr("10.244.128.0")
)

const (
	// dummyEndpointCount is the endpoints per dummy Service, each dummy's
	// one TCP port dummyPort going to dummyTarget on them.
	dummyEndpointCount     = 3
	dummyPort, dummyTarget = 80, 8080
	// maxServices bounds -services: dummy endpoints fill 10.244.128.0/17
	// at ~10,900 Services, and swiftlane's services map (16,384 frontends,
	// one per ClusterIP port and one per NodePort) at ~13,600.
	maxServices = 10000
	// The default NodePort range (kube-apiserver's and swiftlane's): dummies
	// get NodePorts from it until it is full, as a cluster's would.
	nodePortMin, nodePortMax = 30000, 32767
)

// dummy is one of the Services -services adds beside "web": one TCP port
// (80 -> 8080) with endpoints that exist nowhere, and a NodePort while the
// range has one free (0 after that).
type dummy struct {
	id        int
	clusterIP netip.Addr
	nodePort  uint16
	endpoints []netip.Addr
}

// dummies are the n-1 extra Services of -services n, the same in every
// variant.
func dummies(n int) []dummy {
	taken := map[uint16]bool{}
	for _, p := range webPorts {
		taken[p.nodePort] = true
	}
	next := uint16(nodePortMin)
	var ds []dummy
	for i := range n - 1 {
		d := dummy{id: i + 1, clusterIP: addrAdd(dummyClusterIPs, i+1)}
		for next <= nodePortMax && taken[next] {
			next++
		}
		if next <= nodePortMax {
			d.nodePort = next
			next++
		}
		for j := range dummyEndpointCount {
			d.endpoints = append(d.endpoints, addrAdd(dummyEndpoints, i*dummyEndpointCount+j+1))
		}
		ds = append(ds, d)
	}
	return ds
}

func addrAdd(a netip.Addr, k int) netip.Addr {
	b := a.As4()
	var out [4]byte
	binary.BigEndian.PutUint32(out[:], binary.BigEndian.Uint32(b[:])+uint32(k))
	return netip.AddrFrom4(out)
}

// kubeSvc is one Service port as kube-proxy programs it.
type kubeSvc struct {
	name             string // names the chains: KUBE-SVC-<NAME>, service-<name>
	clusterIP        netip.Addr
	port, target, np uint16 // np: NodePort, 0 for none
	endpoints        []netip.Addr
}

// kubeServices lists web's ports and the dummies in KUBE-SERVICES order.
// kube-proxy writes Services in Go map order, so the measured one can land
// anywhere in that linear walk: it goes after half the dummies, the
// expectation (last would be the worst case). Only iptables walks them in
// order; the other shapes hash.
func kubeServices(topo *labnet.Topology, n int) []kubeSvc {
	ds := dummies(n)
	var out []kubeSvc
	add := func(ds []dummy) {
		for _, d := range ds {
			out = append(out, kubeSvc{fmt.Sprintf("dummy-%d", d.id), d.clusterIP, dummyPort, dummyTarget, d.nodePort, d.endpoints})
		}
	}
	add(ds[:len(ds)/2])
	for _, p := range webPorts {
		out = append(out, kubeSvc{fmt.Sprintf("web-%d", p.port), clusterIP, p.port, p.target, p.nodePort, topo.BackendIPs})
	}
	add(ds[len(ds)/2:])
	return out
}

// iptablesRules is the kube-proxy iptables-mode shape: a KUBE-SERVICES
// dispatch, a per-service chain choosing an endpoint with the statistic
// match, DNAT per endpoint, and MASQUERADE for marked traffic (off-cluster
// sources and NodePorts). Conntrack is what makes it work. KUBE-SERVICES
// is walked rule by rule for every new connection: its length is what
// -services scales.
//
// NodePorts: with one Service they are matched by the node's address in
// KUBE-SERVICES, as in every run before -services (kept so those results
// stay comparable). With more, they go where kube-proxy puts them, in
// KUBE-NODEPORTS behind the last rule of KUBE-SERVICES (destination local),
// so a NodePort connection first walks every ClusterIP rule.
func iptablesRules(topo *labnet.Topology, n int) []string {
	r := []string{
		"-N KUBE-SERVICES", "-N KUBE-MARK-MASQ", "-N KUBE-POSTROUTING",
		"-A PREROUTING -j KUBE-SERVICES", "-A OUTPUT -j KUBE-SERVICES",
		"-A POSTROUTING -j KUBE-POSTROUTING",
		"-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000",
		"-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN",
		"-A KUBE-POSTROUTING -j MARK --xor-mark 0x4000",
		"-A KUBE-POSTROUTING -j MASQUERADE --random-fully",
	}
	nodePortsChain := n > 1
	var nodePorts []string
	for _, s := range kubeServices(topo, n) {
		id := strings.ToUpper(s.name)
		svc, ext := "KUBE-SVC-"+id, "KUBE-EXT-"+id
		r = append(r, "-N "+svc,
			fmt.Sprintf("-A KUBE-SERVICES -d %s/32 -p tcp --dport %d -j %s", s.clusterIP, s.port, svc))
		if s.np != 0 {
			r = append(r, "-N "+ext)
			if nodePortsChain {
				nodePorts = append(nodePorts, fmt.Sprintf("-A KUBE-NODEPORTS -p tcp --dport %d -j %s", s.np, ext))
			} else {
				r = append(r, fmt.Sprintf("-A KUBE-SERVICES -d %s/32 -p tcp --dport %d -j %s", topo.NodeIP, s.np, ext))
			}
			r = append(r, fmt.Sprintf("-A %s -j KUBE-MARK-MASQ", ext), fmt.Sprintf("-A %s -j %s", ext, svc))
		}
		r = append(r, fmt.Sprintf("-A %s ! -s %s -d %s/32 -p tcp --dport %d -j KUBE-MARK-MASQ", svc, podCIDR, s.clusterIP, s.port))
		for i, b := range s.endpoints {
			sep := fmt.Sprintf("KUBE-SEP-%s-%d", id, i)
			r = append(r, "-N "+sep,
				fmt.Sprintf("-A %s -s %s/32 -j KUBE-MARK-MASQ", sep, b),
				fmt.Sprintf("-A %s -p tcp -j DNAT --to-destination %s:%d", sep, b, s.target))
			if k := len(s.endpoints) - i; k > 1 {
				r = append(r, fmt.Sprintf("-A %s -m statistic --mode random --probability %.5f -j %s", svc, 1/float64(k), sep))
			} else {
				r = append(r, fmt.Sprintf("-A %s -j %s", svc, sep))
			}
		}
	}
	if nodePortsChain {
		r = append(r, "-N KUBE-NODEPORTS", "-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS")
		r = append(r, nodePorts...)
	}
	return r
}

// iptablesRestore is rules as one iptables-restore batch for the nat table,
// as kube-proxy applies them: thousands of iptables calls would take
// minutes. Rules keep their order within each chain.
func iptablesRestore(rules []string) string {
	var chains, appends strings.Builder
	for _, l := range rules {
		if name, ok := strings.CutPrefix(l, "-N "); ok {
			fmt.Fprintf(&chains, ":%s - [0:0]\n", name)
		} else {
			fmt.Fprintln(&appends, l)
		}
	}
	return "*nat\n" + chains.String() + appends.String() + "COMMIT\n"
}

func applyIptables(topo *labnet.Topology, n int) error {
	_, err := topo.Node.RunInput(iptablesRestore(iptablesRules(topo, n)), "iptables-restore", "-w", "--noflush")
	return err
}

// nftRules is the kube-proxy nftables-mode shape: one verdict map from
// address . protocol . port to a service chain, numgen to pick an endpoint,
// dnat per endpoint, masquerade by mark. More Services are more map
// elements: one hash lookup whatever their number.
func nftRules(topo *labnet.Topology, n int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "table ip kube-proxy {\n")
	fmt.Fprintf(&b, "  chain mark-for-masquerade { meta mark set meta mark | 0x4000; }\n")
	fmt.Fprintf(&b, "  chain masquerading { type nat hook postrouting priority 100; meta mark & 0x4000 == 0 return; meta mark set meta mark ^ 0x4000; masquerade fully-random; }\n")
	var elems []string
	for _, s := range kubeServices(topo, n) {
		var vmap []string
		for i, be := range s.endpoints {
			fmt.Fprintf(&b, "  chain endpoint-%s-%d { ip saddr %s jump mark-for-masquerade; meta l4proto tcp dnat to %s:%d; }\n", s.name, i, be, be, s.target)
			vmap = append(vmap, fmt.Sprintf("%d : goto endpoint-%s-%d", i, s.name, i))
		}
		fmt.Fprintf(&b, "  chain service-%s { ip daddr %s tcp dport %d ip saddr != %s jump mark-for-masquerade; numgen random mod %d vmap { %s }; }\n",
			s.name, s.clusterIP, s.port, podCIDR, len(s.endpoints), strings.Join(vmap, ", "))
		elems = append(elems, fmt.Sprintf("%s . tcp . %d : goto service-%s", s.clusterIP, s.port, s.name))
		if s.np != 0 {
			fmt.Fprintf(&b, "  chain external-%s { jump mark-for-masquerade; goto service-%s; }\n", s.name, s.name)
			elems = append(elems, fmt.Sprintf("%s . tcp . %d : goto external-%s", topo.NodeIP, s.np, s.name))
		}
	}
	fmt.Fprintf(&b, "  map service-ips { type ipv4_addr . inet_proto . inet_service : verdict; elements = { %s } }\n", strings.Join(elems, ", "))
	fmt.Fprintf(&b, "  chain nat-prerouting { type nat hook prerouting priority -100; ip daddr . meta l4proto . th dport vmap @service-ips; }\n")
	fmt.Fprintf(&b, "  chain nat-output { type nat hook output priority -100; ip daddr . meta l4proto . th dport vmap @service-ips; }\n")
	fmt.Fprintf(&b, "}\n")
	return b.String()
}

func applyNft(topo *labnet.Topology, n int) error {
	_, err := topo.Node.RunInput(nftRules(topo, n), "nft", "-f", "-")
	return err
}

// swiftlaneConfig is the same service for `swiftlane lb`, and the dummies
// as more services. The clients' veths are excluded from peer redirect:
// handed straight into the client's namespace, a reply's receive work (the
// client's TCP) would run on the data path's CPU, while every other variant
// leaves it to the client's backlog, which RPS sends to the load
// generator's CPU. The benchmark would then charge the balancer under test
// for the load generator's work. Backends keep peer redirect, as on a node.
func swiftlaneConfig(topo *labnet.Topology, n, sessionsMax int) string {
	var ports, eps []string
	for _, p := range webPorts {
		ports = append(ports, fmt.Sprintf("{port: %d, targetPort: %d, nodePort: %d}", p.port, p.target, p.nodePort))
	}
	for _, b := range topo.BackendIPs {
		eps = append(eps, fmt.Sprintf("{address: %s}", b))
	}
	var b strings.Builder
	fmt.Fprintf(&b, `nodeAddresses: [%s]
interfaces: [ext0, "v*"]
peerRedirectExclude: [vc, ext0]
sessions: {max: %d}
services:
  - name: web
    clusterIP: %s
    ports: [%s]
    endpoints: [%s]
`, topo.NodeIP, sessionsMax, clusterIP, strings.Join(ports, ", "), strings.Join(eps, ", "))
	for _, d := range dummies(n) {
		np := ""
		if d.nodePort != 0 {
			np = fmt.Sprintf(", nodePort: %d", d.nodePort)
		}
		var eps []string
		for _, e := range d.endpoints {
			eps = append(eps, "{address: "+e.String()+"}")
		}
		fmt.Fprintf(&b, "  - {name: dummy-%d, clusterIP: %s, ports: [{port: %d, targetPort: %d%s}], endpoints: [%s]}\n",
			d.id, d.clusterIP, dummyPort, dummyTarget, np, strings.Join(eps, ", "))
	}
	return b.String()
}

// step is one command of a setup, run in the node namespace; stdin, when
// set, is its input.
type step struct {
	argv  []string
	stdin string
}

// ipvsSetup is the kube-proxy IPVS-mode shape: service addresses on a dummy
// interface (kube-ipvs0) so they are local, one virtual server per
// ClusterIP and NodePort port with the endpoints as masquerading real
// servers, and MASQUERADE for NodePort traffic in iptables (kube-proxy
// marks it through ipsets; this matches the same packets). The kernel needs
// ip_vs; ipvsAvailable says why not. The dummies' virtual servers go in one
// `ipvsadm -R` batch and their addresses in one `ip -batch`; they need no
// iptables rule, since kube-proxy's ipset match costs the same for any
// number of NodePorts.
func ipvsSetup(topo *labnet.Topology, n int) []step {
	steps := []step{
		{argv: []string{"ip", "link", "add", "kube-ipvs0", "type", "dummy"}},
		{argv: []string{"ip", "addr", "add", clusterIP.String() + "/32", "dev", "kube-ipvs0"}},
		// Masqueraded IPVS connections need conntrack entries for the SNAT.
		{argv: []string{"sysctl", "-qw", "net.ipv4.vs.conntrack=1"}},
	}
	for _, p := range webPorts {
		for _, vip := range []string{fmt.Sprintf("%s:%d", clusterIP, p.port), fmt.Sprintf("%s:%d", topo.NodeIP, p.nodePort)} {
			steps = append(steps, step{argv: []string{"ipvsadm", "-A", "-t", vip, "-s", "rr"}})
			for _, b := range topo.BackendIPs {
				steps = append(steps, step{argv: []string{"ipvsadm", "-a", "-t", vip, "-r", fmt.Sprintf("%s:%d", b, p.target), "-m"}})
			}
		}
		steps = append(steps, step{argv: strings.Fields(fmt.Sprintf("iptables -w -t nat -A POSTROUTING -m ipvs --vaddr %s/32 --vport %d -j MASQUERADE", topo.NodeIP, p.nodePort))})
	}
	ds := dummies(n)
	if len(ds) == 0 {
		return steps
	}
	var addrs, vs strings.Builder
	for _, d := range ds {
		fmt.Fprintf(&addrs, "addr add %s/32 dev kube-ipvs0\n", d.clusterIP)
		vips := []string{fmt.Sprintf("%s:%d", d.clusterIP, dummyPort)}
		if d.nodePort != 0 {
			vips = append(vips, fmt.Sprintf("%s:%d", topo.NodeIP, d.nodePort))
		}
		for _, vip := range vips {
			fmt.Fprintf(&vs, "-A -t %s -s rr\n", vip)
			for _, e := range d.endpoints {
				fmt.Fprintf(&vs, "-a -t %s -r %s:%d -m\n", vip, e, dummyTarget)
			}
		}
	}
	return append(steps, step{[]string{"ip", "-batch", "-"}, addrs.String()}, step{[]string{"ipvsadm", "-R"}, vs.String()})
}

func applyIPVS(topo *labnet.Topology, n int) error {
	for _, s := range ipvsSetup(topo, n) {
		if _, err := topo.Node.RunInput(s.stdin, s.argv...); err != nil {
			return err
		}
	}
	return nil
}

// ipvsAvailable is nil when the node namespace can use IPVS.
func ipvsAvailable(topo *labnet.Topology) error {
	if _, err := topo.Node.Run("ipvsadm", "-Ln"); err != nil {
		return fmt.Errorf("IPVS unavailable (the kernel needs ip_vs; `modprobe ip_vs`, or run in the VM lab): %w", err)
	}
	return nil
}

// teardown removes a shape so the next variant runs on the same topology.
func teardown(topo *labnet.Topology, variant string) error {
	var steps [][]string
	switch variant {
	case "iptables":
		steps = [][]string{{"iptables", "-w", "-t", "nat", "-F"}, {"iptables", "-w", "-t", "nat", "-X"}}
	case "nftables":
		steps = [][]string{{"nft", "delete", "table", "ip", "kube-proxy"}}
	case "ipvs":
		steps = [][]string{{"ipvsadm", "-C"}, {"ip", "link", "del", "kube-ipvs0"}, {"iptables", "-w", "-t", "nat", "-F"}}
	}
	// Whatever the variant tracked must not shape the next one.
	steps = append(steps, []string{"conntrack", "-F"})
	for _, s := range steps {
		if _, err := topo.Node.Run(s...); err != nil && !strings.Contains(err.Error(), "0 flow entries") {
			return err
		}
	}
	return nil
}
