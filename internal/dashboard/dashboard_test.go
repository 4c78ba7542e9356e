// SPDX-License-Identifier: Apache-2.0

package dashboard

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The shipped dashboard loads, has the rows the docs describe, and every
// query reads a swiftlane metric with its variables replaced. Whether the
// queries return data is for TestDashboard (VM) and TestDashboardLB.
func TestShippedDashboard(t *testing.T) {
	path, err := RepoPath(File)
	if err != nil {
		t.Fatal(err)
	}
	qs, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]int{}
	metricRE := regexp.MustCompile(`\bswiftlane_[a-z_]+`)
	for _, q := range qs {
		rows[q.Row]++
		if !metricRE.MatchString(q.Expr) {
			t.Errorf("%s reads no swiftlane metric: %s", q, q.Expr)
		}
		if strings.Contains(q.Expr, "$") {
			t.Errorf("%s: variable left in %s", q, q.Expr)
		}
	}
	for _, r := range []string{"(variables)", "Scheduler", "Strategies and carriers", "Agents and propagation", "Load balancer"} {
		if rows[r] == 0 {
			t.Errorf("no queries in row %q (rows: %v)", r, rows)
		}
	}
	if len(rows) != 5 {
		t.Errorf("rows %v: a new row needs its place in the docs (deploy/helm/swiftlane/README.md)", rows)
	}

	// Grafana's layout: unique panel ids, panels inside the 24-column grid.
	var b struct {
		Panels []struct {
			ID      int    `json:"id"`
			Title   string `json:"title"`
			GridPos struct {
				X, W, H int
			} `json:"gridPos"`
		} `json:"panels"`
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &b); err != nil {
		t.Fatal(err)
	}
	ids := map[int]string{}
	for _, p := range b.Panels {
		if prev, dup := ids[p.ID]; dup {
			t.Errorf("panels %q and %q share id %d", prev, p.Title, p.ID)
		}
		ids[p.ID] = p.Title
		if p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q: gridPos %+v outside Grafana's 24 columns", p.Title, p.GridPos)
		}
	}
}

func TestLoadRejects(t *testing.T) {
	const vars = `"templating": {"list": [{"name": "datasource", "type": "datasource"},
		{"name": "instance", "type": "query", "allValue": ".*", "query": {"query": "label_values(up, instance)"}}]}`
	for _, tc := range []struct {
		name, board, want string
	}{
		{"undefined variable", `{` + vars + `, "panels": [{"type": "row", "title": "R"},
			{"type": "timeseries", "title": "P", "datasource": {"uid": "${datasource}"},
			 "targets": [{"refId": "A", "expr": "up{node=~\"$node\"}"}]}]}`,
			`row "R", panel "P", query A: undefined variable $node`},
		{"no queries", `{` + vars + `, "panels": [{"type": "stat", "title": "P", "datasource": {"uid": "${datasource}"}}]}`,
			`panel "P": no queries`},
		{"fixed data source", `{` + vars + `, "panels": [{"type": "stat", "title": "P", "datasource": {"uid": "prom1"},
			 "targets": [{"refId": "A", "expr": "up"}]}]}`,
			`panel "P": datasource must be`},
		{"variable without allValue", `{"templating": {"list": [{"name": "node", "type": "query", "query": "label_values(up, node)"}]}, "panels": []}`,
			`variable "node" has no allValue`},
		{"variable query not label_values", `{"templating": {"list": [{"name": "node", "type": "query", "allValue": ".*", "query": "query_result(up)"}]}, "panels": []}`,
			`label_values(metric, label) only`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "d.json")
			if err := os.WriteFile(path, []byte(tc.board), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Load(path)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Load: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestLoadSubstitutes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "d.json")
	board := `{"templating": {"list": [{"name": "datasource", "type": "datasource"},
		{"name": "instance", "type": "query", "allValue": ".+", "query": {"query": "label_values(swiftlane_dispatch_total, instance)"}}]},
	 "panels": [{"type": "row", "title": "R", "collapsed": true, "panels": [
		{"type": "timeseries", "title": "P", "datasource": {"uid": "${datasource}"},
		 "targets": [{"refId": "A", "expr": "rate(x{instance=~\"${instance}\"}[$__rate_interval])"}]}]}]}`
	if err := os.WriteFile(path, []byte(board), 0o600); err != nil {
		t.Fatal(err)
	}
	qs, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	want := []Query{
		{Row: "(variables)", Panel: "$instance", RefID: "query", Expr: "count by (instance) (swiftlane_dispatch_total)"},
		{Row: "R", Panel: "P", RefID: "A", Expr: `rate(x{instance=~".+"}[1m])`},
	}
	if len(qs) != len(want) {
		t.Fatalf("queries %+v, want %+v", qs, want)
	}
	for i := range want {
		if qs[i] != want[i] {
			t.Errorf("query %d: %+v, want %+v", i, qs[i], want[i])
		}
	}
}
