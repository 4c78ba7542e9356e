// SPDX-License-Identifier: Apache-2.0
//go:build k8stest

// The chart's load balancer (lb.*), as helm renders it: off by default,
// refused until kube-proxy is said to be gone, and when on a DaemonSet with
// the capabilities the example manifest is tested to need and no more.

package k8s

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"

	"github.com/swiftlane/swiftlane/internal/lb/services"
)

// lbOn are the values that turn the load balancer on.
var lbOn = []string{"--set", "lb.enabled=true", "--set", "lb.kubeProxyRemoved=true",
	"--set", "lb.apiServer.host=192.0.2.1", "--set", "lb.apiServer.port=8443"}

// lbObjects are the rendered objects of the lb component.
func lbObjects(objs []*unstructured.Unstructured) []string {
	var out []string
	for _, o := range objs {
		if o.GetLabels()["app.kubernetes.io/component"] == "lb" || strings.HasSuffix(o.GetName(), "-lb") {
			out = append(out, o.GetKind()+"/"+o.GetName())
		}
	}
	return out
}

// exampleCapabilities are the added capabilities of deploy/lb/swiftlane-lb.yaml,
// the ones internal/lb/kubesource's TestManifestCapabilities runs the load
// balancer with (it serves) and without each (it fails to start).
func exampleCapabilities(t *testing.T) []corev1.Capability {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "lb", "swiftlane-lb.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	find(t, decodeObjects(t, string(b)), "DaemonSet", "swiftlane-lb", &ds)
	add := slices.Clone(ds.Spec.Template.Spec.Containers[0].SecurityContext.Capabilities.Add)
	slices.Sort(add)
	return add
}

func TestChartLBOffByDefault(t *testing.T) {
	if got := lbObjects(render(t)); len(got) > 0 {
		t.Errorf("rendered with lb.enabled false: %v", got)
	}
	// kubeProxyRemoved alone deploys nothing either.
	if got := lbObjects(render(t, "--set", "lb.kubeProxyRemoved=true")); len(got) > 0 {
		t.Errorf("rendered with lb.enabled false: %v", got)
	}
}

// lb.hostTraffic.enabled=false: the node's own connections are left alone,
// and the node's cgroup hierarchy is not mounted.
func TestChartLBHostTrafficOff(t *testing.T) {
	var ds appsv1.DaemonSet
	find(t, render(t, append(slices.Clone(lbOn), "--set", "lb.hostTraffic.enabled=false")...), "DaemonSet", "swl-swiftlane-lb", &ds)
	if args := ds.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--host-cgroup=") {
		t.Errorf("args %v: want --host-cgroup= (off)", args)
	}
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.HostPath != nil && v.HostPath.Path != "/sys/fs/bpf" {
			t.Errorf("host path %s with host traffic off", v.HostPath.Path)
		}
	}
}

func TestChartLB(t *testing.T) {
	objs := render(t, lbOn...)
	var ds appsv1.DaemonSet
	find(t, objs, "DaemonSet", "swl-swiftlane-lb", &ds)
	pod := ds.Spec.Template.Spec
	if !pod.HostNetwork || pod.HostPID || pod.HostIPC {
		t.Errorf("hostNetwork=%v hostPID=%v hostIPC=%v: want only hostNetwork (it attaches to the node's interfaces)", pod.HostNetwork, pod.HostPID, pod.HostIPC)
	}
	if pod.DNSPolicy != corev1.DNSDefault {
		t.Errorf("dnsPolicy %q: want Default (cluster DNS is behind the Service NAT this pod provides)", pod.DNSPolicy)
	}
	if pod.ServiceAccountName != "swl-swiftlane-lb" || pod.PriorityClassName != "system-node-critical" {
		t.Errorf("serviceAccountName %q, priorityClassName %q", pod.ServiceAccountName, pod.PriorityClassName)
	}
	if len(pod.Tolerations) != 1 || pod.Tolerations[0].Operator != corev1.TolerationOpExists {
		t.Errorf("tolerations %+v: want one that tolerates every taint", pod.Tolerations)
	}
	if ru := ds.Spec.UpdateStrategy.RollingUpdate; ru == nil || ru.MaxSurge == nil || ru.MaxSurge.IntValue() != 0 {
		t.Errorf("rollingUpdate %+v: maxSurge must be 0 (two on a node would attach to the same interfaces)", ru)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Containers))
	}
	c := pod.Containers[0]
	sc := c.SecurityContext
	if sc == nil || sc.Capabilities == nil {
		t.Fatal("no securityContext with capabilities")
	}
	if sc.Privileged == nil || *sc.Privileged || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.RunAsUser == nil || *sc.RunAsUser != 0 {
		t.Errorf("securityContext %+v: want uid 0, not privileged, no escalation, read-only root", sc)
	}
	if !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("capabilities.drop %v: want [ALL]", sc.Capabilities.Drop)
	}
	add := slices.Clone(sc.Capabilities.Add)
	slices.Sort(add)
	if want := []corev1.Capability{"BPF", "NET_ADMIN", "PERFMON"}; !slices.Equal(add, want) {
		t.Errorf("capabilities.add %v, want exactly %v", add, want)
	}
	if ex := exampleCapabilities(t); !slices.Equal(add, ex) {
		t.Errorf("capabilities.add %v, but deploy/lb/swiftlane-lb.yaml (tested to need exactly its own) adds %v", add, ex)
	}
	for _, arg := range []string{"lb", "--source=kubernetes", "--node=$(NODE_NAME)", "--config=/etc/swiftlane-lb/node.yaml",
		"--pin-dir=/sys/fs/bpf/swiftlane/lb", "--metrics-addr=127.0.0.1:9465", "--host-cgroup=/run/swiftlane/cgroupv2"} {
		if !slices.Contains(c.Args, arg) {
			t.Errorf("args %v lack %s", c.Args, arg)
		}
	}
	if slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--service-proxy-name") }) {
		t.Errorf("args %v: --service-proxy-name without lb.serviceProxyName", c.Args)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	if e := env["NODE_NAME"]; e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
		t.Errorf("NODE_NAME %+v: want spec.nodeName", e)
	}
	// The apiserver without Service NAT: what in-cluster config dials.
	if env["KUBERNETES_SERVICE_HOST"].Value != "192.0.2.1" || env["KUBERNETES_SERVICE_PORT"].Value != "8443" {
		t.Errorf("KUBERNETES_SERVICE_HOST/PORT %q/%q, want lb.apiServer's 192.0.2.1/8443",
			env["KUBERNETES_SERVICE_HOST"].Value, env["KUBERNETES_SERVICE_PORT"].Value)
	}
	// The host paths are the bpf filesystem, where the state is pinned,
	// and the node's cgroup v2 hierarchy, read-only, whose root the socket
	// programs attach to (lb.hostTraffic, on by default).
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m
	}
	var config string
	for _, v := range pod.Volumes {
		switch {
		case v.HostPath != nil && v.Name == "cgroup":
			if m := mounts[v.Name]; v.HostPath.Path != "/sys/fs/cgroup" || !m.ReadOnly || m.MountPath != "/run/swiftlane/cgroupv2" {
				t.Errorf("cgroup host path %s mounted as %+v: want /sys/fs/cgroup read-only at /run/swiftlane/cgroupv2", v.HostPath.Path, m)
			}
		case v.HostPath != nil:
			if v.HostPath.Path != "/sys/fs/bpf" || mounts[v.Name].MountPath != "/sys/fs/bpf" {
				t.Errorf("host path %s mounted at %q: only /sys/fs/bpf is expected", v.HostPath.Path, mounts[v.Name].MountPath)
			}
		case v.ConfigMap != nil:
			config = v.ConfigMap.Name
			if m := mounts[v.Name]; !m.ReadOnly || m.MountPath != "/etc/swiftlane-lb" {
				t.Errorf("config mounted as %+v: want read-only at /etc/swiftlane-lb", m)
			}
		default:
			t.Errorf("volume %+v: want only the bpf filesystem and the config", v)
		}
	}

	// The node settings are ones `swiftlane lb --source kubernetes` loads.
	var cm corev1.ConfigMap
	find(t, objs, "ConfigMap", config, &cm)
	node, err := services.Parse([]byte(cm.Data["node.yaml"]))
	if err != nil {
		t.Fatalf("rendered node.yaml rejected: %v\n%s", err, cm.Data["node.yaml"])
	}
	if len(node.Services) > 0 || node.NodePortRange.Min != 30000 || node.NodePortRange.Max != 32767 || !slices.Contains(node.Interfaces, "veth*") {
		t.Errorf("rendered node settings %+v: want the chart's defaults, no services", node)
	}

	// RBAC: read Services and EndpointSlices, get Nodes; nothing else.
	var role rbacv1.ClusterRole
	find(t, objs, "ClusterRole", "swl-swiftlane-lb", &role)
	var rules []string
	for _, r := range role.Rules {
		if len(r.ResourceNames) > 0 || len(r.NonResourceURLs) > 0 {
			t.Errorf("rule %+v: want plain resource rules", r)
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				rules = append(rules, g+"/"+res+" "+strings.Join(r.Verbs, ","))
			}
		}
	}
	slices.Sort(rules)
	if want := []string{"/nodes get", "/services get,list,watch", "discovery.k8s.io/endpointslices get,list,watch"}; !slices.Equal(rules, want) {
		t.Errorf("ClusterRole rules %q, want %q", rules, want)
	}
	var binding rbacv1.ClusterRoleBinding
	find(t, objs, "ClusterRoleBinding", "swl-swiftlane-lb", &binding)
	if binding.RoleRef.Name != role.Name || len(binding.Subjects) != 1 ||
		binding.Subjects[0].Name != pod.ServiceAccountName || binding.Subjects[0].Namespace != testNamespace {
		t.Errorf("binding %+v: want the ClusterRole bound to the pod's ServiceAccount", binding)
	}
	object(t, objs, "ServiceAccount", pod.ServiceAccountName)
	// system-node-critical outside kube-system needs a quota on clusters that limit it.
	var quota corev1.ResourceQuota
	find(t, objs, "ResourceQuota", "swl-swiftlane-lb-priority", &quota)
	if sel := quota.Spec.ScopeSelector; sel == nil || len(sel.MatchExpressions) != 1 || !slices.Equal(sel.MatchExpressions[0].Values, []string{"system-node-critical"}) {
		t.Errorf("quota scope %+v: want the system-node-critical class", quota.Spec.ScopeSelector)
	}
}

// Next to a kube-proxy that keeps the unlabelled Services, serving only the
// labelled ones needs no kubeProxyRemoved; and a release of the load
// balancer alone has no agent.
func TestChartLBAlone(t *testing.T) {
	objs := render(t, "--set", "lb.enabled=true", "--set", "lb.serviceProxyName=swiftlane", "--set", "lb.apiServer.host=192.0.2.1",
		"--set", "agent.enabled=false", "--set", "api.enabled=false")
	var ds appsv1.DaemonSet
	find(t, objs, "DaemonSet", "swl-swiftlane-lb", &ds)
	if args := ds.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--service-proxy-name=swiftlane") {
		t.Errorf("args %v lack --service-proxy-name=swiftlane", args)
	}
	for _, o := range objs {
		if c := o.GetLabels()["app.kubernetes.io/component"]; c == "agent" || c == "api" {
			t.Errorf("%s/%s rendered with agent.enabled and api.enabled false", o.GetKind(), o.GetName())
		}
	}
}

// The real `swiftlane lb` takes the chart's arguments, environment and node
// settings file: with --check it parses them and loads the settings, and
// exits before anything reaches the kernel or the API server.
func TestChartLBBinaryAcceptsArgs(t *testing.T) {
	bin := swiftlane(t)
	objs := render(t, append(slices.Clone(lbOn), "--set", "lb.serviceProxyName=swiftlane", "--set", "lb.sweepInterval=2s")...)
	var ds appsv1.DaemonSet
	find(t, objs, "DaemonSet", "swl-swiftlane-lb", &ds)
	pod := ds.Spec.Template.Spec.DeepCopy()
	pod.Containers[0].Args = append(pod.Containers[0].Args, "--check")
	p := (&kube{}).start(t, bin, objs, *pod, "node-a", &rest.Config{Host: "https://192.0.2.1:8443"})
	select {
	case <-p.exited:
	case <-time.After(time.Minute):
		t.Fatalf("swiftlane lb --check still runs after a minute:\n%s", p.log.String())
	}
	if p.err != nil || !strings.Contains(p.log.String(), "node settings OK") {
		t.Fatalf("swiftlane lb with the chart's arguments: %v\n%s", p.err, p.log.String())
	}
}
