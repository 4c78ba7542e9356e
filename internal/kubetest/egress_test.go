// SPDX-License-Identifier: Apache-2.0

package kubetest

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The API server's node proxy (the path of kubectl exec and logs) takes the
// egress route: unix socket, relay, CONNECT proxy, kubelet. The kubelet is
// a TLS server standing in for one (no kubelet runs on the host), on one
// of the host's own addresses: the API server proxies to no loopback one.
// The proxy records what it was asked to reach.
func TestEgressToKubelet(t *testing.T) {
	kubelet := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			io.WriteString(w, "ok")
		}
	}))
	l, err := net.Listen("tcp", net.JoinHostPort(hostAddress(t), "0"))
	if err != nil {
		t.Fatal(err)
	}
	kubelet.Listener.Close()
	kubelet.Listener = l
	kubelet.StartTLS()
	defer kubelet.Close()
	var (
		mu      sync.Mutex
		targets []string
	)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		targets = append(targets, r.Host)
		mu.Unlock()
		ConnectProxy.ServeHTTP(w, r)
	}))
	defer proxy.Close()

	if _, err = ForwardEgress(t.Context(), t.TempDir(), "no-port"); err == nil {
		t.Fatal("an address without a port was taken")
	}
	arg, err := ForwardEgress(t.Context(), t.TempDir(), proxy.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	env := Start(t, WithAPIServerArgs(arg, "--kubelet-preferred-address-types=InternalIP"))
	cs := kubernetes.NewForConfigOrDie(env.RESTConfig())

	host, port, _ := net.SplitHostPort(kubelet.Listener.Addr().String())
	p, _ := strconv.Atoi(port)
	node, err := cs.CoreV1().Nodes().Create(t.Context(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "egress"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: host}}
	node.Status.DaemonEndpoints.KubeletEndpoint.Port = int32(p)
	if _, err := cs.CoreV1().Nodes().UpdateStatus(t.Context(), node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	b, err := cs.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes/egress/proxy/healthz").DoRaw(t.Context())
	if err != nil || string(b) != "ok" {
		t.Fatalf("node proxy: %q, %v", b, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := net.JoinHostPort(host, port); !slices.Contains(targets, want) {
		t.Fatalf("the proxy was asked for %v, not the kubelet at %s", targets, want)
	}
}

// hostAddress is an IPv4 address of this host other than loopback.
func hostAddress(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && n.IP.IsGlobalUnicast() {
			return n.IP.String()
		}
	}
	t.Skip("this host has no IPv4 address but loopback for the stand-in kubelet")
	return ""
}
