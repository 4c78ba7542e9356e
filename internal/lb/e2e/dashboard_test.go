// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/swiftlane/swiftlane/internal/dashboard"
	"github.com/swiftlane/swiftlane/internal/lb/labnet"
)

// The Grafana dashboard's load balancer row against a real Prometheus
// scraping a real `swiftlane lb` that has carried traffic: every query of
// the row must run and return series. The load balancer needs no sched_ext,
// so this row is checked here on every run of test-lb; TestDashboard in the
// VM lab checks the whole dashboard. SWIFTLANE_BIN picks a built binary.
func TestDashboardLB(t *testing.T) {
	labnet.RequireRoot(t)
	prom, err := dashboard.Binary()
	if err != nil {
		if os.Getenv(labnet.RequireEnv) == "1" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	bin := os.Getenv("SWIFTLANE_BIN")
	if bin == "" {
		if bin, err = buildSwiftlane(); err != nil {
			t.Fatal(err)
		}
	}
	queries, err := dashboard.Shipped()
	if err != nil {
		t.Fatal(err)
	}

	lb, err := dashboard.StartLB(bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("swiftlane lb:\n%s", lb.Log())
		}
		if err := lb.Stop(); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := dashboard.StartPrometheus(ctx, prom, t.TempDir(), []dashboard.Target{{Job: "lb", Addr: lb.MetricsAddr}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	if err := p.WaitScraped(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if err := dashboard.Check(ctx, p, queries, func(q dashboard.Query) bool { return q.Row == "Load balancer" }); err != nil {
		t.Errorf("dashboard queries against swiftlane lb:\n%v\nprometheus:\n%s", err, p.Log())
	}
}
