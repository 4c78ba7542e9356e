// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"net/netip"
	"os/exec"
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

// iptablesRules is the kube-proxy iptables-mode shape for "web": a
// KUBE-SERVICES dispatch, a per-service chain choosing an endpoint with the
// statistic match, DNAT per endpoint, and MASQUERADE for marked traffic
// (off-cluster sources and NodePorts). Conntrack is what makes it work.
func iptablesRules(topo *labnet.Topology) []string {
	r := []string{
		"-N KUBE-SERVICES", "-N KUBE-MARK-MASQ", "-N KUBE-POSTROUTING",
		"-A PREROUTING -j KUBE-SERVICES", "-A OUTPUT -j KUBE-SERVICES",
		"-A POSTROUTING -j KUBE-POSTROUTING",
		"-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000",
		"-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN",
		"-A KUBE-POSTROUTING -j MARK --xor-mark 0x4000",
		"-A KUBE-POSTROUTING -j MASQUERADE --random-fully",
	}
	n := len(topo.BackendIPs)
	for _, p := range webPorts {
		svc := fmt.Sprintf("KUBE-SVC-WEB-%d", p.port)
		ext := fmt.Sprintf("KUBE-EXT-WEB-%d", p.port)
		r = append(r, "-N "+svc, "-N "+ext,
			fmt.Sprintf("-A KUBE-SERVICES -d %s/32 -p tcp --dport %d -j %s", clusterIP, p.port, svc),
			fmt.Sprintf("-A KUBE-SERVICES -d %s/32 -p tcp --dport %d -j %s", topo.NodeIP, p.nodePort, ext),
			fmt.Sprintf("-A %s -j KUBE-MARK-MASQ", ext), fmt.Sprintf("-A %s -j %s", ext, svc),
			fmt.Sprintf("-A %s ! -s %s -d %s/32 -p tcp --dport %d -j KUBE-MARK-MASQ", svc, podCIDR, clusterIP, p.port))
		for i, b := range topo.BackendIPs {
			sep := fmt.Sprintf("KUBE-SEP-WEB-%d-%d", p.port, i)
			r = append(r, "-N "+sep,
				fmt.Sprintf("-A %s -s %s/32 -j KUBE-MARK-MASQ", sep, b),
				fmt.Sprintf("-A %s -p tcp -j DNAT --to-destination %s:%d", sep, b, p.target))
			if i < n-1 {
				r = append(r, fmt.Sprintf("-A %s -m statistic --mode random --probability %.5f -j %s", svc, 1/float64(n-i), sep))
			} else {
				r = append(r, fmt.Sprintf("-A %s -j %s", svc, sep))
			}
		}
	}
	return r
}

func applyIptables(topo *labnet.Topology) error {
	for _, rule := range iptablesRules(topo) {
		if _, err := topo.Node.Run(append([]string{"iptables", "-w", "-t", "nat"}, strings.Fields(rule)...)...); err != nil {
			return err
		}
	}
	return nil
}

// nftRules is the kube-proxy nftables-mode shape: one verdict map from
// address . protocol . port to a service chain, numgen to pick an endpoint,
// dnat per endpoint, masquerade by mark.
func nftRules(topo *labnet.Topology) string {
	var b strings.Builder
	n := len(topo.BackendIPs)
	fmt.Fprintf(&b, "table ip kube-proxy {\n")
	fmt.Fprintf(&b, "  chain mark-for-masquerade { meta mark set meta mark | 0x4000; }\n")
	fmt.Fprintf(&b, "  chain masquerading { type nat hook postrouting priority 100; meta mark & 0x4000 == 0 return; meta mark set meta mark ^ 0x4000; masquerade fully-random; }\n")
	var elems []string
	for _, p := range webPorts {
		var vmap []string
		for i, be := range topo.BackendIPs {
			fmt.Fprintf(&b, "  chain endpoint-web-%d-%d { ip saddr %s jump mark-for-masquerade; meta l4proto tcp dnat to %s:%d; }\n", p.port, i, be, be, p.target)
			vmap = append(vmap, fmt.Sprintf("%d : goto endpoint-web-%d-%d", i, p.port, i))
		}
		fmt.Fprintf(&b, "  chain service-web-%d { ip daddr %s tcp dport %d ip saddr != %s jump mark-for-masquerade; numgen random mod %d vmap { %s }; }\n",
			p.port, clusterIP, p.port, podCIDR, n, strings.Join(vmap, ", "))
		fmt.Fprintf(&b, "  chain external-web-%d { jump mark-for-masquerade; goto service-web-%d; }\n", p.port, p.port)
		elems = append(elems, fmt.Sprintf("%s . tcp . %d : goto service-web-%d", clusterIP, p.port, p.port),
			fmt.Sprintf("%s . tcp . %d : goto external-web-%d", topo.NodeIP, p.nodePort, p.port))
	}
	fmt.Fprintf(&b, "  map service-ips { type ipv4_addr . inet_proto . inet_service : verdict; elements = { %s } }\n", strings.Join(elems, ", "))
	fmt.Fprintf(&b, "  chain nat-prerouting { type nat hook prerouting priority -100; ip daddr . meta l4proto . th dport vmap @service-ips; }\n")
	fmt.Fprintf(&b, "  chain nat-output { type nat hook output priority -100; ip daddr . meta l4proto . th dport vmap @service-ips; }\n")
	fmt.Fprintf(&b, "}\n")
	return b.String()
}

func applyNft(topo *labnet.Topology) error {
	cmd := exec.Command("ip", "netns", "exec", topo.Node.Name, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(nftRules(topo))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft: %w: %s", err, out)
	}
	return nil
}

// swiftlaneConfig is the same service for `swiftlane lb`. The clients'
// veths are excluded from peer redirect: handed straight into the client's
// namespace, a reply's receive work (the client's TCP) would run on the data
// path's CPU, while every other variant leaves it to the client's backlog,
// which RPS sends to the load generator's CPU. The benchmark would then
// charge the balancer under test for the load generator's work. Backends
// keep peer redirect, as on a node.
func swiftlaneConfig(topo *labnet.Topology) string {
	var ports, eps []string
	for _, p := range webPorts {
		ports = append(ports, fmt.Sprintf("{port: %d, targetPort: %d, nodePort: %d}", p.port, p.target, p.nodePort))
	}
	for _, b := range topo.BackendIPs {
		eps = append(eps, fmt.Sprintf("{address: %s}", b))
	}
	return fmt.Sprintf(`nodeAddresses: [%s]
interfaces: [ext0, "v*"]
peerRedirectExclude: [vc, ext0]
services:
  - name: web
    clusterIP: %s
    ports: [%s]
    endpoints: [%s]
`, topo.NodeIP, clusterIP, strings.Join(ports, ", "), strings.Join(eps, ", "))
}

// ipvsSetup is the kube-proxy IPVS-mode shape: service addresses on a dummy
// interface (kube-ipvs0) so they are local, one virtual server per
// ClusterIP and NodePort port with the endpoints as masquerading real
// servers, and MASQUERADE for NodePort traffic in iptables (kube-proxy
// marks it through ipsets; this matches the same packets). The kernel needs
// ip_vs; ipvsAvailable says why not.
func ipvsSetup(topo *labnet.Topology) [][]string {
	steps := [][]string{
		{"ip", "link", "add", "kube-ipvs0", "type", "dummy"},
		{"ip", "addr", "add", clusterIP.String() + "/32", "dev", "kube-ipvs0"},
		// Masqueraded IPVS connections need conntrack entries for the SNAT.
		{"sysctl", "-qw", "net.ipv4.vs.conntrack=1"},
	}
	for _, p := range webPorts {
		for _, vip := range []string{fmt.Sprintf("%s:%d", clusterIP, p.port), fmt.Sprintf("%s:%d", topo.NodeIP, p.nodePort)} {
			steps = append(steps, []string{"ipvsadm", "-A", "-t", vip, "-s", "rr"})
			for _, b := range topo.BackendIPs {
				steps = append(steps, []string{"ipvsadm", "-a", "-t", vip, "-r", fmt.Sprintf("%s:%d", b, p.target), "-m"})
			}
		}
		steps = append(steps, strings.Fields(fmt.Sprintf("iptables -w -t nat -A POSTROUTING -m ipvs --vaddr %s/32 --vport %d -j MASQUERADE", topo.NodeIP, p.nodePort)))
	}
	return steps
}

func applyIPVS(topo *labnet.Topology) error {
	for _, s := range ipvsSetup(topo) {
		if _, err := topo.Node.Run(s...); err != nil {
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
