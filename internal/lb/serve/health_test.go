// SPDX-License-Identifier: Apache-2.0

package serve

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/swiftlane/swiftlane/internal/lb/balancer"
	"github.com/swiftlane/swiftlane/internal/lb/healthcheck"
	"github.com/swiftlane/swiftlane/internal/lb/labnet"
	"github.com/swiftlane/swiftlane/internal/lb/services"
)

// Run's applier keeps the health check node ports on the Configs the
// balancer takes: a Config it refuses leaves them answering 503 with
// serviceProxyHealthy false until one is taken again.
func TestApplierFeedsHealthChecks(t *testing.T) {
	labnet.RequireRoot(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	parse := func() *services.Config {
		c, err := services.Parse(fmt.Appendf(nil, `
nodeAddresses: [198.18.0.1]
nodeName: node-a
interfaces: [none]
services:
  - name: ns/web
    clusterIP: 10.96.0.10
    externalTrafficPolicy: Local
    healthCheckNodePort: %d
    ports: [{port: 80, nodePort: 30080}]
    endpoints: [{address: 10.244.1.2, nodeName: node-a}]
`, port))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	cfg := parse()
	b, err := balancer.Open(cfg, balancer.Options{Deferred: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	hc := healthcheck.New(healthcheck.Options{Host: "127.0.0.1"})
	t.Cleanup(func() { hc.Close() })
	a := applier{b: b, hc: hc, log: slog.New(slog.DiscardHandler)}

	check := func(what string, status int, healthy bool) {
		t.Helper()
		c := http.Client{Timeout: 5 * time.Second}
		resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d/", port))
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		defer resp.Body.Close()
		var ans healthcheck.Answer
		if err := json.NewDecoder(resp.Body).Decode(&ans); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if resp.StatusCode != status || ans.ServiceProxyHealthy != healthy || ans.LocalEndpoints != 1 {
			t.Fatalf("%s: %d %+v, want %d with serviceProxyHealthy %v and one local endpoint", what, resp.StatusCode, ans, status, healthy)
		}
	}
	if _, err := a.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	check("applied", http.StatusOK, true)
	// An IPv6 Service on a balancer loaded without IPv6 is refused.
	bad := *cfg
	bad.Services = append(slices.Clone(cfg.Services), services.Service{
		Name: "v6", ClusterIP: netip.MustParseAddr("fd00:96::10"),
		Ports: []services.Port{{Protocol: "TCP", Port: 80, TargetPort: 80}},
	})
	if _, err := a.Apply(&bad); err == nil {
		t.Fatal("the balancer took an IPv6 Service it has no maps for")
	}
	check("after a refused apply", http.StatusServiceUnavailable, false)
	if _, err := a.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	check("applied again", http.StatusOK, true)
}
