// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/swiftlane/swiftlane/internal/lb/labnet"
)

const (
	dualVIP4 = "10.96.0.50"
	dualVIP6 = "fd00:96::50"
	hairpin6 = "fd00:5c:1::1"
)

// dualStackConfig serves one dual-stack Service (both families' endpoints)
// and one IPv6-only Service whose only endpoint is backend 0 (hairpin).
func dualStackConfig(topo *labnet.Topology) string {
	return fmt.Sprintf(`
ipv6: true
nodeAddresses: [%s, %q]
hairpinAddress6: %q
interfaces: [ext0, "v*"]
services:
  - name: dual
    clusterIPs: [%s, %q]
    ports:
      - {name: http, port: 80, targetPort: %[6]d, nodePort: 30050}
      - {name: dns, protocol: UDP, port: 53, targetPort: %[6]d, nodePort: 30053}
      - {name: closed, protocol: UDP, port: 54, targetPort: 9}
    endpoints: [%[7]s]
  - name: self6
    clusterIP: "fd00:96::60"
    ports: [{port: 80, targetPort: %[6]d}]
    endpoints: [{address: %[8]q}]
`, topo.NodeIP, topo.NodeIP6.String(), hairpin6, dualVIP4, dualVIP6, port, dualEndpoints(topo), topo.BackendIPs6[0].String())
}

// dualEndpoints lists every backend's IPv4 and IPv6 address as endpoints.
func dualEndpoints(topo *labnet.Topology) string {
	var eps []string
	for i := range topo.BackendIPs {
		eps = append(eps, fmt.Sprintf("{address: %s}", topo.BackendIPs[i]), fmt.Sprintf("{address: %q}", topo.BackendIPs6[i].String()))
	}
	return strings.Join(eps, ", ")
}

func TestIPv6DualStack(t *testing.T) {
	e := setupWith(t, dualStackConfig)
	peerAddr := func(peer string) netip.Addr {
		ap, err := netip.ParseAddrPort(peer)
		if err != nil {
			t.Fatalf("peer %q: %v", peer, err)
		}
		return ap.Addr()
	}
	for _, network := range []string{"tcp", "udp"} {
		svcPort, nodePort := map[string]int{"tcp": 80, "udp": 53}[network], map[string]int{"tcp": 30050, "udp": 30053}[network]
		for _, c := range []struct {
			what, addr string
			from       labnet.NS
			sees       netip.Addr
		}{
			{"IPv6 ClusterIP", net.JoinHostPort(dualVIP6, fmt.Sprint(svcPort)), e.topo.Client, e.topo.ClientIP6},
			{"IPv4 ClusterIP of the same Service", net.JoinHostPort(dualVIP4, fmt.Sprint(svcPort)), e.topo.Client, e.topo.ClientIP},
			{"IPv6 NodePort", net.JoinHostPort(e.topo.NodeIP6.String(), fmt.Sprint(nodePort)), e.topo.External, e.topo.NodeIP6},
		} {
			seen := map[string]bool{}
			for range 30 {
				name, peer, err := ask(c.from, network, c.addr)
				if err != nil {
					t.Fatalf("%s %s (%s): %v", c.what, network, c.addr, err)
				}
				if got := peerAddr(peer); got != c.sees {
					t.Fatalf("%s %s: backend saw %v, want %v", c.what, network, got, c.sees)
				}
				seen[name] = true
			}
			if len(seen) != backends {
				t.Errorf("%s %s: 30 requests reached %v, want all %d backends", c.what, network, seen, backends)
			}
		}
	}
	// An IPv6 backend reaching its own Service is SNATed to the IPv6
	// hairpin address.
	name, peer, err := ask(e.topo.Backends[0], "tcp", "[fd00:96::60]:80")
	if err != nil {
		t.Fatal(err)
	}
	if name != "b0" || peerAddr(peer) != netip.MustParseAddr(hairpin6) {
		t.Fatalf("IPv6 hairpin: served by %s seeing %s, want b0 seeing %s", name, peer, hairpin6)
	}
	e.noConntrack()
	if st, _ := e.lb.Stats(); st.PassedToStack != 0 || st.NeighRedirects != 0 {
		t.Fatalf("%d packets passed to the stack, %d waited for a neighbour; every IPv6 Service packet should have been redirected at once",
			st.PassedToStack, st.NeighRedirects)
	}
}

// Large IPv6 segments (TSO/GSO over veth, CHECKSUM_PARTIAL) survive DNAT
// and, through the NodePort, SNAT: the pseudo-header update must leave the
// partial checksum right or the receiver drops every segment.
func TestIPv6BulkStream(t *testing.T) {
	e := setupWith(t, func(topo *labnet.Topology) string {
		return dualStackConfig(topo) + fmt.Sprintf(`  - name: bulk6
    clusterIP: "fd00:96::70"
    ports: [{port: 9000, nodePort: 30900}]
    endpoints: [{address: %q}]
`, topo.BackendIPs6[0].String())
	})
	e.bulkStream(t, 16<<20, []dialTarget{{e.topo.Client, "[fd00:96::70]:9000"}, {e.topo.External, "[fd00:18::1]:30900"}})
}

// A backend's ICMP error about a translated flow (port unreachable: nothing
// listens on the target port) reaches the client's socket, which only
// happens if the error is translated back to the tuple the socket knows.
func TestICMPErrorReachesClient(t *testing.T) {
	e := setupWith(t, dualStackConfig)
	for _, addr := range []string{"[" + dualVIP6 + "]:54", dualVIP4 + ":54"} {
		c, err := e.topo.Client.Dial("udp", addr, timeout)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(timeout))
		if _, err := c.Write([]byte("anyone?")); err != nil {
			t.Fatal(err)
		}
		_, err = c.Read(make([]byte, 64))
		c.Close()
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("%s: read returned %v, want connection refused from the translated ICMP error", addr, err)
		}
	}
	if st, _ := e.lb.Stats(); st.ICMPTranslated < 2 {
		t.Errorf("icmp_translated = %d, want both families' errors counted", st.ICMPTranslated)
	}
}
