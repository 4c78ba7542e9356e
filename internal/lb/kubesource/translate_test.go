// SPDX-License-Identifier: Apache-2.0

package kubesource

import (
	"log/slog"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/swiftlane/swiftlane/internal/lb/services"
)

// The node settings every translation below starts from.
const nodeYAML = `
nodeAddresses: [198.18.0.1]
interfaces: [eth0]
`

func nodeConfig(t testing.TB, y string) *services.Config {
	t.Helper()
	c, err := services.Parse([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Object builders. Services default to type ClusterIP in namespace "ns".

func service(name, clusterIP string, ports ...corev1.ServicePort) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeClusterIP, ClusterIP: clusterIP, ClusterIPs: []string{clusterIP}, Ports: ports,
		},
	}
}

func nodePortService(name, clusterIP string, ports ...corev1.ServicePort) *corev1.Service {
	s := service(name, clusterIP, ports...)
	s.Spec.Type = corev1.ServiceTypeNodePort
	return s
}

func svcPort(name string, proto corev1.Protocol, port int32, target intstr.IntOrString, nodePort int32) corev1.ServicePort {
	return corev1.ServicePort{Name: name, Protocol: proto, Port: port, TargetPort: target, NodePort: nodePort}
}

func slicePort(name string, proto corev1.Protocol, port int32) discoveryv1.EndpointPort {
	return discoveryv1.EndpointPort{Name: &name, Protocol: &proto, Port: &port}
}

func endpointSlice(svc, name string, ports []discoveryv1.EndpointPort, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "ns", Name: name,
			Labels: map[string]string{discoveryv1.LabelServiceName: svc},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       ports,
		Endpoints:   eps,
	}
}

// Endpoint conditions: nil pointers are "unset" as in the API.
var (
	yes = ptr(true)
	no  = ptr(false)
)

func ptr[T any](v T) *T { return &v }

func endpoint(addr string, ready, serving, terminating *bool) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{
		Addresses:  []string{addr},
		Conditions: discoveryv1.EndpointConditions{Ready: ready, Serving: serving, Terminating: terminating},
	}
}

func readyEP(addr string) discoveryv1.Endpoint { return endpoint(addr, yes, yes, no) }

// drainingEP is a pod after its deletion, still passing readiness.
func drainingEP(addr string) discoveryv1.Endpoint { return endpoint(addr, no, yes, yes) }

// checkConfig compares got with the services of want, written in the
// static source's YAML: the Kubernetes source must produce exactly what an
// equivalent services.yaml would. It also checks got validates.
func checkConfig(t *testing.T, got *services.Config, node, wantServices string) {
	t.Helper()
	if err := got.Validate(); err != nil {
		t.Fatalf("translated config does not validate: %v", err)
	}
	want := nodeConfig(t, node+wantServices)
	g, _ := yaml.Marshal(got)
	w, _ := yaml.Marshal(want)
	if testing.Verbose() {
		t.Logf("translated:\n%s", g)
	}
	if string(g) != string(w) {
		t.Fatalf("translated config:\n%s\nwant:\n%s", g, w)
	}
}

func noteMatching(notes []Note, service, substr string) bool {
	for _, n := range notes {
		if n.Service == service && strings.Contains(n.Reason, substr) {
			return true
		}
	}
	return false
}

func TestTranslateServicesAndSlices(t *testing.T) {
	node := nodeConfig(t, nodeYAML)
	web := nodePortService("web", "10.96.0.10",
		svcPort("http", corev1.ProtocolTCP, 80, intstr.FromString("http"), 30080),
		svcPort("dns", corev1.ProtocolUDP, 53, intstr.FromInt32(5353), 30053))
	// Two slices, as the controller splits large Services; the named target
	// port is resolved by the slices.
	ports := []discoveryv1.EndpointPort{slicePort("http", corev1.ProtocolTCP, 8080), slicePort("dns", corev1.ProtocolUDP, 5353)}
	webA := endpointSlice("web", "web-a", ports, readyEP("10.244.1.2"), readyEP("10.244.2.2"))
	webB := endpointSlice("web", "web-b", ports, readyEP("10.244.3.2"))
	// A ClusterIP Service with no port name, and no slices yet: its
	// targetPort is the Service's number until endpoints say otherwise.
	empty := service("empty", "10.96.0.20", svcPort("", corev1.ProtocolTCP, 443, intstr.FromInt32(8443), 0))
	// Nothing to serve for these; a slice of an unknown Service is unused.
	headless := service("headless", corev1.ClusterIPNone, svcPort("x", corev1.ProtocolTCP, 80, intstr.FromInt32(80), 0))
	alias := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "alias"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "example.com"}}
	orphan := endpointSlice("gone", "gone-a", ports, readyEP("10.244.9.2"))
	// The same name in another namespace is another Service.
	other := service("web", "10.96.0.30", svcPort("http", corev1.ProtocolTCP, 80, intstr.FromInt32(8080), 0))
	other.Namespace = "other"
	otherSlice := endpointSlice("web", "web-x", []discoveryv1.EndpointPort{slicePort("http", corev1.ProtocolTCP, 8080)}, readyEP("10.244.7.2"))
	otherSlice.Namespace = "other"

	got, notes := Translate(node, []*corev1.Service{web, empty, headless, alias, other},
		[]*discoveryv1.EndpointSlice{webA, orphan, webB, otherSlice})
	checkConfig(t, got, nodeYAML, `
services:
  - name: ns/empty
    clusterIP: 10.96.0.20
    ports: [{protocol: TCP, port: 443, targetPort: 8443}]
    endpoints: []
  - name: ns/web
    clusterIP: 10.96.0.10
    ports:
      - {name: http, protocol: TCP, port: 80, targetPort: 8080, nodePort: 30080}
      - {name: dns, protocol: UDP, port: 53, targetPort: 5353, nodePort: 30053}
    endpoints: [{address: 10.244.1.2}, {address: 10.244.2.2}, {address: 10.244.3.2}]
  - name: other/web
    clusterIP: 10.96.0.30
    ports: [{name: http, protocol: TCP, port: 80, targetPort: 8080}]
    endpoints: [{address: 10.244.7.2}]
`)
	if !noteMatching(notes, "ns/headless", "headless") || !noteMatching(notes, "ns/alias", "ExternalName") {
		t.Fatalf("notes %v: want why headless and ExternalName are skipped", notes)
	}

	// Input order does not matter.
	svcs := []*corev1.Service{web, empty, headless, alias, other}
	eps := []*discoveryv1.EndpointSlice{webA, orphan, webB, otherSlice}
	for range 10 {
		rand.Shuffle(len(svcs), func(i, j int) { svcs[i], svcs[j] = svcs[j], svcs[i] })
		rand.Shuffle(len(eps), func(i, j int) { eps[i], eps[j] = eps[j], eps[i] })
		again, _ := Translate(node, svcs, eps)
		a, _ := yaml.Marshal(again)
		g, _ := yaml.Marshal(got)
		if string(a) != string(g) {
			t.Fatalf("shuffled input translated differently:\n%s\nvs\n%s", a, g)
		}
	}
	if len(node.Services) != 0 {
		t.Fatal("Translate modified the node settings")
	}
}

func TestTranslateEndpointConditions(t *testing.T) {
	node := nodeConfig(t, nodeYAML)
	svc := service("web", "10.96.0.10", svcPort("http", corev1.ProtocolTCP, 80, intstr.FromInt32(8080), 0))
	ports := []discoveryv1.EndpointPort{slicePort("http", corev1.ProtocolTCP, 8080)}
	a := endpointSlice("web", "web-a", ports,
		endpoint("10.244.1.2", nil, nil, nil), // all unset: ready
		drainingEP("10.244.2.2"),              // serving, terminating: drains
		endpoint("10.244.3.2", no, no, yes),   // terminating, failing readiness: gone
		endpoint("10.244.4.2", no, nil, no),   // starting up: not yet
		endpoint("10.244.5.2", no, nil, yes),  // serving unset defers to ready: gone
		endpoint("10.244.6.2", yes, yes, yes), // ready wins, whatever else it says
		drainingEP("10.244.7.2"),              // moving between slices: the ready copy wins
		discoveryv1.Endpoint{Addresses: nil},  // invalid: skipped
		endpoint("not-an-ip", yes, yes, no),   // invalid: skipped
		endpoint("fd00::1", yes, yes, no),     // not IPv4: skipped
	)
	b := endpointSlice("web", "web-b", ports, readyEP("10.244.7.2"))
	got, _ := Translate(node, []*corev1.Service{svc}, []*discoveryv1.EndpointSlice{a, b})
	checkConfig(t, got, nodeYAML, `
services:
  - name: ns/web
    clusterIP: 10.96.0.10
    ports: [{name: http, protocol: TCP, port: 80, targetPort: 8080}]
    endpoints:
      - {address: 10.244.1.2}
      - {address: 10.244.2.2, terminating: true}
      - {address: 10.244.6.2}
      - {address: 10.244.7.2}
`)
}

// Serving terminating endpoints stay terminating when nothing is ready:
// the balancer then gives them new connections (kube-proxy's fallback,
// TestDesiredTerminatingFallback) while a health check does not count
// them; once one endpoint is ready again they drain.
func TestTranslateTerminatingFallback(t *testing.T) {
	node := nodeConfig(t, nodeYAML)
	svc := service("web", "10.96.0.10", svcPort("http", corev1.ProtocolTCP, 80, intstr.FromInt32(8080), 0))
	ports := []discoveryv1.EndpointPort{slicePort("http", corev1.ProtocolTCP, 8080)}
	old := endpointSlice("web", "web-a", ports, drainingEP("10.244.1.2"), endpoint("10.244.2.2", no, no, yes))
	got, _ := Translate(node, []*corev1.Service{svc}, []*discoveryv1.EndpointSlice{old})
	checkConfig(t, got, nodeYAML, `
services:
  - name: ns/web
    clusterIP: 10.96.0.10
    ports: [{name: http, protocol: TCP, port: 80, targetPort: 8080}]
    endpoints: [{address: 10.244.1.2, terminating: true}]
`)
	starting := endpointSlice("web", "web-b", ports, endpoint("10.244.3.2", no, no, no))
	got, _ = Translate(node, []*corev1.Service{svc}, []*discoveryv1.EndpointSlice{old, starting})
	checkConfig(t, got, nodeYAML, `
services:
  - name: ns/web
    clusterIP: 10.96.0.10
    ports: [{name: http, protocol: TCP, port: 80, targetPort: 8080}]
    endpoints: [{address: 10.244.1.2, terminating: true}]
`)
	next := endpointSlice("web", "web-b", ports, readyEP("10.244.3.2"))
	got, _ = Translate(node, []*corev1.Service{svc}, []*discoveryv1.EndpointSlice{old, next})
	checkConfig(t, got, nodeYAML, `
services:
  - name: ns/web
    clusterIP: 10.96.0.10
    ports: [{name: http, protocol: TCP, port: 80, targetPort: 8080}]
    endpoints: [{address: 10.244.1.2, terminating: true}, {address: 10.244.3.2}]
`)
}

// Pods that lack a named port are in slices without it: each Service port
// gets exactly the endpoints that have it, so the Service is split into
// one services.Service per distinct endpoint set.
func TestTranslatePortsWithDifferentEndpoints(t *testing.T) {
	node := nodeConfig(t, nodeYAML)
	svc := service("web", "10.96.0.10",
		svcPort("http", corev1.ProtocolTCP, 80, intstr.FromString("http"), 0),
		svcPort("metrics", corev1.ProtocolTCP, 9100, intstr.FromString("metrics"), 0),
		svcPort("dns", corev1.ProtocolUDP, 53, intstr.FromString("dns"), 0))
	both := endpointSlice("web", "web-a", []discoveryv1.EndpointPort{
		slicePort("http", corev1.ProtocolTCP, 8080), slicePort("metrics", corev1.ProtocolTCP, 9100), slicePort("dns", corev1.ProtocolUDP, 5353),
	}, readyEP("10.244.1.2"))
	httpOnly := endpointSlice("web", "web-b", []discoveryv1.EndpointPort{
		slicePort("http", corev1.ProtocolTCP, 8080), slicePort("dns", corev1.ProtocolUDP, 5353),
	}, readyEP("10.244.2.2"))
	// A slice port whose protocol differs is another port.
	wrongProto := endpointSlice("web", "web-c", []discoveryv1.EndpointPort{slicePort("metrics", corev1.ProtocolUDP, 9100)}, readyEP("10.244.3.2"))
	got, _ := Translate(node, []*corev1.Service{svc}, []*discoveryv1.EndpointSlice{both, httpOnly, wrongProto})
	checkConfig(t, got, nodeYAML, `
services:
  - name: ns/web:http,dns
    clusterIP: 10.96.0.10
    ports:
      - {name: http, protocol: TCP, port: 80, targetPort: 8080}
      - {name: dns, protocol: UDP, port: 53, targetPort: 5353}
    endpoints: [{address: 10.244.1.2}, {address: 10.244.2.2}]
  - name: ns/web:metrics
    clusterIP: 10.96.0.10
    ports: [{name: metrics, protocol: TCP, port: 9100, targetPort: 9100}]
    endpoints: [{address: 10.244.1.2}]
`)
}

// A named targetPort that resolves to different numbers (a rollout that
// moves the container port): one target port per Service port is all a
// services.Port holds, so the number most ready endpoints use wins and the
// rest is reported.
func TestTranslateMixedTargetPorts(t *testing.T) {
	node := nodeConfig(t, nodeYAML)
	svc := service("web", "10.96.0.10", svcPort("http", corev1.ProtocolTCP, 80, intstr.FromString("http"), 0))
	oldPods := endpointSlice("web", "web-a", []discoveryv1.EndpointPort{slicePort("http", corev1.ProtocolTCP, 8080)},
		readyEP("10.244.1.2"), drainingEP("10.244.2.2"), drainingEP("10.244.3.2"))
	newPods := endpointSlice("web", "web-b", []discoveryv1.EndpointPort{slicePort("http", corev1.ProtocolTCP, 9090)},
		readyEP("10.244.4.2"), readyEP("10.244.5.2"))
	got, notes := Translate(node, []*corev1.Service{svc}, []*discoveryv1.EndpointSlice{oldPods, newPods})
	checkConfig(t, got, nodeYAML, `
services:
  - name: ns/web
    clusterIP: 10.96.0.10
    ports: [{name: http, protocol: TCP, port: 80, targetPort: 9090}]
    endpoints: [{address: 10.244.4.2}, {address: 10.244.5.2}]
`)
	if !noteMatching(notes, "ns/web", "8080: 3 endpoints") {
		t.Fatalf("notes %v: want the dropped target port reported", notes)
	}
}

func TestTranslateUnsupported(t *testing.T) {
	node := nodeConfig(t, nodeYAML)
	ports := []discoveryv1.EndpointPort{slicePort("http", corev1.ProtocolTCP, 8080)}
	http := svcPort("http", corev1.ProtocolTCP, 80, intstr.FromInt32(8080), 0)

	v6 := service("v6", "fd00::10", http)
	v6.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol}

	dual := nodePortService("dual", "10.96.0.11", svcPort("http", corev1.ProtocolTCP, 80, intstr.FromInt32(8080), 30080))
	dual.Spec.ClusterIPs = []string{"fd00::11", "10.96.0.11"} // IPv6 primary
	dual.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	dual.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
	dualV6 := endpointSlice("dual", "dual-6", ports, readyEP("fd00::2"))
	dualV6.AddressType = discoveryv1.AddressTypeIPv6
	dualV4 := endpointSlice("dual", "dual-4", ports, readyEP("10.244.1.2"))

	mixed := nodePortService("mixed", "10.96.0.12",
		svcPort("http", corev1.ProtocolTCP, 80, intstr.FromInt32(8080), 8080), // NodePort outside the node's range
		svcPort("sctp", corev1.ProtocolSCTP, 9, intstr.FromInt32(9), 30009))
	mixed.Spec.ExternalIPs = []string{"192.0.2.50"}
	mixed.Spec.InternalTrafficPolicy = ptr(corev1.ServiceInternalTrafficPolicyLocal)

	lb := nodePortService("lb", "10.96.0.13", svcPort("http", corev1.ProtocolTCP, 80, intstr.FromInt32(8080), 30081))
	lb.Spec.Type = corev1.ServiceTypeLoadBalancer
	lb.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.60"}}
	fqdn := endpointSlice("lb", "lb-fqdn", ports, readyEP("backend.example.com"))
	fqdn.AddressType = discoveryv1.AddressTypeFQDN

	got, notes := Translate(node, []*corev1.Service{v6, dual, mixed, lb}, []*discoveryv1.EndpointSlice{dualV6, dualV4, fqdn})
	checkConfig(t, got, nodeYAML, `
services:
  - name: ns/dual
    clusterIP: 10.96.0.11
    sessionAffinity: ClientIP
    ports: [{name: http, protocol: TCP, port: 80, targetPort: 8080, nodePort: 30080}]
    endpoints: [{address: 10.244.1.2}]
  - name: ns/lb
    clusterIP: 10.96.0.13
    loadBalancerIPs: [192.0.2.60]
    ports: [{name: http, protocol: TCP, port: 80, targetPort: 8080, nodePort: 30081}]
    endpoints: []
  - name: ns/mixed
    clusterIP: 10.96.0.12
    externalIPs: [192.0.2.50]
    ports: [{name: http, protocol: TCP, port: 80, targetPort: 8080}]
    endpoints: []
`)
	for _, want := range []struct{ svc, substr string }{
		{"ns/v6", "no IPv4 cluster IP (fd00::10)"},
		{"ns/dual", "IPv6 cluster IP fd00::11 not served"},
		// This node's name is unknown here (no --node): nothing is local.
		{"ns/dual", "externalTrafficPolicy Local served as Cluster: this node's name is unknown"},
		{"ns/mixed", "nodePort 8080 not served: outside nodePortRange 30000-32767"},
		{"ns/mixed", "protocol SCTP is not supported"},
		{"ns/mixed", "internalTrafficPolicy Local served as Cluster"},
		{"ns/lb", "FQDN"},
	} {
		if !noteMatching(notes, want.svc, want.substr) {
			t.Errorf("no note for %s containing %q in:\n%v", want.svc, want.substr, notes)
		}
	}

	// Without node addresses NodePorts cannot be served, nor external IPs
	// with externalTrafficPolicy Cluster (no SNAT source); the cluster IP is.
	bare := nodeConfig(t, "interfaces: [eth0]\n")
	got, notes = Translate(bare, []*corev1.Service{lb}, nil)
	checkConfig(t, got, "interfaces: [eth0]\n", `
services:
  - name: ns/lb
    clusterIP: 10.96.0.13
    ports: [{name: http, protocol: TCP, port: 80, targetPort: 8080}]
    endpoints: []
`)
	if !noteMatching(notes, "ns/lb", "no node addresses") || !noteMatching(notes, "ns/lb", "load-balancer ingress IPs [192.0.2.60] not served: no node address") {
		t.Fatalf("notes %v: want why the NodePort and the ingress IP are not served", notes)
	}
}

// Every port and condition combination translates to a Config that
// validates: the Source never has to reject what it built.
func TestTranslateAlwaysValidates(t *testing.T) {
	node := nodeConfig(t, nodeYAML)
	r := rand.New(rand.NewPCG(1, 2))
	conds := []*bool{nil, yes, no}
	for i := range 200 {
		var svcs []*corev1.Service
		var eps []*discoveryv1.EndpointSlice
		for s := range 1 + r.IntN(4) {
			name := string(rune('a' + s))
			var ports []corev1.ServicePort
			var sp []discoveryv1.EndpointPort
			for p := range 1 + r.IntN(3) {
				proto := []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP}[r.IntN(3)]
				np := int32(0)
				if r.IntN(2) == 0 {
					np = int32(29990 + 10*s + p) // sometimes outside the range
				}
				pn := string(rune('p' + p))
				ports = append(ports, svcPort(pn, proto, int32(80+p), intstr.FromString(pn), np))
				sp = append(sp, slicePort(pn, proto, int32(8000+r.IntN(3))))
			}
			svc := nodePortService(name, "10.96.0."+string(rune('1'+s)), ports...)
			// External IPs from a small pool (so Services clash), and
			// every affinity and policy setting.
			for range r.IntN(3) {
				svc.Spec.ExternalIPs = append(svc.Spec.ExternalIPs, []string{"203.0.113.1", "203.0.113.2", "198.18.0.1", "2001:db8::1"}[r.IntN(4)])
			}
			if r.IntN(2) == 0 {
				svc.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
				svc.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr(int32(r.IntN(90000)))}}
			}
			if r.IntN(2) == 0 {
				svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
				svc.Spec.InternalTrafficPolicy = ptr(corev1.ServiceInternalTrafficPolicyLocal)
			}
			// Load balancers: ingress IPs from the same pool, source
			// ranges good and bad, and a health check with Local.
			if r.IntN(2) == 0 {
				svc.Spec.Type = corev1.ServiceTypeLoadBalancer
				for range r.IntN(3) {
					ip := []string{"203.0.113.1", "203.0.113.2", "198.18.0.1", "2001:db8::1"}[r.IntN(4)]
					svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
				}
				for range r.IntN(3) {
					cidr := []string{"192.0.2.0/24", " 10.0.0.0/8 ", "bogus", "2001:db8::/32", "::ffff:10.0.0.0/104"}[r.IntN(5)]
					svc.Spec.LoadBalancerSourceRanges = append(svc.Spec.LoadBalancerSourceRanges, cidr)
				}
				if svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal {
					svc.Spec.HealthCheckNodePort = int32(31000 + s)
				}
			}
			svcs = append(svcs, svc)
			for k := range r.IntN(3) {
				var list []discoveryv1.Endpoint
				for range r.IntN(4) {
					list = append(list, endpoint("10.244.0."+string(rune('1'+r.IntN(8))), conds[r.IntN(3)], conds[r.IntN(3)], conds[r.IntN(3)]))
				}
				keep := sp[:1+r.IntN(len(sp))]
				eps = append(eps, endpointSlice(name, name+string(rune('0'+k)), keep, list...))
			}
		}
		n := node
		switch i % 3 {
		case 1: // Local policies need this node's name to apply
			n = nodeConfig(t, nodeYAML+"nodeName: node-a\n")
		case 2: // IPv6 external IPs without an IPv6 node address
			n = nodeConfig(t, nodeYAML+"nodeName: node-a\nipv6: true\n")
		}
		got, _ := Translate(n, svcs, eps)
		if err := got.Validate(); err != nil {
			y, _ := yaml.Marshal(got)
			t.Fatalf("case %d: %v\n%s", i, err, y)
		}
	}
}

func TestTranslateSelectionAnnotation(t *testing.T) {
	node := nodeConfig(t, nodeYAML)
	http := svcPort("http", corev1.ProtocolTCP, 80, intstr.FromInt32(8080), 0)
	maglev := service("hashed", "10.96.0.40", http)
	maglev.Annotations = map[string]string{SelectionAnnotation: "maglev"}
	typo := service("typo", "10.96.0.41", http)
	typo.Annotations = map[string]string{SelectionAnnotation: "Maglev"}
	plain := service("plain", "10.96.0.42", http)

	got, notes := Translate(node, []*corev1.Service{maglev, typo, plain}, nil)
	checkConfig(t, got, nodeYAML, `
services:
  - {name: ns/hashed, clusterIP: 10.96.0.40, selection: maglev, ports: [{name: http, port: 80, targetPort: 8080}], endpoints: []}
  - {name: ns/plain, clusterIP: 10.96.0.42, ports: [{name: http, port: 80, targetPort: 8080}], endpoints: []}
  - {name: ns/typo, clusterIP: 10.96.0.41, selection: random, ports: [{name: http, port: 80, targetPort: 8080}], endpoints: []}
`)
	if !noteMatching(notes, "ns/typo", `swiftlane.io/lb-selection="Maglev": use random or maglev`) {
		t.Fatalf("notes %v: want the unknown selection named with the fix", notes)
	}
	if noteMatching(notes, "ns/hashed", "selection") {
		t.Fatalf("notes %v: a valid annotation is not worth a note", notes)
	}
}

// sessionAffinity, the Local traffic policies, externalIPs and load-balancer
// ingress IPs, translated as kube-proxy serves them.
func TestTranslateKubeProxyFeatures(t *testing.T) {
	const node = "nodeAddresses: [198.18.0.1]\nnodeName: node-a\ninterfaces: [eth0]\n"
	nc := nodeConfig(t, node)
	ports := []discoveryv1.EndpointPort{slicePort("http", corev1.ProtocolTCP, 8080)}
	on := func(e discoveryv1.Endpoint, n string) discoveryv1.Endpoint { e.NodeName = &n; return e }

	web := nodePortService("web", "10.96.0.10", svcPort("http", corev1.ProtocolTCP, 80, intstr.FromInt32(8080), 30080))
	web.Spec.Type = corev1.ServiceTypeLoadBalancer
	web.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
	web.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr(int32(60))}}
	web.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	web.Spec.InternalTrafficPolicy = ptr(corev1.ServiceInternalTrafficPolicyLocal)
	web.Spec.ExternalIPs = []string{"203.0.113.1", "2001:db8::1"}
	proxy := corev1.LoadBalancerIPModeProxy
	web.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{
		{IP: "203.0.113.2"}, {IP: "203.0.113.1"}, {IP: "203.0.113.3", IPMode: &proxy}, {Hostname: "lb.example.com"},
	}
	webEPs := endpointSlice("web", "web-a", ports, on(readyEP("10.244.1.2"), "node-a"), on(readyEP("10.244.2.2"), "node-b"))

	// Its external IP clashes with web's: web keeps it (name order).
	other := service("zz-other", "10.96.0.11", svcPort("http", corev1.ProtocolTCP, 80, intstr.FromInt32(8080), 0))
	other.Spec.ExternalIPs = []string{"203.0.113.1", "203.0.113.9"}

	got, notes := Translate(nc, []*corev1.Service{other, web}, []*discoveryv1.EndpointSlice{webEPs})
	checkConfig(t, got, node, `
services:
  - name: ns/web
    clusterIP: 10.96.0.10
    sessionAffinity: ClientIP
    sessionAffinityTimeout: 1m
    externalTrafficPolicy: Local
    internalTrafficPolicy: Local
    externalIPs: [203.0.113.1]
    loadBalancerIPs: [203.0.113.2]
    ports: [{name: http, protocol: TCP, port: 80, targetPort: 8080, nodePort: 30080}]
    endpoints: [{address: 10.244.1.2, nodeName: node-a}, {address: 10.244.2.2, nodeName: node-b}]
  - name: ns/zz-other
    clusterIP: 10.96.0.11
    externalIPs: [203.0.113.9]
    ports: [{name: http, protocol: TCP, port: 80, targetPort: 8080}]
    endpoints: []
`)
	for _, want := range []struct{ svc, substr string }{
		{"ns/web", "externalIP 2001:db8::1 not served (IPv6 is off"},
		{"ns/web", "203.0.113.3 has ipMode Proxy"},
		{"ns/web", `ingress "lb.example.com" has no IP`},
		{"ns/zz-other", "external IP 203.0.113.1 not served: 203.0.113.1:80/TCP is already ns/web's"},
		{"ns/web", "ingress IP 203.0.113.1 is also an externalIP"},
	} {
		if !noteMatching(notes, want.svc, want.substr) {
			t.Errorf("no note for %s containing %q in:\n%v", want.svc, want.substr, notes)
		}
	}
	// No timeout given: Kubernetes' default.
	web.Spec.SessionAffinityConfig = nil
	got, _ = Translate(nc, []*corev1.Service{web}, nil)
	if d := got.Services[0].SessionAffinityTimeout; d != 3*time.Hour {
		t.Fatalf("default affinity timeout %v, want 3h (10800 s)", d)
	}
}

// loadBalancerSourceRanges reach the load-balancer IPs: trimmed and
// masked; a bad one is left out with an error naming the Service and the
// field, and the rest still apply; none usable leaves the IPs unserved
// rather than open. healthCheckNodePort comes with externalTrafficPolicy
// Local.
func TestTranslateSourceRangesAndHealthCheck(t *testing.T) {
	const node = "nodeAddresses: [198.18.0.1]\nnodeName: node-a\ninterfaces: [eth0]\n"
	nc := nodeConfig(t, node)
	lb := func(name, ip string, ranges ...string) *corev1.Service {
		svc := nodePortService(name, "10.96.0."+ip, svcPort("http", corev1.ProtocolTCP, 80, intstr.FromInt32(8080), 30000+int32(len(name))))
		svc.Spec.Type = corev1.ServiceTypeLoadBalancer
		svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113." + ip}}
		svc.Spec.LoadBalancerSourceRanges = ranges
		return svc
	}
	guarded := lb("guarded", "1", " 192.0.2.9/24", "not-a-cidr", "2001:db8::/32")
	guarded.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	guarded.Spec.HealthCheckNodePort = 32100
	broken := lb("broken-ranges", "2", "10.0.0.0/33")
	got, notes := Translate(nc, []*corev1.Service{guarded, broken}, nil)
	checkConfig(t, got, node, `
services:
  - name: ns/broken-ranges
    clusterIP: 10.96.0.2
    ports: [{name: http, protocol: TCP, port: 80, targetPort: 8080, nodePort: 30013}]
    endpoints: []
  - name: ns/guarded
    clusterIP: 10.96.0.1
    externalTrafficPolicy: Local
    loadBalancerIPs: [203.0.113.1]
    loadBalancerSourceRanges: [192.0.2.0/24]
    healthCheckNodePort: 32100
    ports: [{name: http, protocol: TCP, port: 80, targetPort: 8080, nodePort: 30007}]
    endpoints: []
`)
	for _, want := range []struct{ svc, substr string }{
		{"ns/guarded", `spec.loadBalancerSourceRanges[1] "not-a-cidr" is not a CIDR`},
		{"ns/broken-ranges", `spec.loadBalancerSourceRanges[0] "10.0.0.0/33" is not a CIDR`},
		{"ns/broken-ranges", "load-balancer ingress IPs [203.0.113.2] not served: spec.loadBalancerSourceRanges has no usable range"},
	} {
		if !noteMatching(notes, want.svc, want.substr) {
			t.Errorf("no note for %s containing %q in:\n%v", want.svc, want.substr, notes)
		}
	}
	for _, n := range notes {
		if strings.Contains(n.Reason, "loadBalancerSourceRanges[") && n.Level != slog.LevelError {
			t.Errorf("note %q at level %v, want an error", n, n.Level)
		}
	}
}

// With ipv6: true in the node settings a dual-stack Service is served on
// both cluster IPs, primary family first, with both families' endpoints.
func TestTranslateDualStack(t *testing.T) {
	const node = "ipv6: true\nnodeAddresses: [198.18.0.1, \"fd00:18::1\"]\ninterfaces: [eth0]\n"
	nc := nodeConfig(t, node)
	ports := []discoveryv1.EndpointPort{slicePort("http", corev1.ProtocolTCP, 8080)}
	dual := nodePortService("dual", "fd00:96::11", svcPort("http", corev1.ProtocolTCP, 80, intstr.FromInt32(8080), 30080))
	dual.Spec.ClusterIPs = []string{"fd00:96::11", "10.96.0.11"} // IPv6 primary
	dual.Spec.ExternalIPs = []string{"2001:db8::7"}
	v6 := endpointSlice("dual", "dual-6", ports, readyEP("fd00:244:2::2"))
	v6.AddressType = discoveryv1.AddressTypeIPv6
	v4 := endpointSlice("dual", "dual-4", ports, readyEP("10.244.2.2"))
	got, notes := Translate(nc, []*corev1.Service{dual}, []*discoveryv1.EndpointSlice{v6, v4})
	checkConfig(t, got, node, `
services:
  - name: ns/dual
    clusterIP: "fd00:96::11"
    clusterIPs: ["fd00:96::11", 10.96.0.11]
    externalIPs: ["2001:db8::7"]
    ports: [{name: http, protocol: TCP, port: 80, targetPort: 8080, nodePort: 30080}]
    endpoints: [{address: 10.244.2.2}, {address: "fd00:244:2::2"}]
`)
	if len(notes) != 0 {
		t.Fatalf("notes %v: a dual-stack Service with IPv6 on is served whole", notes)
	}
}
