// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/swiftlane/swiftlane/internal/lb/balancer"
	"github.com/swiftlane/swiftlane/internal/lb/labnet"
	"github.com/swiftlane/swiftlane/internal/lb/services"
)

const (
	backends = 3
	port     = 8080
	timeout  = 3 * time.Second
)

type env struct {
	t    *testing.T
	topo *labnet.Topology
	lb   *balancer.Balancer
	cfg  string
}

// config renders the services file for the topology; webEndpoints selects
// which backends serve "web" (all when nil).
func config(topo *labnet.Topology, webEndpoints []int) string {
	if webEndpoints == nil {
		for i := range topo.BackendIPs {
			webEndpoints = append(webEndpoints, i)
		}
	}
	var eps []string
	for _, i := range webEndpoints {
		eps = append(eps, fmt.Sprintf("{address: %s}", topo.BackendIPs[i]))
	}
	return fmt.Sprintf(`
nodeAddresses: [%[1]s]
hairpinAddress: 169.254.42.1
interfaces: [ext0, "v*"]
sessions: {udpIdle: 1s, closingIdle: 1s}
services:
  - name: web
    clusterIP: 10.96.0.10
    ports:
      - {name: http, port: 80, targetPort: %[2]d, nodePort: 30080}
      - {name: dns, protocol: UDP, port: 53, targetPort: %[2]d, nodePort: 30053}
    endpoints: [%[3]s]
  - name: self
    clusterIP: 10.96.0.20
    ports: [{port: 80, targetPort: %[2]d}, {protocol: UDP, port: 53, targetPort: %[2]d}]
    endpoints: [{address: %[4]s}]
`, topo.NodeIP, port, strings.Join(eps, ", "), topo.BackendIPs[0])
}

func setup(t *testing.T) *env {
	t.Helper()
	return setupWith(t, func(topo *labnet.Topology) string { return config(topo, nil) })
}

// echoTopology builds the topology with an echo server on every backend;
// both go at the end of t.
func echoTopology(t *testing.T) *labnet.Topology {
	t.Helper()
	labnet.RequireRoot(t)
	topo, err := labnet.New(backends)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := topo.Close(); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	for i, ns := range topo.Backends {
		e, err := labnet.StartEcho(ns, fmt.Sprintf("b%d", i), port)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
	}
	return topo
}

// setupWith is setup with the services file cfg renders for the topology.
func setupWith(t *testing.T, cfg func(*labnet.Topology) string) *env {
	t.Helper()
	topo := echoTopology(t)
	if err := topo.TrackConnections(); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, topo: topo}
	e.cfg = cfg(topo)
	parsed, err := services.Parse([]byte(e.cfg))
	if err != nil {
		t.Fatal(err)
	}
	e.lb, err = balancer.New(parsed, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.lb.Close() })
	var n int
	if err := topo.Node.Do(func() (err error) { n, err = e.lb.AttachInterfaces(); return err }); err != nil {
		t.Fatal(err)
	}
	if want := backends + 2; n != want {
		t.Fatalf("attached to %d interfaces, want %d (client, backends, ext0)", n, want)
	}
	return e
}

// ask sends one request and returns the backend name and the peer it saw.
func ask(ns labnet.NS, network, addr string) (name, peer string, err error) {
	c, err := ns.Dial(network, addr, timeout)
	if err != nil {
		return "", "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(timeout))
	if network == "udp" {
		if _, err := c.Write([]byte("hi")); err != nil {
			return "", "", err
		}
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", "", fmt.Errorf("%s %s: %w", network, addr, err)
	}
	return labnet.ParseEcho(line)
}

func (e *env) noConntrack() {
	e.t.Helper()
	n, err := e.topo.Node.ConntrackCount()
	if err != nil {
		e.t.Fatal(err)
	}
	if n != 0 {
		out, _ := e.topo.Node.Run("conntrack", "-L")
		e.t.Fatalf("node has %d conntrack entries for service traffic, want 0:\n%s", n, out)
	}
}

func TestConntrackIsActiveInNode(t *testing.T) {
	// The control for every "zero entries" check below: plain forwarded
	// pod-to-pod traffic (no service) is tracked in this node.
	e := setup(t)
	if _, _, err := ask(e.topo.Client, "tcp", fmt.Sprintf("%s:%d", e.topo.BackendIPs[0], port)); err != nil {
		t.Fatal(err)
	}
	if n, err := e.topo.Node.ConntrackCount(); err != nil || n == 0 {
		t.Fatalf("direct pod traffic made %d conntrack entries (err %v); the zero checks would prove nothing", n, err)
	}
}

func TestClusterIP(t *testing.T) {
	e := setup(t)
	for _, network := range []string{"tcp", "udp"} {
		vip := map[string]string{"tcp": "10.96.0.10:80", "udp": "10.96.0.10:53"}[network]
		seen := map[string]int{}
		for range 60 {
			name, peer, err := ask(e.topo.Client, network, vip)
			if err != nil {
				t.Fatal(err)
			}
			// ClusterIP keeps the client's address.
			if !strings.HasPrefix(peer, e.topo.ClientIP.String()+":") {
				t.Fatalf("%s: backend saw %s, want the client address %s", network, peer, e.topo.ClientIP)
			}
			seen[name]++
		}
		if len(seen) != backends {
			t.Errorf("%s: 60 connections reached %v, want all %d backends", network, seen, backends)
		}
	}
	e.noConntrack()
	st, _ := e.lb.Stats()
	if st.FwdPackets == 0 || st.ReplyPackets == 0 || st.PassedToStack != 0 {
		t.Fatalf("stats %+v: every packet should have been translated and redirected", st)
	}
}

func TestNodePort(t *testing.T) {
	e := setup(t)
	for _, network := range []string{"tcp", "udp"} {
		addr := map[string]string{"tcp": "198.18.0.1:30080", "udp": "198.18.0.1:30053"}[network]
		for range 20 {
			_, peer, err := ask(e.topo.External, network, addr)
			if err != nil {
				t.Fatal(err)
			}
			// NodePort is SNATed to the node address with a port outside the
			// NodePort range.
			ap, err := net.ResolveUDPAddr("udp", peer)
			if err != nil {
				t.Fatal(err)
			}
			if ap.IP.String() != e.topo.NodeIP.String() || (ap.Port >= 30000 && ap.Port <= 32767) {
				t.Fatalf("%s: backend saw %s, want %s with a port outside 30000-32767", network, peer, e.topo.NodeIP)
			}
		}
	}
	e.noConntrack()
}

func TestHairpin(t *testing.T) {
	e := setup(t)
	// Backend 0 is the only endpoint of "self": it must reach itself.
	for _, network := range []string{"tcp", "udp"} {
		addr := map[string]string{"tcp": "10.96.0.20:80", "udp": "10.96.0.20:53"}[network]
		name, peer, err := ask(e.topo.Backends[0], network, addr)
		if err != nil {
			t.Fatal(err)
		}
		if name != "b0" || !strings.HasPrefix(peer, "169.254.42.1:") {
			t.Fatalf("%s: served by %s seeing %s, want b0 seeing the hairpin address 169.254.42.1", network, name, peer)
		}
	}
	e.noConntrack()
}

func TestBackendRemovalMidTraffic(t *testing.T) {
	e := setup(t)
	// A long-lived UDP flow, and short TCP connections in a loop, while b2
	// leaves the service (its process keeps running, like a terminating pod).
	udp, err := e.topo.Client.Dial("udp", "10.96.0.10:53", timeout)
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	askUDP := func() (string, error) {
		udp.SetDeadline(time.Now().Add(timeout))
		if _, err := udp.Write([]byte("hi")); err != nil {
			return "", err
		}
		buf := make([]byte, 256)
		n, err := udp.Read(buf)
		if err != nil {
			return "", err
		}
		name, _, err := labnet.ParseEcho(string(buf[:n]))
		return name, err
	}
	first, err := askUDP()
	if err != nil {
		t.Fatal(err)
	}

	const total = 300
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		failures []error
		done     int
		after    = map[string]int{} // backends chosen after removal
		removed  = make(chan struct{})
		removedB bool
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range total {
			if i == total/3 {
				close(removed)
			}
			mu.Lock()
			startedAfter := removedB // in-flight connections may finish on b2
			mu.Unlock()
			name, _, err := ask(e.topo.Client, "tcp", "10.96.0.10:80")
			mu.Lock()
			done++
			if err != nil {
				failures = append(failures, err)
			} else if startedAfter {
				after[name]++
			}
			mu.Unlock()
		}
	}()
	<-removed
	// Remove b2; keep whatever the UDP flow uses unless it is b2, so the
	// flow is either undisturbed or re-balanced — assert both ways.
	cfg, err := services.Parse([]byte(config(e.topo, []int{0, 1})))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.lb.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	removedB = true
	mu.Unlock()
	wg.Wait()

	if len(failures) > 0 {
		t.Fatalf("%d of %d connections failed across the removal, first: %v", len(failures), done, failures[0])
	}
	if after["b2"] > 0 || after["b0"] == 0 || after["b1"] == 0 {
		t.Fatalf("connections after removal went to %v, want only b0 and b1", after)
	}
	next, err := askUDP()
	if err != nil {
		t.Fatalf("UDP flow broke after removal: %v", err)
	}
	if first == "b2" && next == "b2" || first != "b2" && next != first {
		t.Fatalf("UDP flow on %s moved to %s; want it kept unless its backend (b2) left", first, next)
	}
	e.noConntrack()
}

func TestIdleSessionsExpire(t *testing.T) {
	e := setup(t)
	if _, _, err := ask(e.topo.Client, "udp", "10.96.0.10:53"); err != nil {
		t.Fatal(err)
	}
	if err := e.lb.Sweep(); err != nil || e.lb.LiveSessions() != 1 {
		t.Fatalf("live %d (err %v), want the one UDP flow", e.lb.LiveSessions(), err)
	}
	// udpIdle is 1s in this config; poll the sweep, bounded.
	deadline := time.Now().Add(5 * time.Second)
	for e.lb.LiveSessions() != 0 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		if err := e.lb.Sweep(); err != nil {
			t.Fatal(err)
		}
	}
	ss, _ := e.lb.Datapath().Sessions()
	if e.lb.LiveSessions() != 0 || len(ss) != 0 {
		t.Fatalf("after idle timeout: %d live, %d entries", e.lb.LiveSessions(), len(ss))
	}
}

func TestBulkStream(t *testing.T) {
	// Large segments (TSO/GSO over veth) must survive DNAT and SNAT.
	e := setup(t)
	cfg := e.cfg + `  - name: bulk
    clusterIP: 10.96.0.30
    ports: [{port: 9000, nodePort: 30900}]
    endpoints: [{address: ` + e.topo.BackendIPs[0].String() + `}]
`
	c, err := services.Parse([]byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.lb.Apply(c); err != nil {
		t.Fatal(err)
	}
	e.bulkStream(t, 32<<20, []dialTarget{{e.topo.Client, "10.96.0.30:9000"}, {e.topo.External, "198.18.0.1:30900"}})
}

type dialTarget struct {
	from labnet.NS
	addr string
}

// bulkStream sends size bytes over TCP from each target's namespace to its
// address, a service of backend 0's port 9000, and checks the backend
// receives every byte and the node tracks no connection.
func (e *env) bulkStream(t *testing.T, size int64, targets []dialTarget) {
	t.Helper()
	sink, err := e.topo.Backends[0].Listen(":9000")
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	got := make(chan int64, len(targets))
	go func() {
		for {
			c, err := sink.Accept()
			if err != nil {
				return
			}
			go func() {
				n, _ := io.Copy(io.Discard, c)
				c.Close()
				got <- n
			}()
		}
	}()
	for _, tc := range targets {
		conn, err := tc.from.Dial("tcp", tc.addr, timeout)
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		buf := make([]byte, 1<<20)
		for sent := int64(0); sent < size; sent += int64(len(buf)) {
			if _, err := conn.Write(buf); err != nil {
				st, _ := e.lb.Stats()
				t.Fatalf("%s: after %d bytes: %v (stats %+v)", tc.addr, sent, err, st)
			}
		}
		conn.Close()
		select {
		case n := <-got:
			if n != size {
				t.Fatalf("%s: sink got %d bytes, want %d", tc.addr, n, size)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: sink never saw the end of the stream", tc.addr)
		}
	}
	e.noConntrack()
}

// Backends' neighbours are resolved ahead (managed entries), so even the
// first packet to each backend is redirected straight away instead of
// waiting for ARP in bpf_redirect_neigh.
func TestBackendNeighboursResolvedAhead(t *testing.T) {
	e := setup(t)
	reachable := func(ip string) bool {
		out, err := e.topo.Node.Run("ip", "neigh", "show", ip)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Contains(out, "managed") && (strings.Contains(out, "REACHABLE") || strings.Contains(out, "STALE"))
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, ip := range e.topo.BackendIPs {
		for !reachable(ip.String()) { // the kernel resolves managed entries on its own
			if time.Now().After(deadline) {
				out, _ := e.topo.Node.Run("ip", "neigh", "show")
				t.Fatalf("no resolved managed neighbour entry for backend %v:\n%s", ip, out)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	seen := map[string]bool{}
	for range 30 {
		name, _, err := ask(e.topo.Client, "tcp", "10.96.0.10:80")
		if err != nil {
			t.Fatal(err)
		}
		seen[name] = true
	}
	if _, _, err := ask(e.topo.External, "udp", "198.18.0.1:30053"); err != nil {
		t.Fatal(err)
	}
	st, _ := e.lb.Stats()
	if len(seen) != backends || st.FwdPackets == 0 || st.NeighRedirects != 0 {
		t.Fatalf("reached %v; %d forward packets, %d sent via bpf_redirect_neigh; want all backends and none", seen, st.FwdPackets, st.NeighRedirects)
	}

	// The control: without the entry, the slow path is taken and counted.
	if _, err := e.topo.Node.Run("ip", "neigh", "del", e.topo.BackendIPs[2].String(), "dev", "vb2"); err != nil {
		t.Fatal(err)
	}
	for range 40 {
		if name, _, err := ask(e.topo.Client, "tcp", "10.96.0.10:80"); err != nil {
			t.Fatal(err)
		} else if name == "b2" {
			break
		}
	}
	if st, _ := e.lb.Stats(); st.NeighRedirects == 0 {
		t.Fatalf("a backend without a neighbour entry was reached without bpf_redirect_neigh; the check above proves nothing")
	}
}

// TestPeerRedirectExclude: replies to a pod normally enter its namespace
// straight from tc (bpf_redirect_peer), so the host-side veth transmits
// nothing for them; an excluded veth carries them through its transmit path
// (and the pod's backlog, where RPS applies).
func TestPeerRedirectExclude(t *testing.T) {
	const requests = 40
	vcTx := func(e *env) uint64 {
		var n uint64
		if err := e.topo.Node.Do(func() error {
			l, err := netlink.LinkByName("vc")
			if err != nil {
				return err
			}
			n = l.Attrs().Statistics.TxPackets
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// Each request's reply is at least SYN-ACK, data and FIN: 3 packets.
	replies := func(e *env) uint64 {
		before := vcTx(e)
		for range requests {
			if _, _, err := ask(e.topo.Client, "tcp", "10.96.0.10:80"); err != nil {
				t.Fatal(err)
			}
		}
		return vcTx(e) - before
	}
	if n := replies(setup(t)); n >= requests {
		t.Fatalf("default: the client's veth transmitted %d packets for %d requests; replies should enter the pod directly", n, requests)
	}
	excluded := setupWith(t, func(topo *labnet.Topology) string {
		return "peerRedirectExclude: [vc]\n" + config(topo, nil)
	})
	if n := replies(excluded); n < 3*requests {
		t.Fatalf("peerRedirectExclude [vc]: the client's veth transmitted %d packets for %d requests, want at least %d", n, requests, 3*requests)
	}
}
