// SPDX-License-Identifier: Apache-2.0

package kubesource

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/swiftlane/swiftlane/internal/kubetest"
	"github.com/swiftlane/swiftlane/internal/lb/balancer"
	"github.com/swiftlane/swiftlane/internal/lb/services"
)

// cluster is a real kube-apiserver with one namespace for the test.
type cluster struct {
	env *kubetest.Env
	cs  kubernetes.Interface
	ns  string
}

func startCluster(t *testing.T, opts ...kubetest.Option) *cluster {
	t.Helper()
	// kubetest starts etcd and kube-apiserver with Pdeathsig, which the
	// kernel sends when the forking *thread* exits; labnet's NS.Do ends
	// the threads it switched into a namespace. Pin the test goroutine to
	// its thread until the control plane is stopped (cleanups run last
	// first), so no NS.Do can inherit and end the forking thread.
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	env := kubetest.Start(t, opts...)
	c := &cluster{env: env, cs: kubernetes.NewForConfigOrDie(env.RESTConfig()), ns: "ns"}
	if _, err := c.cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: c.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *cluster) createService(t *testing.T, s *corev1.Service) {
	t.Helper()
	s = s.DeepCopy()
	s.Namespace = c.ns
	if _, err := c.cs.CoreV1().Services(c.ns).Create(t.Context(), s, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create service %s: %v", s.Name, err)
	}
}

func (c *cluster) putSlice(t *testing.T, s *discoveryv1.EndpointSlice) {
	t.Helper()
	s = s.DeepCopy()
	s.Namespace = c.ns
	api := c.cs.DiscoveryV1().EndpointSlices(c.ns)
	cur, err := api.Get(t.Context(), s.Name, metav1.GetOptions{})
	if err == nil {
		s.ResourceVersion = cur.ResourceVersion
		_, err = api.Update(t.Context(), s, metav1.UpdateOptions{})
	} else {
		_, err = api.Create(t.Context(), s, metav1.CreateOptions{})
	}
	if err != nil {
		t.Fatalf("put endpointslice %s: %v", s.Name, err)
	}
}

// applied records what a Source hands to its apply function, and what the
// balancer (when there is one) changed for it.
type applied struct {
	ch      chan appliedConfig
	program func(*services.Config) (balancer.Changes, error) // nil: record only
	mu      sync.Mutex
	n       int
}

type appliedConfig struct {
	cfg     *services.Config
	changes balancer.Changes
}

func (a *applied) apply(c *services.Config) error {
	var ch balancer.Changes
	if a.program != nil {
		var err error
		if ch, err = a.program(c); err != nil {
			return err
		}
	}
	a.mu.Lock()
	a.n++
	a.mu.Unlock()
	a.ch <- appliedConfig{c, ch}
	return nil
}

// next waits for the next applied Config.
func (a *applied) next(t *testing.T) appliedConfig {
	t.Helper()
	select {
	case c := <-a.ch:
		return c
	case <-time.After(30 * time.Second):
		t.Fatal("nothing applied within 30s")
		return appliedConfig{}
	}
}

func (a *applied) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.n
}

// runSource runs a Source until the test ends.
// program, if not nil, is the balancer's Apply.
func runSource(t *testing.T, cs kubernetes.Interface, o Options, program func(*services.Config) (balancer.Changes, error)) *applied {
	t.Helper()
	src, err := New(cs, o)
	if err != nil {
		t.Fatal(err)
	}
	a := &applied{ch: make(chan appliedConfig, 1000), program: program}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, a.apply) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return a
}

// servicesYAML renders the Services of a Config in the test's namespace
// (the apiserver adds default/kubernetes), for comparisons and failure
// messages.
func servicesYAML(c *services.Config) string {
	var mine []services.Service
	for _, s := range c.Services {
		if strings.HasPrefix(s.Name, "ns/") {
			mine = append(mine, s)
		}
	}
	y, _ := yaml.Marshal(mine)
	return string(y)
}

// await waits for an applied Config whose Services equal want's (a YAML
// services list, as in a services.yaml) and returns it.
func (a *applied) await(t *testing.T, want string) appliedConfig {
	t.Helper()
	return a.awaitWith(t, nodeYAML, want)
}

// awaitWith is await with node settings node (e.g. with a nodeName).
func (a *applied) awaitWith(t *testing.T, node, want string) appliedConfig {
	t.Helper()
	w := nodeConfig(t, node+"services: "+want)
	ws := servicesYAML(w)
	timeout := time.After(30 * time.Second)
	var last *services.Config
	for {
		select {
		case c := <-a.ch:
			last = c.cfg
			if servicesYAML(c.cfg) == ws {
				return c
			}
		case <-timeout:
			got := "(nothing applied)"
			if last != nil {
				got = servicesYAML(last)
			}
			t.Fatalf("no applied config matched within 30s; last:\n%s\nwant:\n%s", got, ws)
		}
	}
}

func webService() *corev1.Service {
	return nodePortService("web", "10.96.0.10",
		svcPort("http", corev1.ProtocolTCP, 80, intstr.FromString("http"), 30080),
		svcPort("dns", corev1.ProtocolUDP, 53, intstr.FromInt32(5353), 30053))
}

var webPorts = []discoveryv1.EndpointPort{slicePort("http", corev1.ProtocolTCP, 8080), slicePort("dns", corev1.ProtocolUDP, 5353)}

// The Source against a real kube-apiserver: the first Config comes once the
// caches are in sync and holds what existed before; then every kind of
// change reaches the balancer's Config.
func TestSourceFollowsServicesAndSlices(t *testing.T) {
	c := startCluster(t)
	c.createService(t, webService())
	c.putSlice(t, endpointSlice("web", "web-a", webPorts, readyEP("10.244.1.2"), readyEP("10.244.2.2")))
	headless := service("headless", corev1.ClusterIPNone, svcPort("x", corev1.ProtocolTCP, 80, intstr.FromInt32(80), 0))
	c.createService(t, headless)
	// Another proxy's Service: kube-proxy's convention, honoured here too.
	theirs := service("theirs", "10.96.0.40", svcPort("http", corev1.ProtocolTCP, 80, intstr.FromInt32(8080), 0))
	theirs.Labels = map[string]string{LabelServiceProxyName: "other-proxy"}
	c.createService(t, theirs)
	c.putSlice(t, endpointSlice("theirs", "theirs-a", []discoveryv1.EndpointPort{slicePort("http", corev1.ProtocolTCP, 8080)}, readyEP("10.244.9.2")))

	a := runSource(t, c.cs, Options{Node: nodeConfig(t, nodeYAML), Debounce: 20 * time.Millisecond}, nil)
	first := a.next(t)
	want := `
  - name: ns/web
    clusterIP: 10.96.0.10
    ports:
      - {name: http, protocol: TCP, port: 80, targetPort: 8080, nodePort: 30080}
      - {name: dns, protocol: UDP, port: 53, targetPort: 5353, nodePort: 30053}
    endpoints: [{address: 10.244.1.2}, {address: 10.244.2.2}]
`
	if w := servicesYAML(nodeConfig(t, nodeYAML+"services: "+want)); servicesYAML(first.cfg) != w {
		t.Fatalf("first applied config is not the synced state:\n%s\nwant:\n%s", servicesYAML(first.cfg), w)
	}

	// A second slice joins; one endpoint of the first starts terminating.
	c.putSlice(t, endpointSlice("web", "web-b", webPorts, readyEP("10.244.3.2")))
	c.putSlice(t, endpointSlice("web", "web-a", webPorts, readyEP("10.244.1.2"), drainingEP("10.244.2.2")))
	a.await(t, `
  - name: ns/web
    clusterIP: 10.96.0.10
    ports:
      - {name: http, protocol: TCP, port: 80, targetPort: 8080, nodePort: 30080}
      - {name: dns, protocol: UDP, port: 53, targetPort: 5353, nodePort: 30053}
    endpoints: [{address: 10.244.1.2}, {address: 10.244.2.2, terminating: true}, {address: 10.244.3.2}]
`)

	// A new Service, and a slice moved to it by relabelling: both Services
	// are translated again.
	other := service("other", "10.96.0.20", svcPort("http", corev1.ProtocolTCP, 80, intstr.FromInt32(8080), 0))
	c.createService(t, other)
	c.putSlice(t, endpointSlice("other", "web-b", webPorts, readyEP("10.244.3.2")))
	a.await(t, `
  - name: ns/other
    clusterIP: 10.96.0.20
    ports: [{name: http, protocol: TCP, port: 80, targetPort: 8080}]
    endpoints: [{address: 10.244.3.2}]
  - name: ns/web
    clusterIP: 10.96.0.10
    ports:
      - {name: http, protocol: TCP, port: 80, targetPort: 8080, nodePort: 30080}
      - {name: dns, protocol: UDP, port: 53, targetPort: 5353, nodePort: 30053}
    endpoints: [{address: 10.244.1.2}, {address: 10.244.2.2, terminating: true}]
`)

	// A Service changes its ports; a slice is deleted.
	s, err := c.cs.CoreV1().Services(c.ns).Get(t.Context(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Spec.Ports = s.Spec.Ports[:1]
	if _, err := c.cs.CoreV1().Services(c.ns).Update(t.Context(), s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.cs.DiscoveryV1().EndpointSlices(c.ns).Delete(t.Context(), "web-b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	a.await(t, `
  - name: ns/other
    clusterIP: 10.96.0.20
    ports: [{name: http, protocol: TCP, port: 80, targetPort: 8080}]
    endpoints: []
  - name: ns/web
    clusterIP: 10.96.0.10
    ports: [{name: http, protocol: TCP, port: 80, targetPort: 8080, nodePort: 30080}]
    endpoints: [{address: 10.244.1.2}, {address: 10.244.2.2, terminating: true}]
`)

	// Deleting a Service removes it even though its slices remain (the
	// garbage collector, absent here, would delete them later).
	if err := c.cs.CoreV1().Services(c.ns).Delete(t.Context(), "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	a.await(t, `
  - name: ns/other
    clusterIP: 10.96.0.20
    ports: [{name: http, protocol: TCP, port: 80, targetPort: 8080}]
    endpoints: []
`)
}

// With ProxyName set, only the Services labelled for it are served: the
// load balancer next to kube-proxy, each with its own Services.
func TestSourceProxyName(t *testing.T) {
	c := startCluster(t)
	mine := service("mine", "10.96.0.30", svcPort("http", corev1.ProtocolTCP, 80, intstr.FromInt32(8080), 0))
	mine.Labels = map[string]string{LabelServiceProxyName: "swiftlane"}
	c.createService(t, mine)
	c.createService(t, service("kube-proxys", "10.96.0.31", svcPort("http", corev1.ProtocolTCP, 80, intstr.FromInt32(8080), 0)))
	// Slices need not carry the Service's labels: they are joined by name.
	c.putSlice(t, endpointSlice("mine", "mine-a", []discoveryv1.EndpointPort{slicePort("http", corev1.ProtocolTCP, 8080)}, readyEP("10.244.1.2")))
	c.putSlice(t, endpointSlice("kube-proxys", "kp-a", []discoveryv1.EndpointPort{slicePort("http", corev1.ProtocolTCP, 8080)}, readyEP("10.244.2.2")))

	a := runSource(t, c.cs, Options{Node: nodeConfig(t, nodeYAML), ProxyName: "swiftlane", Debounce: 20 * time.Millisecond}, nil)
	a.await(t, `
  - name: ns/mine
    clusterIP: 10.96.0.30
    ports: [{name: http, protocol: TCP, port: 80, targetPort: 8080}]
    endpoints: [{address: 10.244.1.2}]
`)
	// Taking the label off hands the Service back to kube-proxy.
	s, err := c.cs.CoreV1().Services(c.ns).Get(t.Context(), "mine", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Labels = nil
	if _, err := c.cs.CoreV1().Services(c.ns).Update(t.Context(), s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	a.await(t, "[]\n")
}

// A burst of changes is applied together: with a debounce window far longer
// than the burst, the changes land in at most two applies (a window may
// open just before the burst) instead of one per change.
func TestSourceDebouncesBursts(t *testing.T) {
	c := startCluster(t)
	c.createService(t, webService())
	const debounce = time.Second
	a := runSource(t, c.cs, Options{Node: nodeConfig(t, nodeYAML), Debounce: debounce}, nil)
	a.next(t) // the synced state
	before := a.count()

	const changes = 10
	start := time.Now()
	for i := range changes {
		c.putSlice(t, endpointSlice("web", "web-a", webPorts, readyEP(fmt.Sprintf("10.244.1.%d", 2+i))))
	}
	burst := time.Since(start)
	a.await(t, `
  - name: ns/web
    clusterIP: 10.96.0.10
    ports:
      - {name: http, protocol: TCP, port: 80, targetPort: 8080, nodePort: 30080}
      - {name: dns, protocol: UDP, port: 53, targetPort: 5353, nodePort: 30053}
    endpoints: [{address: 10.244.1.11}]
`)
	// One window per debounce period the burst spanned, plus the one that
	// may have been open when it started.
	limit := int(burst/debounce) + 2
	if n := a.count() - before; n > limit || n >= changes {
		t.Fatalf("%d changes in %v were applied %d times, want at most %d", changes, burst, n, limit)
	}
	t.Logf("%d changes in %v: %d applies", changes, burst.Round(time.Millisecond), a.count()-before)
}
