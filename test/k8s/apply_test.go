// SPDX-License-Identifier: Apache-2.0
//go:build k8stest

// The rendered chart on a real API server: it applies, each service account
// may do what its component does and no more, and an agent writes only its
// own node's records.

package k8s

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/swiftlane/swiftlane/apis/swiftlane/v1alpha1"
)

// The rendered chart, the load balancer on, applies cleanly to a real API
// server (server-side apply, twice: the second changes nothing), and each
// service account can do what its component does and nothing more.
func TestChartApply(t *testing.T) {
	k := cluster(t)
	k.applyCRDs(t)
	k.namespace(t, testNamespace)
	manifest, err := template(t, lbOn...)
	if err != nil {
		t.Fatal(err)
	}
	apply := func() {
		t.Helper()
		if out, err := k.kubectl(t, []byte(manifest), "apply", "--server-side", "--field-manager=chart-test", "-f", "-"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	// resourceVersions of every rendered object, as stored.
	versions := func() map[string]string {
		t.Helper()
		rv := map[string]string{}
		for _, o := range decodeObjects(t, manifest) {
			args := []string{"get", strings.ToLower(o.GetKind()), o.GetName(), "-o", "jsonpath={.metadata.resourceVersion}"}
			if o.GetNamespace() != "" {
				args = append(args, "-n", o.GetNamespace())
			}
			out, err := k.kubectl(t, nil, args...)
			if err != nil {
				t.Fatalf("%s %s not stored: %v", o.GetKind(), o.GetName(), err)
			}
			rv[o.GetKind()+"/"+o.GetName()] = out
		}
		return rv
	}
	apply()
	first := versions()
	apply()
	for obj, rv := range versions() {
		if rv != first[obj] {
			t.Errorf("%s changed on re-applying the same manifest (resourceVersion %s -> %s)", obj, first[obj], rv)
		}
	}

	agentSA := "system:serviceaccount:" + testNamespace + ":swl-swiftlane-agent"
	apiSA := "system:serviceaccount:" + testNamespace + ":swl-swiftlane-api"
	cleanupSA := "system:serviceaccount:" + testNamespace + ":swl-swiftlane-cleanup"
	lbSA := "system:serviceaccount:" + testNamespace + ":swl-swiftlane-lb"
	t.Run("can-i", func(t *testing.T) {
		for _, c := range []struct {
			as, verb, resource, sub, ns string
			want                        bool
		}{
			// The agent: watch its pods, namespaces, node and every strategy; write
			// strategy status and SchedulingNodes.
			{agentSA, "list", "pods", "", "", true},
			{agentSA, "watch", "pods", "", "tenant-a", true},
			{agentSA, "watch", "namespaces", "", "", true},
			{agentSA, "watch", "nodes", "", "", true},
			{agentSA, "watch", "schedulingstrategies.swiftlane.io", "", "", true},
			{agentSA, "patch", "schedulingstrategies.swiftlane.io", "status", "tenant-a", true},
			{agentSA, "create", "schedulingnodes.swiftlane.io", "", "", true},
			{agentSA, "patch", "schedulingnodes.swiftlane.io", "", "", true},
			{agentSA, "patch", "schedulingnodes.swiftlane.io", "status", "", true},
			// ... and nothing else.
			{agentSA, "delete", "pods", "", "tenant-a", false},
			{agentSA, "create", "pods", "", testNamespace, false},
			{agentSA, "create", "pods", "exec", "tenant-a", false},
			{agentSA, "get", "secrets", "", testNamespace, false},
			{agentSA, "list", "secrets", "", "", false},
			{agentSA, "get", "configmaps", "", testNamespace, false},
			{agentSA, "patch", "nodes", "", "", false},
			{agentSA, "patch", "schedulingstrategies.swiftlane.io", "", "tenant-a", false},
			{agentSA, "update", "schedulingstrategies.swiftlane.io", "", testNamespace, false},
			{agentSA, "delete", "schedulingstrategies.swiftlane.io", "", testNamespace, false},
			{agentSA, "delete", "schedulingnodes.swiftlane.io", "", "", false},
			{agentSA, "list", "schedulingnodes.swiftlane.io", "", "", false},
			{agentSA, "impersonate", "serviceaccounts", "", testNamespace, false},
			// The API: strategies of its namespace, every SchedulingNode.
			{apiSA, "create", "schedulingstrategies.swiftlane.io", "", testNamespace, true},
			{apiSA, "update", "schedulingstrategies.swiftlane.io", "", testNamespace, true},
			{apiSA, "delete", "schedulingstrategies.swiftlane.io", "", testNamespace, true},
			{apiSA, "watch", "schedulingstrategies.swiftlane.io", "", testNamespace, true},
			{apiSA, "create", "tokenrevocations.swiftlane.io", "", testNamespace, true},
			{apiSA, "watch", "tokenrevocations.swiftlane.io", "", testNamespace, true},
			{apiSA, "create", "auditentries.swiftlane.io", "", testNamespace, true},
			{apiSA, "delete", "auditentries.swiftlane.io", "", testNamespace, true},
			{apiSA, "watch", "auditentries.swiftlane.io", "", testNamespace, true},
			{apiSA, "list", "schedulingnodes.swiftlane.io", "", "", true},
			{apiSA, "delete", "schedulingnodes.swiftlane.io", "", "", true},
			{apiSA, "update", "schedulingnodes.swiftlane.io", "status", "", true},
			// ... and nothing else.
			{apiSA, "get", "schedulingstrategies.swiftlane.io", "", "tenant-a", false},
			{apiSA, "create", "schedulingstrategies.swiftlane.io", "", "tenant-a", false},
			{apiSA, "create", "tokenrevocations.swiftlane.io", "", "tenant-a", false},
			{apiSA, "update", "tokenrevocations.swiftlane.io", "", testNamespace, false},
			{apiSA, "update", "auditentries.swiftlane.io", "", testNamespace, false},
			{apiSA, "create", "auditentries.swiftlane.io", "", "tenant-a", false},
			{apiSA, "patch", "schedulingstrategies.swiftlane.io", "status", testNamespace, false},
			{apiSA, "get", "secrets", "", testNamespace, false},
			{apiSA, "list", "pods", "", testNamespace, false},
			{apiSA, "delete", "namespaces", "", "", false},
			{apiSA, "update", "schedulingnodes.swiftlane.io", "", "", false},
			// The uninstall hook: delete SchedulingNodes, clear strategy status.
			{cleanupSA, "delete", "schedulingnodes.swiftlane.io", "", "", true},
			{cleanupSA, "list", "schedulingstrategies.swiftlane.io", "", "", true},
			{cleanupSA, "patch", "schedulingstrategies.swiftlane.io", "status", "tenant-a", true},
			// ... and nothing else.
			{cleanupSA, "get", "schedulingstrategies.swiftlane.io", "", "tenant-a", false},
			{cleanupSA, "patch", "schedulingstrategies.swiftlane.io", "", "tenant-a", false},
			{cleanupSA, "delete", "schedulingstrategies.swiftlane.io", "", "tenant-a", false},
			{cleanupSA, "create", "schedulingnodes.swiftlane.io", "", "", false},
			{cleanupSA, "patch", "schedulingnodes.swiftlane.io", "status", "", false},
			{cleanupSA, "get", "secrets", "", testNamespace, false},
			{cleanupSA, "list", "pods", "", "", false},
			// The load balancer: Services and their slices everywhere, its Node.
			{lbSA, "watch", "services", "", "", true},
			{lbSA, "list", "endpointslices.discovery.k8s.io", "", "tenant-a", true},
			{lbSA, "get", "nodes", "", "", true},
			// ... and nothing else: no list of Nodes, no Endpoints, no writes.
			{lbSA, "list", "nodes", "", "", false},
			{lbSA, "list", "endpoints", "", "", false},
			{lbSA, "list", "pods", "", "", false},
			{lbSA, "get", "secrets", "", testNamespace, false},
			{lbSA, "get", "configmaps", "", testNamespace, false},
			{lbSA, "update", "services", "", "tenant-a", false},
			{lbSA, "patch", "services", "status", "tenant-a", false},
			{lbSA, "create", "endpointslices.discovery.k8s.io", "", "tenant-a", false},
			{lbSA, "patch", "nodes", "", "", false},
		} {
			args := []string{"auth", "can-i", c.verb, c.resource, "--as=" + c.as}
			if c.sub != "" {
				args = append(args, "--subresource="+c.sub)
			}
			if c.ns != "" {
				args = append(args, "-n", c.ns)
			} else {
				args = append(args, "--all-namespaces")
			}
			out, err := k.kubectl(t, nil, args...)
			got := strings.TrimSpace(out) == "yes"
			if err != nil && strings.TrimSpace(out) != "no" {
				t.Errorf("kubectl %s: %v", strings.Join(args, " "), err)
				continue
			}
			if got != c.want {
				t.Errorf("%s: %s %s%s in %q: got %v, want %v", c.as[strings.LastIndex(c.as, ":")+1:], c.verb, c.resource,
					map[bool]string{true: "/" + c.sub}[c.sub != ""], c.ns, got, c.want)
			}
		}
	})

	// The effective rules, compared as a whole: nothing beyond the table in
	// the chart's README (the API server's defaults for every authenticated
	// user aside).
	t.Run("rules", func(t *testing.T) {
		agentRules := []string{
			"/pods get,list,watch", "/namespaces get,list,watch", "/nodes get,list,watch",
			"swiftlane.io/schedulingstrategies get,list,watch", "swiftlane.io/schedulingstrategies/status patch",
			"swiftlane.io/schedulingnodes create,get,patch", "swiftlane.io/schedulingnodes/status get,patch",
		}
		cleanupRules := []string{"swiftlane.io/schedulingnodes delete,list", "swiftlane.io/schedulingstrategies list",
			"swiftlane.io/schedulingstrategies/status patch"}
		apiNodeRules := []string{"swiftlane.io/schedulingnodes create,delete,get,list,watch", "swiftlane.io/schedulingnodes/status patch,update"}
		for _, c := range []struct {
			as, ns string
			want   []string
		}{
			{agentSA, testNamespace, agentRules},
			{agentSA, "tenant-a", agentRules},
			{apiSA, testNamespace, append([]string{"swiftlane.io/schedulingstrategies create,delete,get,list,update,watch",
				"swiftlane.io/tokenrevocations create,delete,get,list,watch", "swiftlane.io/auditentries create,delete,get,list,watch"}, apiNodeRules...)},
			{apiSA, "tenant-a", apiNodeRules},
			{cleanupSA, testNamespace, cleanupRules},
			{lbSA, "tenant-a", []string{"/services get,list,watch", "discovery.k8s.io/endpointslices get,list,watch", "/nodes get"}},
		} {
			got := k.rules(t, c.as, c.ns)
			want := slices.Sorted(slices.Values(c.want))
			if !slices.Equal(got, want) {
				t.Errorf("%s in %s:\n got  %q\n want %q", c.as, c.ns, got, want)
			}
		}
	})
}

// An agent may write only its own node's records, whatever RBAC allows the
// shared service account: the chart's ValidatingAdmissionPolicy, enforced by
// the API server on tokens bound to agent pods on two nodes.
func TestChartAgentOwnNodePolicy(t *testing.T) {
	k := cluster(t)
	k.applyCRDs(t)
	k.namespace(t, testNamespace)
	manifest, err := template(t)
	if err != nil {
		t.Fatal(err)
	}
	k.mustApply(t, manifest)
	tenant := k.namespace(t, "policy-tenant")
	k.mustApply(t, `
apiVersion: v1
kind: Node
metadata: {name: policy-a}
---
apiVersion: v1
kind: Node
metadata: {name: policy-b}
---
apiVersion: swiftlane.io/v1alpha1
kind: SchedulingStrategy
metadata: {name: upf, namespace: `+tenant+`}
spec: {commandRegex: upf}
`)
	sa := testRelease + "-swiftlane-agent"
	client := func(cfg *rest.Config) *rest.RESTClient {
		c, err := v1alpha1.NewRESTClient(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	onA := client(k.serviceAccountConfig(t, testNamespace, sa, k.agentPod(t, testNamespace, sa, "policy-a")))
	onB := client(k.serviceAccountConfig(t, testNamespace, sa, k.agentPod(t, testNamespace, sa, "policy-b")))
	unbound := client(k.serviceAccountConfig(t, testNamespace, sa, nil))

	// apply server-side applies obj (JSON) as field manager fm.
	apply := func(c *rest.RESTClient, res, ns, name, sub, fm, obj string) error {
		req := c.Patch(types.ApplyPatchType).Resource(res).Name(name).Param("fieldManager", fm).Param("force", "true").Body([]byte(obj))
		if ns != "" {
			req = req.Namespace(ns)
		}
		if sub != "" {
			req = req.SubResource(sub)
		}
		return req.Do(t.Context()).Error()
	}
	node := func(name string) string {
		return `{"apiVersion":"swiftlane.io/v1alpha1","kind":"SchedulingNode","metadata":{"name":"` + name + `"},"status":{"mode":"observe"}}`
	}
	entry := func(n string, pods int) string {
		return fmt.Sprintf(`{"apiVersion":"swiftlane.io/v1alpha1","kind":"SchedulingStrategy","metadata":{"name":"upf","namespace":%q},`+
			`"status":{"nodes":[{"node":%q,"pods":%d,"processes":0}]}}`, tenant, n, pods)
	}
	nodes, strategies := v1alpha1.NodesResource.Resource, v1alpha1.StrategiesResource.Resource
	for _, c := range []struct {
		what   string
		err    error
		denied string // "" if it must be admitted, else part of the refusal
	}{
		{"A creates its SchedulingNode", apply(onA, nodes, "", "policy-a", "", "agent-a", node("policy-a")), ""},
		{"A writes its SchedulingNode status", apply(onA, nodes, "", "policy-a", "status", "agent-a", node("policy-a")), ""},
		{"A creates B's SchedulingNode", apply(onA, nodes, "", "policy-b", "", "agent-a", node("policy-b")), "may write only SchedulingNode policy-a"},
		{"B creates its SchedulingNode", apply(onB, nodes, "", "policy-b", "", "agent-b", node("policy-b")), ""},
		{"A writes B's SchedulingNode status", apply(onA, nodes, "", "policy-b", "status", "agent-a", node("policy-b")), "may write only SchedulingNode policy-a"},
		{"A writes its strategy status entry", apply(onA, strategies, tenant, "upf", "status", "agent-a", entry("policy-a", 1)), ""},
		{"B writes its strategy status entry", apply(onB, strategies, tenant, "upf", "status", "agent-b", entry("policy-b", 2)), ""},
		{"A rewrites B's entry", apply(onA, strategies, tenant, "upf", "status", "agent-b", entry("policy-b", 7)), "may write only its own entry of status.nodes"},
		{"a token bound to no pod writes", apply(unbound, nodes, "", "policy-c", "", "agent-c", node("policy-c")), "names no node"},
	} {
		switch {
		case c.denied == "" && c.err != nil:
			t.Errorf("%s: refused: %v", c.what, c.err)
		case c.denied != "" && c.err == nil:
			t.Errorf("%s: admitted", c.what)
		case c.denied != "" && !strings.Contains(c.err.Error(), c.denied):
			t.Errorf("%s: refused with %v, want %q", c.what, c.err, c.denied)
		}
	}
}
