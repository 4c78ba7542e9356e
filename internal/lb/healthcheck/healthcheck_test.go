// SPDX-License-Identifier: Apache-2.0

package healthcheck

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/swiftlane/swiftlane/internal/lb/services"
)

// freePort is a TCP port nothing listens on at the moment.
func freePort(t *testing.T) uint16 {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return uint16(ln.Addr().(*net.TCPAddr).Port)
}

// config is one Service, ns/web, with a health check on port and these
// endpoints; this node is node-a.
func config(t *testing.T, port uint16, endpoints string) *services.Config {
	t.Helper()
	c, err := services.Parse(fmt.Appendf(nil, `
nodeAddresses: [198.18.0.1]
nodeName: node-a
interfaces: [eth0]
services:
  - name: ns/web
    clusterIP: 10.96.0.10
    externalTrafficPolicy: Local
    healthCheckNodePort: %d
    ports: [{port: 80, nodePort: 30080}, {port: 443, nodePort: 30443}]
    endpoints: [%s]
`, port, endpoints))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

type reply struct {
	status int
	header http.Header
	body   Answer
}

func get(t *testing.T, port uint16) reply {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", port))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	r := reply{status: resp.StatusCode, header: resp.Header}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r.body); err != nil {
		t.Fatalf("body %q: %v", raw, err)
	}
	return r
}

func refused(t *testing.T, port uint16) {
	t.Helper()
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 5*time.Second)
	if err == nil {
		c.Close()
		t.Fatalf("port %d still accepts connections", port)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("port %d: %v, want connection refused", port, err)
	}
}

// The life of one Service's health check over real sockets: 200 with the
// local endpoint count, 503 once none is ready here, the port moving, and
// the listener closed with the Service.
func TestHealthCheckNodePort(t *testing.T) {
	s := New(Options{Host: "127.0.0.1"})
	t.Cleanup(func() { s.Close() })
	s.SetProxyHealthy(true)
	port := freePort(t)
	// Two ready local endpoints (10.244.1.2 listed twice counts once, as
	// kube-proxy counts addresses), one elsewhere, one local terminating.
	eps := `{address: 10.244.1.2, nodeName: node-a}, {address: 10.244.1.2, nodeName: node-a},
      {address: 10.244.1.3, nodeName: node-a}, {address: 10.244.2.2, nodeName: node-b},
      {address: 10.244.1.4, nodeName: node-a, terminating: true}`
	if err := s.Sync(config(t, port, eps)); err != nil {
		t.Fatal(err)
	}
	r := get(t, port)
	if r.status != http.StatusOK || r.body.LocalEndpoints != 2 || !r.body.ServiceProxyHealthy {
		t.Fatalf("with two ready local endpoints: %d %+v, want 200 with localEndpoints 2", r.status, r.body)
	}
	if r.body.Service.Namespace != "ns" || r.body.Service.Name != "web" {
		t.Fatalf("service %+v, want namespace ns, name web", r.body.Service)
	}
	if ct, nosniff := r.header.Get("Content-Type"), r.header.Get("X-Content-Type-Options"); ct != "application/json" || nosniff != "nosniff" {
		t.Fatalf("headers Content-Type %q, X-Content-Type-Options %q; want application/json, nosniff", ct, nosniff)
	}

	// Only terminating (and remote) endpoints left here: 503, so the load
	// balancer drains this node.
	if err := s.Sync(config(t, port, `{address: 10.244.1.4, nodeName: node-a, terminating: true}, {address: 10.244.2.2, nodeName: node-b}`)); err != nil {
		t.Fatal(err)
	}
	if r := get(t, port); r.status != http.StatusServiceUnavailable || r.body.LocalEndpoints != 0 {
		t.Fatalf("without a ready local endpoint: %d %+v, want 503 with localEndpoints 0", r.status, r.body)
	}

	// The port changes: the old one closes, the new one answers.
	moved := freePort(t)
	if err := s.Sync(config(t, moved, eps)); err != nil {
		t.Fatal(err)
	}
	refused(t, port)
	if r := get(t, moved); r.status != http.StatusOK || r.body.LocalEndpoints != 2 {
		t.Fatalf("on the new port: %d %+v, want 200 with localEndpoints 2", r.status, r.body)
	}
	if got := s.Ports(); len(got) != 1 || got["ns/web"] != moved {
		t.Fatalf("open ports %v, want ns/web on %d only", got, moved)
	}

	// A data path that failed to take the latest Services is not trusted.
	s.SetProxyHealthy(false)
	if r := get(t, moved); r.status != http.StatusServiceUnavailable || r.body.ServiceProxyHealthy || r.body.LocalEndpoints != 2 {
		t.Fatalf("proxy unhealthy: %d %+v, want 503 with serviceProxyHealthy false", r.status, r.body)
	}
	s.SetProxyHealthy(true)

	// The Service leaves: its listener closes.
	empty := config(t, moved, eps)
	empty.Services = nil
	if err := s.Sync(empty); err != nil {
		t.Fatal(err)
	}
	refused(t, moved)
}

// A port another process holds is reported, naming the Service and the
// port, and does not keep the other Services' checks from being served;
// the next Sync tries it again.
func TestHealthCheckPortTaken(t *testing.T) {
	s := New(Options{Host: "127.0.0.1"})
	t.Cleanup(func() { s.Close() })
	s.SetProxyHealthy(true)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	busy := uint16(taken.Addr().(*net.TCPAddr).Port)
	cfg := config(t, busy, `{address: 10.244.1.2, nodeName: node-a}`)
	other := cfg.Services[0]
	other.Name, other.HealthCheckNodePort = "ns/api", freePort(t)
	cfg.Services = append(cfg.Services, other)

	err = s.Sync(cfg)
	if err == nil || !strings.Contains(err.Error(), "service ns/web: healthCheckNodePort "+fmt.Sprint(busy)) {
		t.Fatalf("Sync with a taken port: %v, want an error naming ns/web and port %d", err, busy)
	}
	if r := get(t, other.HealthCheckNodePort); r.status != http.StatusOK || r.body.Service.Name != "api" {
		t.Fatalf("the other Service: %d %+v, want 200 for api", r.status, r.body)
	}
	taken.Close()
	if err := s.Sync(cfg); err != nil {
		t.Fatalf("Sync once the port is free: %v", err)
	}
	if r := get(t, busy); r.status != http.StatusOK || r.body.Service.Name != "web" {
		t.Fatalf("the freed port: %d %+v, want 200 for web", r.status, r.body)
	}
}

// Only externalTrafficPolicy Local has a health check: Validate refuses
// the port otherwise, with the fix.
func TestHealthCheckNeedsLocalPolicy(t *testing.T) {
	_, err := services.Parse([]byte(`
nodeAddresses: [198.18.0.1]
interfaces: [eth0]
services:
  - name: web
    clusterIP: 10.96.0.10
    healthCheckNodePort: 32000
    ports: [{port: 80}]
`))
	if err == nil || !strings.Contains(err.Error(), "healthCheckNodePort 32000: only with externalTrafficPolicy Local") {
		t.Fatalf("Parse = %v, want the port refused naming the policy", err)
	}
}
