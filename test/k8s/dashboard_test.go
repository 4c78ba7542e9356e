// SPDX-License-Identifier: Apache-2.0
//go:build k8stest

package k8s

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// The Grafana dashboard's ConfigMap: off by default; when on, labelled for
// the sidecar (label configurable), in the namespace asked for, carrying
// the chart's dashboards/swiftlane.json byte for byte. Its queries are
// checked against Prometheus by TestDashboard (VM) and TestDashboardLB.
func TestChartDashboard(t *testing.T) {
	const name = testRelease + "-swiftlane-dashboard"
	for _, o := range render(t) {
		if o.GetKind() == "ConfigMap" && o.GetName() == name {
			t.Fatal("dashboard ConfigMap rendered although metrics.dashboard.enabled is false")
		}
	}

	want, err := os.ReadFile(filepath.Join(chartDir, "dashboards", "swiftlane.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cm corev1.ConfigMap
	find(t, render(t, "--set", "metrics.dashboard.enabled=true"), "ConfigMap", name, &cm)
	if cm.Labels["grafana_dashboard"] != "1" || cm.Namespace != testNamespace {
		t.Errorf("ConfigMap in %q labelled %v: want the release namespace and grafana_dashboard=1", cm.Namespace, cm.Labels)
	}
	got := cm.Data["swiftlane.json"]
	if got != strings.TrimRight(string(want), "\n") {
		t.Errorf("ConfigMap's swiftlane.json (%d bytes) is not the chart's dashboards/swiftlane.json (%d bytes)", len(got), len(want))
	}
	var board struct {
		UID    string            `json:"uid"`
		Panels []json.RawMessage `json:"panels"`
	}
	if err := json.Unmarshal([]byte(got), &board); err != nil || board.UID == "" || len(board.Panels) == 0 {
		t.Errorf("ConfigMap's dashboard: uid %q, %d panels, %v", board.UID, len(board.Panels), err)
	}

	// Another sidecar's label, Grafana's namespace, a folder annotation.
	find(t, render(t, "--set", "metrics.dashboard.enabled=true", "--set", "metrics.dashboard.label=example.com/dashboard",
		"--set", "metrics.dashboard.labelValue=swiftlane", "--set", "metrics.dashboard.namespace=monitoring",
		"--set", "metrics.dashboard.annotations.grafana_folder=Nodes"), "ConfigMap", name, &cm)
	if cm.Labels["example.com/dashboard"] != "swiftlane" || cm.Labels["grafana_dashboard"] != "" ||
		cm.Namespace != "monitoring" || cm.Annotations["grafana_folder"] != "Nodes" {
		t.Errorf("ConfigMap %s/%s labels %v annotations %v", cm.Namespace, cm.Name, cm.Labels, cm.Annotations)
	}

	// A label the API server would refuse is refused at install.
	_, err = template(t, "--set", "metrics.dashboard.enabled=true", "--set", "metrics.dashboard.label=grafana dashboard")
	if err == nil || !strings.Contains(err.Error(), "/metrics/dashboard/label") {
		t.Errorf("label with a space: %v, want a schema error naming metrics.dashboard.label", err)
	}
}
