// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/swiftlane/swiftlane/"

// importRules: packages in from may not reach any package in forbidden,
// directly or through others. A forbidden entry covers the packages below it
// too; a path without a dot is in this module.
var importRules = []struct {
	name            string
	from, forbidden []string
	fix             string
}{{
	name: "the API server compiles no node code",
	from: []string{"internal/api", "internal/apiserver", "internal/store", "internal/store/crdstore", "internal/auth", "internal/apitypes",
		"internal/crdconv", "internal/schema", "internal/strategy", "internal/config", "internal/ui", "apis/swiftlane/v1alpha1"},
	forbidden: []string{"internal/applier", "internal/podcgroup", "internal/schedext", "internal/sched", "usersched",
		"internal/userringbuf", "internal/noderuntime", "internal/agent", "internal/kubeagent", "internal/operator",
		"internal/trace", "internal/lb", "internal/percpu", "github.com/cilium/ebpf"},
	fix: "keep what both sides need in the declarative package (e.g. internal/strategy) and what reads the node in internal/applier",
}, {
	name: "the node side never reaches the server's storage",
	from: []string{"internal/agent", "internal/kubeagent", "internal/noderuntime", "internal/applier", "internal/sched", "usersched",
		"internal/trace", "internal/operator", "internal/lb/...", "internal/apiclient", "internal/podcgroup", "internal/schedext",
		"internal/percpu", "internal/userringbuf/...", "internal/probe", "internal/gtplab", "examples/reservecpu"},
	forbidden: []string{"internal/store", "internal/api", "go.etcd.io/bbolt"},
	fix:       "talk to the server through internal/apiclient and share only wire types (internal/apitypes) and pure packages",
}}

// TestImportRules walks `go list -deps` from each rule's packages and names
// the first chain of imports that reaches a forbidden package.
func TestImportRules(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	out, err := exec.Command("go", "list", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	own := strings.Fields(string(out))
	var roots []string
	for _, r := range importRules {
		roots = append(roots, expandDots(t, qualify(r.from), own)...)
	}
	imports := importGraph(t, roots)
	for _, r := range importRules {
		forbidden := qualify(r.forbidden)
		for _, f := range forbidden {
			// A forbidden package that no longer exists would make the
			// rule pass for nothing.
			if strings.HasPrefix(f, module) && !slices.ContainsFunc(own, func(p string) bool { return under(p, []string{f}) }) {
				t.Errorf("%s: no package %s any more: update the rule", r.name, f)
			}
		}
		for _, from := range expandDots(t, qualify(r.from), own) {
			if chain := pathTo(imports, from, func(p string) bool { return under(p, forbidden) }); chain != nil {
				t.Errorf("%s: %s: %s", r.name, strings.Join(trim(chain), " -> "), r.fix)
			}
		}
	}
}

// importGraph returns the direct imports of roots and of everything they
// reach.
func importGraph(t *testing.T, roots []string) map[string][]string {
	t.Helper()
	args := append([]string{"list", "-deps", "-f", "{{.ImportPath}} {{join .Imports \" \"}}"}, roots...)
	out, err := exec.Command("go", args...).Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	g := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		g[f[0]] = f[1:]
	}
	for _, r := range roots {
		if _, ok := g[r]; !ok {
			t.Fatalf("go list did not list %s: fix the rule", r)
		}
	}
	return g
}

// pathTo is the shortest import chain from root to a package hit accepts,
// or nil.
func pathTo(g map[string][]string, root string, hit func(string) bool) []string {
	prev := map[string]string{root: ""}
	queue := []string{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if hit(p) {
			chain := []string{p}
			for q := prev[p]; q != ""; q = prev[q] {
				chain = append(chain, q)
			}
			slices.Reverse(chain)
			return chain
		}
		for _, next := range g[p] {
			if _, seen := prev[next]; !seen {
				prev[next] = p
				queue = append(queue, next)
			}
		}
	}
	return nil
}

func under(p string, prefixes []string) bool {
	return slices.ContainsFunc(prefixes, func(f string) bool { return p == f || strings.HasPrefix(p, f+"/") })
}

// expandDots replaces each "dir/..." in paths with the module's packages at or
// below dir.
func expandDots(t *testing.T, paths, own []string) []string {
	t.Helper()
	var out []string
	for _, p := range paths {
		dir, ok := strings.CutSuffix(p, "/...")
		if !ok {
			out = append(out, p)
			continue
		}
		n := len(out)
		for _, q := range own {
			if under(q, []string{dir}) {
				out = append(out, q)
			}
		}
		if len(out) == n {
			t.Fatalf("no package matches %s: fix the rule", p)
		}
	}
	return out
}

func qualify(paths []string) []string {
	out := make([]string, len(paths))
	for i, p := range paths {
		if first, _, _ := strings.Cut(p, "/"); strings.Contains(first, ".") {
			out[i] = p
		} else {
			out[i] = module + p
		}
	}
	return out
}

func trim(paths []string) []string {
	out := make([]string, len(paths))
	for i, p := range paths {
		out[i] = strings.TrimPrefix(p, module)
	}
	return out
}

// The walk finds a chain through an intermediate package and reports
// none where there is none: the rule above can fail.
func TestPathTo(t *testing.T) {
	g := map[string][]string{"api": {"strategy", "store"}, "strategy": {"podcgroup"}, "store": {"strategy"}}
	hit := func(p string) bool { return p == "podcgroup" }
	if got := pathTo(g, "api", hit); !slices.Equal(got, []string{"api", "strategy", "podcgroup"}) {
		t.Errorf("pathTo = %v, want api -> strategy -> podcgroup", got)
	}
	delete(g, "strategy")
	if got := pathTo(g, "api", hit); got != nil {
		t.Errorf("pathTo = %v, want none", got)
	}
}
