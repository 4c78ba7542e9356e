// SPDX-License-Identifier: Apache-2.0

package kubesource

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/swiftlane/swiftlane/internal/kubetest"
	"github.com/swiftlane/swiftlane/internal/lb/balancer"
	"github.com/swiftlane/swiftlane/internal/lb/healthcheck"
	"github.com/swiftlane/swiftlane/internal/lb/labnet"
	"github.com/swiftlane/swiftlane/internal/lb/services"
)

const (
	echoPort   = 8080 // labnet.Echo: one answer per connection or datagram
	streamPort = 9000 // lineServer: one answer per line, connection kept
	ioTimeout  = 3 * time.Second
)

// lineServer answers every line of a connection with its name, so a client
// can keep one connection open and see which backend serves it.
func lineServer(t *testing.T, ns labnet.NS, name string) {
	t.Helper()
	l, err := ns.Listen(fmt.Sprintf(":%d", streamPort))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					if _, err := r.ReadString('\n'); err != nil {
						return
					}
					if _, err := fmt.Fprintln(c, name); err != nil {
						return
					}
				}
			}()
		}
	}()
}

// stream is a client's long-lived connection to a lineServer.
type stream struct {
	c net.Conn
	r *bufio.Reader
}

func (s *stream) ask() (string, error) {
	s.c.SetDeadline(time.Now().Add(ioTimeout))
	if _, err := fmt.Fprintln(s.c, "hi"); err != nil {
		return "", err
	}
	line, err := s.r.ReadString('\n')
	return strings.TrimSpace(line), err
}

// askOnce sends one request on a new connection (or datagram) and returns
// the backend's name and the peer address it saw.
func askOnce(ns labnet.NS, network, addr string) (name, peer string, err error) {
	c, err := ns.Dial(network, addr, ioTimeout)
	if err != nil {
		return "", "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(ioTimeout))
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

// The Kubernetes source driving the real balancer: Services and
// EndpointSlices in a real kube-apiserver, the BPF program in a node
// network namespace, real TCP and UDP clients and servers around it. It
// checks translation under traffic, that one Service's change rewrites only
// that Service's entries, that a terminating endpoint drains (its open
// connection keeps working, new connections avoid it), that the closed
// connection's sessions are garbage-collected, and that nf_conntrack never
// sees the Service traffic.
func TestEndToEndKubernetesSource(t *testing.T) {
	labnet.RequireRoot(t)
	c := startCluster(t)

	topo, err := labnet.New(3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := topo.Close(); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	if err := topo.TrackConnections(); err != nil {
		t.Fatal(err)
	}
	names := map[netip.Addr]string{}
	for i, ns := range topo.Backends {
		name := fmt.Sprintf("b%d", i)
		names[topo.BackendIPs[i]] = name
		e, err := labnet.StartEcho(ns, name, echoPort)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		lineServer(t, ns, name)
	}

	// NodePorts answer on the Node's addresses, read from the Node object
	// as `swiftlane lb --node` does.
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}
	if node, err = c.cs.CoreV1().Nodes().Create(t.Context(), node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	node.Status.Addresses = []corev1.NodeAddress{
		{Type: corev1.NodeHostName, Address: "node-1"},
		{Type: corev1.NodeInternalIP, Address: "fd00::1"},
		{Type: corev1.NodeInternalIP, Address: topo.NodeIP.String()},
	}
	if _, err := c.cs.CoreV1().Nodes().UpdateStatus(t.Context(), node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := nodeConfig(t, `
interfaces: [ext0, "v*"]
sessions: {udpIdle: 1s, closingIdle: 1s}
`)
	addrs, err := NodeAddresses(t.Context(), c.cs, "node-1", false)
	if err != nil {
		t.Fatal(err)
	}
	if len(addrs) != 1 || addrs[0] != topo.NodeIP {
		t.Fatalf("node addresses %v, want [%v]", addrs, topo.NodeIP)
	}
	cfg.NodeAddresses = addrs

	lb, err := balancer.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lb.Close() })
	if err := topo.Node.Do(func() error { _, err := lb.AttachInterfaces(); return err }); err != nil {
		t.Fatal(err)
	}

	c.createService(t, nodePortService("web", "10.96.0.10",
		svcPort("http", corev1.ProtocolTCP, 80, intstr.FromString("http"), 30080),
		svcPort("dns", corev1.ProtocolUDP, 53, intstr.FromString("dns"), 30053)))
	c.createService(t, service("stream", "10.96.0.30",
		svcPort("stream", corev1.ProtocolTCP, 9000, intstr.FromInt32(streamPort), 0)))
	webPorts := []discoveryv1.EndpointPort{slicePort("http", corev1.ProtocolTCP, echoPort), slicePort("dns", corev1.ProtocolUDP, echoPort)}
	streamPorts := []discoveryv1.EndpointPort{slicePort("stream", corev1.ProtocolTCP, streamPort)}
	all := func(state func(string) discoveryv1.Endpoint) []discoveryv1.Endpoint {
		var eps []discoveryv1.Endpoint
		for _, ip := range topo.BackendIPs {
			eps = append(eps, state(ip.String()))
		}
		return eps
	}
	c.putSlice(t, endpointSlice("web", "web-a", webPorts, all(readyEP)...))
	c.putSlice(t, endpointSlice("stream", "stream-a", streamPorts, all(readyEP)...))

	a := runSource(t, c.cs, Options{Node: cfg, Debounce: 20 * time.Millisecond}, lb.Apply)
	a.await(t, `
  - name: ns/stream
    clusterIP: 10.96.0.30
    ports: [{name: stream, protocol: TCP, port: 9000, targetPort: 9000}]
    endpoints: [{address: 10.244.2.2}, {address: 10.244.3.2}, {address: 10.244.4.2}]
  - name: ns/web
    clusterIP: 10.96.0.10
    ports:
      - {name: http, protocol: TCP, port: 80, targetPort: 8080, nodePort: 30080}
      - {name: dns, protocol: UDP, port: 53, targetPort: 8080, nodePort: 30053}
    endpoints: [{address: 10.244.2.2}, {address: 10.244.3.2}, {address: 10.244.4.2}]
`)

	// ClusterIP keeps the client's address; NodePort is SNATed to the node.
	for _, network := range []string{"tcp", "udp"} {
		vip := map[string]string{"tcp": "10.96.0.10:80", "udp": "10.96.0.10:53"}[network]
		seen := map[string]int{}
		for range 60 {
			name, peer, err := askOnce(topo.Client, network, vip)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(peer, topo.ClientIP.String()+":") {
				t.Fatalf("%s %s: backend saw %s, want the client %v", network, vip, peer, topo.ClientIP)
			}
			seen[name]++
		}
		if len(seen) != 3 {
			t.Fatalf("%s %s: 60 requests reached %v, want all 3 backends", network, vip, seen)
		}
		np := map[string]string{"tcp": "198.18.0.1:30080", "udp": "198.18.0.1:30053"}[network]
		if _, peer, err := askOnce(topo.External, network, np); err != nil || !strings.HasPrefix(peer, topo.NodeIP.String()+":") {
			t.Fatalf("%s %s: peer %q (err %v), want the node address %v", network, np, peer, err, topo.NodeIP)
		}
	}

	// A long-lived connection; then its backend starts terminating.
	conn, err := topo.Client.Dial("tcp", "10.96.0.30:9000", ioTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	st := &stream{c: conn, r: bufio.NewReader(conn)}
	pinned, err := st.ask()
	if err != nil {
		t.Fatal(err)
	}
	var pinnedIP netip.Addr
	for ip, n := range names {
		if n == pinned {
			pinnedIP = ip
		}
	}
	t.Logf("long-lived connection on %s (%v)", pinned, pinnedIP)
	eps := all(func(ip string) discoveryv1.Endpoint {
		if ip == pinnedIP.String() {
			return drainingEP(ip)
		}
		return readyEP(ip)
	})
	c.putSlice(t, endpointSlice("stream", "stream-a", streamPorts, eps...))
	var want strings.Builder
	for _, ip := range topo.BackendIPs {
		fmt.Fprintf(&want, "{address: %v, terminating: %t}, ", ip, ip == pinnedIP)
	}
	got := a.await(t, `
  - name: ns/stream
    clusterIP: 10.96.0.30
    ports: [{name: stream, protocol: TCP, port: 9000, targetPort: 9000}]
    endpoints: [`+strings.TrimSuffix(want.String(), ", ")+`]
  - name: ns/web
    clusterIP: 10.96.0.10
    ports:
      - {name: http, protocol: TCP, port: 80, targetPort: 8080, nodePort: 30080}
      - {name: dns, protocol: UDP, port: 53, targetPort: 8080, nodePort: 30053}
    endpoints: [{address: 10.244.2.2}, {address: 10.244.3.2}, {address: 10.244.4.2}]
`)
	// Incremental: the one frontend of "stream" is rewritten; its backend
	// stays (its connection drains); nothing of "web" is touched.
	if got.changes != (balancer.Changes{ServicesPut: 1}) {
		t.Fatalf("terminating endpoint of one Service changed %v, want only that Service's frontend rewritten", got.changes)
	}
	checkDrain := func(when string) {
		t.Helper()
		for range 3 {
			if name, err := st.ask(); err != nil || name != pinned {
				t.Fatalf("%s: the open connection got %q (err %v), want it kept on %s", when, name, err, pinned)
			}
		}
		for range 30 {
			c, err := topo.Client.Dial("tcp", "10.96.0.30:9000", ioTimeout)
			if err != nil {
				t.Fatalf("%s: new connection: %v", when, err)
			}
			name, err := (&stream{c: c, r: bufio.NewReader(c)}).ask()
			c.Close()
			if err != nil || name == pinned {
				t.Fatalf("%s: a new connection went to %q (err %v); %s takes no new connections", when, name, err, pinned)
			}
		}
	}
	checkDrain("terminating")

	// A change to "web" touches only web's four frontends (ClusterIP and
	// NodePort, TCP and UDP) and the backend it adds.
	c.putSlice(t, endpointSlice("web", "web-a", webPorts, readyEP(topo.BackendIPs[0].String())))
	c.putSlice(t, endpointSlice("web", "web-b", webPorts, readyEP("10.244.99.2")))
	got = a.await(t, `
  - name: ns/stream
    clusterIP: 10.96.0.30
    ports: [{name: stream, protocol: TCP, port: 9000, targetPort: 9000}]
    endpoints: [`+strings.TrimSuffix(want.String(), ", ")+`]
  - name: ns/web
    clusterIP: 10.96.0.10
    ports:
      - {name: http, protocol: TCP, port: 80, targetPort: 8080, nodePort: 30080}
      - {name: dns, protocol: UDP, port: 53, targetPort: 8080, nodePort: 30053}
    endpoints: [{address: 10.244.2.2}, {address: 10.244.99.2}]
`)
	if got.changes.ServicesPut != 4 || got.changes.ServicesDeleted != 0 || got.changes.BackendsPut != 1 {
		t.Fatalf("a change to web changed %v, want its 4 frontends and the new backend", got.changes)
	}

	// The pod goes: its endpoint leaves the slice. Its TCP connection still
	// drains where it is (the datapath never moves an established flow).
	var rest []discoveryv1.Endpoint
	for _, ip := range topo.BackendIPs {
		if ip != pinnedIP {
			rest = append(rest, readyEP(ip.String()))
		}
	}
	c.putSlice(t, endpointSlice("stream", "stream-a", streamPorts, rest...))
	want.Reset()
	for _, ip := range topo.BackendIPs {
		if ip != pinnedIP {
			fmt.Fprintf(&want, "{address: %v}, ", ip)
		}
	}
	got = a.await(t, `
  - name: ns/stream
    clusterIP: 10.96.0.30
    ports: [{name: stream, protocol: TCP, port: 9000, targetPort: 9000}]
    endpoints: [`+strings.TrimSuffix(want.String(), ", ")+`]
  - name: ns/web
    clusterIP: 10.96.0.10
    ports:
      - {name: http, protocol: TCP, port: 80, targetPort: 8080, nodePort: 30080}
      - {name: dns, protocol: UDP, port: 53, targetPort: 8080, nodePort: 30053}
    endpoints: [{address: 10.244.2.2}, {address: 10.244.99.2}]
`)
	if got.changes != (balancer.Changes{BackendsDeleted: 1}) {
		t.Fatalf("removing a terminating endpoint changed %v, want only its backend entry deleted", got.changes)
	}
	checkDrain("removed")

	// Closed, the connection's sessions are garbage-collected after
	// closingIdle (1s) by the sweep `swiftlane lb` runs periodically.
	local := conn.LocalAddr().(*net.TCPAddr).AddrPort()
	conn.Close()
	ofConn := func() int {
		ss, err := lb.Datapath().Sessions()
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, s := range ss {
			if s.Key.Src == local || s.To.Dst == local {
				n++
			}
		}
		return n
	}
	if n := ofConn(); n != 2 {
		t.Fatalf("the connection has %d session entries before the sweep, want its forward and reply entries", n)
	}
	deadline := time.Now().Add(10 * time.Second)
	for ofConn() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the closed connection's sessions are still there after 10s of sweeps")
		}
		time.Sleep(200 * time.Millisecond)
		if err := lb.Sweep(); err != nil {
			t.Fatal(err)
		}
	}

	if n, err := topo.Node.ConntrackCount(); err != nil || n != 0 {
		out, _ := topo.Node.Run("conntrack", "-L")
		t.Fatalf("node has %d conntrack entries (err %v) for Service traffic, want 0:\n%s", n, err, out)
	}
	if st, err := lb.Stats(); err != nil || st.PassedToStack != 0 || st.Drops["no_backend"] != 0 {
		t.Fatalf("datapath stats %+v (err %v): every Service packet should have been translated", st, err)
	}
}

// sessionAffinity, the Local traffic policies, externalIPs,
// load-balancer ingress IPs with loadBalancerSourceRanges and the health
// check node port from real Service objects, served by the real balancer
// and health checks: b0 runs on this node (node-1), b1 and b2 on node-2.
func TestEndToEndKubernetesFeatures(t *testing.T) {
	labnet.RequireRoot(t)
	c := startCluster(t)
	topo, err := labnet.New(3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { topo.Close() })
	for i, ns := range topo.Backends {
		e, err := labnet.StartEcho(ns, fmt.Sprintf("b%d", i), echoPort)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
	}
	const node = "nodeAddresses: [198.18.0.1]\nnodeName: node-1\ninterfaces: [ext0, \"v*\"]\n"
	cfg := nodeConfig(t, node)
	lb, err := balancer.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lb.Close() })
	if err := topo.Node.Do(func() error { _, err := lb.AttachInterfaces(); return err }); err != nil {
		t.Fatal(err)
	}

	http := func(np int32) corev1.ServicePort {
		return svcPort("http", corev1.ProtocolTCP, 80, intstr.FromInt32(echoPort), np)
	}
	sticky := nodePortService("sticky", "10.96.0.40", http(30040))
	sticky.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
	sticky.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr(int32(600))}}
	local := nodePortService("local", "10.96.0.41", http(30041))
	local.Spec.Type = corev1.ServiceTypeLoadBalancer
	local.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	local.Spec.InternalTrafficPolicy = ptr(corev1.ServiceInternalTrafficPolicyLocal)
	local.Spec.ExternalIPs = []string{"203.0.113.41"}
	ext := nodePortService("ext", "10.96.0.42", http(30042))
	ext.Spec.Type = corev1.ServiceTypeLoadBalancer
	ext.Spec.ExternalIPs = []string{"203.0.113.42"}
	ext.Spec.LoadBalancerSourceRanges = []string{"198.18.0.0/24"} // the external host's, not the client pod's
	for _, s := range []*corev1.Service{sticky, local, ext} {
		c.createService(t, s)
	}
	// A cloud controller would publish these; the apiserver takes them.
	// It allocated local's health check node port (Local policy).
	var healthPort int32
	for name, ip := range map[string]string{"local": "203.0.113.51", "ext": "203.0.113.52"} {
		svc, err := c.cs.CoreV1().Services(c.ns).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if name == "local" {
			healthPort = svc.Spec.HealthCheckNodePort
		}
		svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip}}
		if _, err := c.cs.CoreV1().Services(c.ns).UpdateStatus(t.Context(), svc, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ports := []discoveryv1.EndpointPort{slicePort("http", corev1.ProtocolTCP, echoPort)}
	var eps []discoveryv1.Endpoint
	for i, ip := range topo.BackendIPs {
		e := readyEP(ip.String())
		e.NodeName = ptr(map[bool]string{true: "node-1", false: "node-2"}[i == 0])
		eps = append(eps, e)
	}
	for _, name := range []string{"sticky", "local", "ext"} {
		c.putSlice(t, endpointSlice(name, name+"-a", ports, eps...))
	}

	hc := healthcheck.New(healthcheck.Options{Host: "127.0.0.1"})
	t.Cleanup(func() { hc.Close() })
	hc.SetProxyHealthy(true)
	a := runSource(t, c.cs, Options{Node: cfg, Debounce: 20 * time.Millisecond}, func(next *services.Config) (balancer.Changes, error) {
		ch, err := lb.Apply(next)
		if err == nil {
			err = hc.Sync(next)
		}
		return ch, err
	})
	const endpoints = "[{address: 10.244.2.2, nodeName: node-1}, {address: 10.244.3.2, nodeName: node-2}, {address: 10.244.4.2, nodeName: node-2}]"
	a.awaitWith(t, node, `
  - name: ns/ext
    clusterIP: 10.96.0.42
    externalIPs: [203.0.113.42]
    loadBalancerIPs: [203.0.113.52]
    loadBalancerSourceRanges: [198.18.0.0/24]
    ports: [{name: http, protocol: TCP, port: 80, targetPort: 8080, nodePort: 30042}]
    endpoints: `+endpoints+`
  - name: ns/local
    clusterIP: 10.96.0.41
    externalTrafficPolicy: Local
    internalTrafficPolicy: Local
    externalIPs: [203.0.113.41]
    loadBalancerIPs: [203.0.113.51]
    healthCheckNodePort: `+fmt.Sprint(healthPort)+`
    ports: [{name: http, protocol: TCP, port: 80, targetPort: 8080, nodePort: 30041}]
    endpoints: `+endpoints+`
  - name: ns/sticky
    clusterIP: 10.96.0.40
    sessionAffinity: ClientIP
    sessionAffinityTimeout: 10m
    ports: [{name: http, protocol: TCP, port: 80, targetPort: 8080, nodePort: 30040}]
    endpoints: `+endpoints+`
`)

	tally := func(from labnet.NS, addr string, n int) (backends, peers map[string]int) {
		t.Helper()
		backends, peers = map[string]int{}, map[string]int{}
		for range n {
			name, peer, err := askOnce(from, "tcp", addr)
			if err != nil {
				t.Fatalf("%s: %v", addr, err)
			}
			backends[name]++
			host, _, _ := strings.Cut(peer, ":")
			peers[host]++
		}
		return backends, peers
	}
	client, external, nodeIP := topo.ClientIP.String(), topo.ExternalIP.String(), topo.NodeIP.String()
	for _, tc := range []struct {
		what, addr   string
		from         labnet.NS
		backends     int    // distinct backends wanted (1: sticky or local)
		only, seeing string // the one backend wanted, and the peer address it sees
	}{
		{"affinity, cluster IP", "10.96.0.40:80", topo.Client, 1, "", client},
		{"affinity, NodePort", nodeIP + ":30040", topo.External, 1, "", nodeIP},
		{"internalTrafficPolicy Local", "10.96.0.41:80", topo.Client, 1, "b0", client},
		{"externalTrafficPolicy Local, NodePort", nodeIP + ":30041", topo.External, 1, "b0", external},
		{"externalTrafficPolicy Local, externalIP", "203.0.113.41:80", topo.External, 1, "b0", external},
		{"externalTrafficPolicy Local, LB ingress IP", "203.0.113.51:80", topo.External, 1, "b0", external},
		{"externalIP", "203.0.113.42:80", topo.External, 3, "", nodeIP},
		{"LB ingress IP", "203.0.113.52:80", topo.External, 3, "", nodeIP},
		{"control: no affinity, no policy", "10.96.0.42:80", topo.Client, 3, "", client},
	} {
		got, peers := tally(tc.from, tc.addr, 30)
		if len(got) != tc.backends || (tc.only != "" && got[tc.only] == 0) || len(peers) != 1 || peers[tc.seeing] == 0 {
			t.Errorf("%s (%s): 30 connections reached %v seeing %v; want %d backend(s) %s seeing %s",
				tc.what, tc.addr, got, peers, tc.backends, tc.only, tc.seeing)
		}
	}
	// The client pod is outside ext's source ranges: refused at the ingress
	// IP (its SYN dropped, so only a timeout ends the wait), not at the
	// external IP.
	if conn, err := topo.Client.Dial("tcp", "203.0.113.52:80", 700*time.Millisecond); err == nil {
		conn.Close()
		t.Error("client pod outside loadBalancerSourceRanges reached the LB ingress IP")
	}
	if st, _ := lb.Stats(); st.Drops["source_range"] == 0 {
		t.Error("no source_range drop counted for the refused client")
	}
	if _, _, err := askOnce(topo.Client, "tcp", "203.0.113.42:80"); err != nil {
		t.Errorf("client pod to the same Service's external IP: %v", err)
	}
	// local's health check: b0 is its one ready endpoint on node-1.
	status, ans, err := healthAnswer(healthPort)
	if err != nil || status != 200 || ans.LocalEndpoints != 1 || ans.Service.Namespace != c.ns || ans.Service.Name != "local" {
		t.Errorf("health check of local on %d: %d %+v (%v), want 200 with one local endpoint", healthPort, status, ans, err)
	}
}

// healthAnswer asks the health check on 127.0.0.1:port.
func healthAnswer(port int32) (int, healthcheck.Answer, error) {
	var ans healthcheck.Answer
	c := http.Client{Timeout: ioTimeout}
	resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", port))
	if err != nil {
		return 0, ans, err
	}
	defer resp.Body.Close()
	err = json.NewDecoder(resp.Body).Decode(&ans)
	return resp.StatusCode, ans, err
}

// A dual-stack Service (IPv6 primary) from a real kube-apiserver with a
// dual-stack service range, served by the real balancer on both families.
func TestEndToEndKubernetesDualStack(t *testing.T) {
	labnet.RequireRoot(t)
	c := startCluster(t, kubetest.WithAPIServerArgs("--service-cluster-ip-range=10.96.0.0/12,fd00:96::/108"))
	topo, err := labnet.New(3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { topo.Close() })
	for i, ns := range topo.Backends {
		e, err := labnet.StartEcho(ns, fmt.Sprintf("b%d", i), echoPort)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}
	if node, err = c.cs.CoreV1().Nodes().Create(t.Context(), node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	node.Status.Addresses = []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: topo.NodeIP.String()},
		{Type: corev1.NodeInternalIP, Address: topo.NodeIP6.String()},
	}
	if _, err := c.cs.CoreV1().Nodes().UpdateStatus(t.Context(), node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	const settings = "ipv6: true\ninterfaces: [ext0, \"v*\"]\n"
	cfg := nodeConfig(t, settings)
	if cfg.NodeAddresses, err = NodeAddresses(t.Context(), c.cs, "node-1", true); err != nil {
		t.Fatal(err)
	}
	lb, err := balancer.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lb.Close() })
	if err := topo.Node.Do(func() error { _, err := lb.AttachInterfaces(); return err }); err != nil {
		t.Fatal(err)
	}

	dual := nodePortService("dual", "fd00:96::50", svcPort("http", corev1.ProtocolTCP, 80, intstr.FromInt32(echoPort), 30050))
	dual.Spec.ClusterIPs = []string{"fd00:96::50", "10.96.0.50"}
	policy := corev1.IPFamilyPolicyRequireDualStack
	dual.Spec.IPFamilyPolicy = &policy
	dual.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol}
	c.createService(t, dual)
	ports := []discoveryv1.EndpointPort{slicePort("http", corev1.ProtocolTCP, echoPort)}
	var v4, v6 []discoveryv1.Endpoint
	for i := range topo.BackendIPs {
		v4 = append(v4, readyEP(topo.BackendIPs[i].String()))
		v6 = append(v6, readyEP(topo.BackendIPs6[i].String()))
	}
	s6 := endpointSlice("dual", "dual-6", ports, v6...)
	s6.AddressType = discoveryv1.AddressTypeIPv6
	c.putSlice(t, s6)
	c.putSlice(t, endpointSlice("dual", "dual-4", ports, v4...))

	a := runSource(t, c.cs, Options{Node: cfg, Debounce: 20 * time.Millisecond}, lb.Apply)
	a.awaitWith(t, settings+"nodeAddresses: [198.18.0.1, \"fd00:18::1\"]\n", `
  - name: ns/dual
    clusterIP: "fd00:96::50"
    clusterIPs: ["fd00:96::50", 10.96.0.50]
    ports: [{name: http, protocol: TCP, port: 80, targetPort: 8080, nodePort: 30050}]
    endpoints: [{address: 10.244.2.2}, {address: 10.244.3.2}, {address: 10.244.4.2}, {address: "fd00:244:2::2"}, {address: "fd00:244:3::2"}, {address: "fd00:244:4::2"}]
`)
	for _, tc := range []struct {
		addr string
		from labnet.NS
		sees netip.Addr
	}{
		{"[fd00:96::50]:80", topo.Client, topo.ClientIP6},
		{"10.96.0.50:80", topo.Client, topo.ClientIP},
		{"[fd00:18::1]:30050", topo.External, topo.NodeIP6},
		{"198.18.0.1:30050", topo.External, topo.NodeIP},
	} {
		seen := map[string]bool{}
		for range 30 {
			name, peer, err := askOnce(tc.from, "tcp", tc.addr)
			if err != nil {
				t.Fatalf("%s: %v", tc.addr, err)
			}
			if ap, err := netip.ParseAddrPort(peer); err != nil || ap.Addr() != tc.sees {
				t.Fatalf("%s: backend saw %s, want %v", tc.addr, peer, tc.sees)
			}
			seen[name] = true
		}
		if len(seen) != 3 {
			t.Errorf("%s: 30 connections reached %v, want all 3 backends", tc.addr, seen)
		}
	}
}
