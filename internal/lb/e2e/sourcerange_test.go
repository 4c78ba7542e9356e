// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/swiftlane/swiftlane/internal/lb/labnet"
)

const (
	guardedLB4 = "203.0.113.61"
	guardedLB6 = "fd00:113::61"
)

// sourceRangeConfig serves one dual-stack LoadBalancer-like Service whose
// load-balancer IPs admit only the given ranges.
func sourceRangeConfig(ranges ...string) func(*labnet.Topology) string {
	return func(topo *labnet.Topology) string {
		return fmt.Sprintf(`
ipv6: true
nodeAddresses: [%s, %q]
interfaces: [ext0, "v*"]
services:
  - name: guarded
    clusterIPs: [10.96.0.61, "fd00:96::61"]
    loadBalancerIPs: [%s, %q]
    loadBalancerSourceRanges: [%s]
    ports:
      - {name: http, port: 80, targetPort: %d, nodePort: 30061}
      - {name: dns, protocol: UDP, port: 53, targetPort: %[6]d}
    endpoints: [%s]
`, topo.NodeIP, topo.NodeIP6.String(), guardedLB4, guardedLB6, strings.Join(ranges, ", "), port, dualEndpoints(topo))
	}
}

// refusedWait is how long a refused client waits for an answer that must
// not come (the SYN is dropped, so nothing else ends the wait).
const refusedWait = 700 * time.Millisecond

// loadBalancerSourceRanges end to end, IPv4 and IPv6: a client outside the
// ranges gets no connection to a load-balancer IP (and its dropped SYNs
// are counted), one inside is served; the same Service's cluster IP and
// NodePort stay open to both, as with kube-proxy; narrowing the ranges
// refuses new connections but not an established one.
func TestLoadBalancerSourceRanges(t *testing.T) {
	e := setupWith(t, sourceRangeConfig("198.18.0.0/24", `"fd00:18::/64"`))
	dropped := func() uint64 {
		st, err := e.lb.Stats()
		if err != nil {
			t.Fatal(err)
		}
		return st.Drops["source_range"]
	}
	refused := func(from labnet.NS, who, addr string) {
		t.Helper()
		before := dropped()
		c, err := from.Dial("tcp", addr, refusedWait)
		if err == nil {
			c.Close()
			t.Fatalf("%s reached %s from outside its source ranges", who, addr)
		}
		if after := dropped(); after == before {
			t.Fatalf("%s to %s failed (%v) but no source_range drop was counted", who, addr, err)
		}
	}
	served := func(from labnet.NS, who, addr string) {
		t.Helper()
		if _, _, err := ask(from, "tcp", addr); err != nil {
			t.Fatalf("%s to %s: %v", who, addr, err)
		}
	}
	lb := func(ip string, p int) string { return net.JoinHostPort(ip, fmt.Sprint(p)) }

	// The external host is inside, the client pod outside.
	for _, ip := range []string{guardedLB4, guardedLB6} {
		served(e.topo.External, "external host", lb(ip, 80))
		refused(e.topo.Client, "client pod", lb(ip, 80))
	}
	// Only the load-balancer IPs are guarded.
	for _, addr := range []string{"10.96.0.61:80", "[fd00:96::61]:80", lb(e.topo.NodeIP.String(), 30061), lb(e.topo.NodeIP6.String(), 30061)} {
		served(e.topo.Client, "client pod", addr)
	}

	// A UDP flow from the external host, open before the ranges change.
	flows := map[string]net.Conn{}
	for _, ip := range []string{guardedLB4, guardedLB6} {
		c, err := e.topo.External.Dial("udp", lb(ip, 53), timeout)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		exchange(t, c, "before")
		flows[ip] = c
	}

	// Narrowed to the client pod's subnets: the roles swap for new
	// connections, the open flow goes on.
	e.apply(sourceRangeConfig("10.244.1.0/24", `"fd00:244:1::/64"`)(e.topo))
	for _, ip := range []string{guardedLB4, guardedLB6} {
		served(e.topo.Client, "client pod", lb(ip, 80))
		refused(e.topo.External, "external host", lb(ip, 80))
		exchange(t, flows[ip], "after its range was removed")
	}
	e.noConntrack()
}

// exchange sends a datagram on c and waits for the echo.
func exchange(t *testing.T, c net.Conn, when string) {
	t.Helper()
	c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte("hi")); err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
		t.Fatalf("UDP flow to %s %s: %v", c.RemoteAddr(), when, err)
	}
}

// The node's own connections to a guarded load-balancer IP (the socket
// path, --host-cgroup) are judged as kube-proxy judges the node: refused
// (EPERM at connect) unless a range holds a node address.
func TestHostTrafficSourceRanges(t *testing.T) {
	e := setupWith(t, sourceRangeConfig("10.244.1.0/24", `"fd00:244:1::/64"`)) // the client pod's only
	cg := e.attachHost("")
	addrs := []string{net.JoinHostPort(guardedLB4, "80"), net.JoinHostPort(guardedLB6, "80")}
	for _, addr := range addrs {
		_, err := runClient(e.topo.Node, cg, "tcp", addr, 1)
		if err == nil || !strings.Contains(err.Error(), "operation not permitted") {
			t.Fatalf("node to %s outside the ranges: %v, want connect refused with EPERM", addr, err)
		}
	}
	// The same ranges plus the node's subnets: the node gets in.
	e.apply(sourceRangeConfig("10.244.1.0/24", `"fd00:244:1::/64"`, "198.18.0.0/24", `"fd00:18::/64"`)(e.topo))
	var cases []hostCase
	for _, addr := range addrs {
		cases = append(cases, hostCase{"node to " + addr, "tcp", addr})
	}
	e.askFromNode(cg, 3, cases...)
}
