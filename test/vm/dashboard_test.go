// SPDX-License-Identifier: Apache-2.0
//go:build vmtest

package vm

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/swiftlane/swiftlane/internal/apitypes"
	"github.com/swiftlane/swiftlane/internal/auth"
	"github.com/swiftlane/swiftlane/internal/dashboard"
	"github.com/swiftlane/swiftlane/internal/gtplab"
	"github.com/swiftlane/swiftlane/internal/strategy"
)

// The Grafana dashboard (the chart's dashboards/swiftlane.json): every
// query of every panel but the load balancer's, against a real Prometheus
// (the host's Debian package, through the shared root) scraping real
// processes: the API server and a node agent in kernel mode with automatic
// mode (a TUN user as its carrier) and strategies (one matching a process,
// one that cannot match here). A query that errors or returns no series
// fails the test, named by row and panel; panels and rows added to the JSON
// are checked without changing this test. The load balancer's row needs no
// sched_ext: TestDashboardLB (internal/lb/e2e) checks it on the host, with
// traffic through the netns lab, which under TCG takes minutes to build.
func TestDashboard(t *testing.T) {
	promBin, err := dashboard.Binary()
	if err != nil {
		t.Fatal(err)
	}
	queries, err := dashboard.Shipped()
	if err != nil {
		t.Fatal(err)
	}
	bin := swiftlaneBin(t)
	ctx := runCtx(t, 15*time.Minute)

	const apiAddr = "127.0.0.1:18453"
	server, client, data := startAPI(t, ctx, apiAddr)
	high := strategy.High
	marker := exec.Command("sh", "-c", "while :; do sleep 0.01; done; : swl-dash-marker")
	if err := marker.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { marker.Process.Kill(); marker.Wait() })
	for _, s := range []strategy.Strategy{
		{Name: "marker", Class: &high, CommandRegex: "swl-dash-marker"},
		// Pod selectors with no pod source here: swiftlane_strategies_unmatchable.
		{Name: "gnb-pods", Class: &high, Selectors: []strategy.Selector{{Key: "app", Value: "gnb"}}},
	} {
		if _, err := client.CreateStrategy(ctx, apitypes.Strategy{Strategy: s}); err != nil {
			t.Fatalf("create strategy %s: %v", s.Name, err)
		}
	}

	gtplab.EnsureTUNDevice() // the tun driver's BTF must be there when the tracer loads
	cfg := filepath.Join(t.TempDir(), "agent.yaml")
	if err := os.WriteFile(cfg, []byte("api:\n  interval: 1\nautomatic:\n  enabled: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// An agent attaches after registering with the API: on a busy TCG host
	// that took over attachTimeout.
	agent := startProc(t, exec.Command(bin, "agent", "--config", cfg, "--data-dir", data, "--server", "https://"+apiAddr,
		"--node", "vm1", "--state-file", "", "--metrics-addr", "127.0.0.1:0"), "scheduler attached; agent running", "swiftlane", userAttachTimeout)
	ue := startTUNUser(t, "uesimtun9", 20*time.Millisecond)
	waitCarrier(t, agent, ue.Process.Pid)
	carrier := "swiftlane_gtp_carrier_packets_total{class=critical}{command=swl-tun-user}{pid=" + strconv.Itoa(ue.Process.Pid) + "}"
	agent.waitMetric(t, "the marker matched, the selector strategy reported, the TUN user a carrier", func(m map[string]float64) bool {
		return m["swiftlane_strategy_processes{class=high}"] >= 1 &&
			m["swiftlane_strategies_unmatchable{reason=selectors_without_pod_source}{strategy=gnb-pods}"] == 1 &&
			m[carrier] > 0
	})
	waitFor(t, "the agent's counters in its heartbeat", func() bool {
		n, err := client.GetNode(ctx, "vm1")
		return err == nil && n.Counters != nil && len(n.Counters.RunqueueWait) > 0
	}, server)

	// Prometheus reads the API's /metrics as a viewer would.
	signer, err := auth.LoadSigner(data)
	if err != nil {
		t.Fatal(err)
	}
	tok, _, err := signer.Issue("prometheus", auth.Viewer, "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	tokFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokFile, []byte(tok), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := dashboard.StartPrometheus(ctx, promBin, t.TempDir(), []dashboard.Target{
		{Job: "agent", Addr: agent.metrics},
		{Job: "api", Addr: apiAddr, TokenFile: tokFile, CAFile: filepath.Join(data, auth.CertFile)},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	if err := p.WaitScraped(ctx, 3); err != nil {
		t.Fatal(err)
	}
	n, rows := 0, map[string]bool{}
	notLB := func(q dashboard.Query) bool { return q.Row != "Load balancer" }
	for _, q := range queries {
		if notLB(q) {
			n++
			rows[q.Row] = true
		}
	}
	if err := dashboard.Check(ctx, p, queries, notLB); err != nil {
		t.Fatalf("dashboard queries:\n%v\nprometheus:\n%s", err, p.Log())
	}
	t.Logf("%d queries in %d rows returned series", n, len(rows))
	if log := p.Log(); strings.TrimSpace(log) != "" {
		t.Logf("prometheus:\n%s", log)
	}
}
