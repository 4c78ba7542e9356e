// SPDX-License-Identifier: Apache-2.0

// Package dashboard reads swiftlane's Grafana dashboard (the chart's
// dashboards/swiftlane.json) and checks its queries against a real
// Prometheus: the tests start Prometheus scraping running swiftlane
// processes and run every panel's expression, so a panel added to the JSON
// is checked without touching a test.
package dashboard

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// File is the dashboard, relative to the repository's root.
const File = "deploy/helm/swiftlane/dashboards/swiftlane.json"

// Query is one target of one panel, with Grafana's variables replaced by
// what the tests query with.
type Query struct {
	Row, Panel, RefID string
	Expr              string
}

func (q Query) String() string {
	return fmt.Sprintf("row %q, panel %q, query %s", q.Row, q.Panel, q.RefID)
}

// Built-in variables as Grafana sets them for the test Prometheus
// (ScrapeInterval): $__rate_interval at least four scrapes, so a failed
// scrape leaves rate() samples; $__range the whole test.
var builtins = map[string]string{
	"__rate_interval": "1m",
	"__interval":      "10s",
	"__range":         "5m",
}

// The fields the checks read; the rest is Grafana's.
type panel struct {
	ID      int     `json:"id"`
	Type    string  `json:"type"`
	Title   string  `json:"title"`
	Panels  []panel `json:"panels"` // a collapsed row's
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Datasource *struct {
		UID string `json:"uid"`
	} `json:"datasource"`
}

type board struct {
	UID        string  `json:"uid"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name     string `json:"name"`
			Type     string `json:"type"`
			AllValue string `json:"allValue"`
			Query    any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

// variableRE finds $name and ${name} (also ${name:format}).
var variableRE = regexp.MustCompile(`\$\{([A-Za-z0-9_]+)(?::[a-z]+)?\}|\$([A-Za-z0-9_]+)`)

// Load reads the dashboard at path and returns every panel's queries, its
// query variables' own queries (as Prometheus expressions) among them. It
// fails on what would leave a panel empty in Grafana: a panel without
// queries, a query on another data source, a variable the file does not
// define.
func Load(path string) ([]Query, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var b board
	if err := json.Unmarshal(data, &b); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	vars := map[string]string{}
	for k, v := range builtins {
		vars[k] = v
	}
	var out []Query
	for _, v := range b.Templating.List {
		switch v.Type {
		case "datasource":
			vars[v.Name] = "" // picked in Grafana, not part of any expression
		case "query":
			if v.AllValue == "" {
				return nil, fmt.Errorf("%s: variable %q has no allValue: the checks query with it (set \"allValue\": \".*\")", path, v.Name)
			}
			vars[v.Name] = v.AllValue
			q, err := variableQuery(v.Query)
			if err != nil {
				return nil, fmt.Errorf("%s: variable %q: %w", path, v.Name, err)
			}
			out = append(out, Query{Row: "(variables)", Panel: "$" + v.Name, RefID: "query", Expr: q})
		default:
			return nil, fmt.Errorf("%s: variable %q of type %q: the checks know datasource and query variables only", path, v.Name, v.Type)
		}
	}
	var errs []error
	row := ""
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if p.Type == "row" {
				row = p.Title
				walk(p.Panels)
				continue
			}
			if len(p.Targets) == 0 {
				errs = append(errs, fmt.Errorf("row %q, panel %q: no queries", row, p.Title))
			}
			if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
				errs = append(errs, fmt.Errorf("row %q, panel %q: datasource must be {\"uid\": \"${datasource}\"}, the dashboard's variable", row, p.Title))
			}
			for _, t := range p.Targets {
				q := Query{Row: row, Panel: p.Title, RefID: t.RefID}
				expr, err := substitute(t.Expr, vars)
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", q, err))
				}
				q.Expr = expr
				out = append(out, q)
			}
		}
	}
	walk(b.Panels)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}

// substitute replaces Grafana's variables in expr.
func substitute(expr string, vars map[string]string) (string, error) {
	var unknown []string
	s := variableRE.ReplaceAllStringFunc(expr, func(m string) string {
		sub := variableRE.FindStringSubmatch(m)
		name := sub[1] + sub[2]
		v, ok := vars[name]
		if !ok {
			unknown = append(unknown, "$"+name)
			return m
		}
		return v
	})
	if unknown != nil {
		return s, fmt.Errorf("undefined variable %s (define it in templating, with an allValue)", strings.Join(unknown, ", "))
	}
	return s, nil
}

// labelValuesRE is Grafana's label_values(metric, label).
var labelValuesRE = regexp.MustCompile(`^label_values\(\s*([^,]+?)\s*,\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)$`)

// variableQuery turns a query variable's label_values(metric, label) into
// the expression whose series give those values.
func variableQuery(q any) (string, error) {
	s, _ := q.(string)
	if m, ok := q.(map[string]any); ok {
		s, _ = m["query"].(string)
	}
	m := labelValuesRE.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return "", fmt.Errorf("query %q: the checks know label_values(metric, label) only", s)
	}
	return fmt.Sprintf("count by (%s) (%s)", m[2], m[1]), nil
}

// Shipped loads the repository's dashboard (File).
func Shipped() ([]Query, error) {
	path, err := RepoPath(File)
	if err != nil {
		return nil, err
	}
	return Load(path)
}

// RepoPath is rel under the repository's root, found from the working
// directory up (a test's is its package's; a VM test's, the repository's).
func RepoPath(rel string) (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, rel), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory: run from inside the repository")
		}
		dir = parent
	}
}
