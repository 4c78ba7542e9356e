// SPDX-License-Identifier: Apache-2.0
//go:build k8stest

// The chart as helm renders it, checked without a cluster: lint, the
// agent's privileges per mode, its config, the generated keys, refused
// values, the ServiceMonitor.

package k8s

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/swiftlane/swiftlane/internal/auth"
	"github.com/swiftlane/swiftlane/internal/config"
	"github.com/swiftlane/swiftlane/internal/strategy"
)

func TestChartLint(t *testing.T) {
	helm := tool(t, "helm")
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"defaults", nil},
		{"without the API", []string{"--set", "api.enabled=false"}},
		{"own secrets and service accounts", []string{
			"--set", "api.tls.existingSecret=my-tls", "--set", "api.auth.existingSecret=my-auth",
			"--set", "rbac.create=false", "--set", "agent.serviceAccount.create=false", "--set", "agent.serviceAccount.name=a",
			"--set", "api.serviceAccount.create=false", "--set", "api.serviceAccount.name=b",
		}},
		{"pinned digest, extra SANs", []string{
			"--set", "image.digest=sha256:" + strings.Repeat("ab", 32), "--set", "api.tls.extraSANs={swiftlane.example.com,192.0.2.7}",
		}},
		{"user-space mode, automatic mode", []string{
			"--set", "agent.config.scheduler.mode=userspace", "--set", "agent.config.scheduler.policy=fifo", "--set", "agent.config.automatic.enabled=true",
		}},
		{"load balancer", lbOn},
		{"load balancer alone", append(slices.Clone(lbOn), "--set", "agent.enabled=false", "--set", "api.enabled=false")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := run(t, nil, helm, append([]string{"lint", "--strict", chartDir, "--namespace", testNamespace, "--kube-version", kubeVersion}, tc.args...)...)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if !strings.Contains(out, "0 chart(s) failed") {
				t.Fatalf("helm lint --strict:\n%s", out)
			}
		})
	}
}

// The agent's pod: the narrowest privileges that load a sched_ext scheduler.
func TestChartAgentPod(t *testing.T) {
	objs := render(t)
	var ds appsv1.DaemonSet
	find(t, objs, "DaemonSet", "swl-swiftlane-agent", &ds)
	pod := ds.Spec.Template.Spec
	if !pod.HostPID || pod.HostNetwork || pod.HostIPC {
		t.Errorf("hostPID=%v hostNetwork=%v hostIPC=%v: want only hostPID", pod.HostPID, pod.HostNetwork, pod.HostIPC)
	}
	if pod.PriorityClassName != "system-node-critical" {
		t.Errorf("priorityClassName %q", pod.PriorityClassName)
	}
	if len(pod.Tolerations) != 1 || pod.Tolerations[0].Operator != corev1.TolerationOpExists || pod.Tolerations[0].Key != "" {
		t.Errorf("tolerations %+v: want one that tolerates every taint", pod.Tolerations)
	}
	if sp := pod.SecurityContext.SeccompProfile; sp == nil || sp.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod seccompProfile %+v: want RuntimeDefault", sp)
	}
	if ru := ds.Spec.UpdateStrategy.RollingUpdate; ru == nil || ru.MaxSurge == nil || ru.MaxSurge.IntValue() != 0 {
		t.Errorf("rollingUpdate %+v: maxSurge must be 0 (two agents cannot both attach)", ru)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Containers))
	}
	c := pod.Containers[0]
	sc := c.SecurityContext
	if sc == nil {
		t.Fatal("agent container has no securityContext")
	}
	if sc.Privileged != nil && *sc.Privileged {
		t.Error("agent container is privileged")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Error("allowPrivilegeEscalation is not false")
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("readOnlyRootFilesystem is not true")
	}
	if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("capabilities.drop %v: want [ALL]", sc.Capabilities)
	}
	add := slices.Clone(sc.Capabilities.Add)
	slices.Sort(add)
	if want := []corev1.Capability{"BPF", "PERFMON", "SYS_PTRACE"}; !slices.Equal(add, want) {
		t.Errorf("capabilities.add %v, want %v", add, want)
	}
	for _, arg := range []string{"agent", "--source=kubernetes", "--node=$(NODE_NAME)", "--system-namespace=" + testNamespace, "--metrics-addr=:9461"} {
		if !slices.Contains(c.Args, arg) {
			t.Errorf("args %v lack %s", c.Args, arg)
		}
	}
	if len(c.Env) == 0 || c.Env[0].Name != "NODE_NAME" || c.Env[0].ValueFrom == nil || c.Env[0].ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
		t.Errorf("env %+v: want NODE_NAME from spec.nodeName", c.Env)
	}
	if c.LivenessProbe == nil || c.ReadinessProbe == nil {
		t.Error("agent has no liveness or readiness probe")
	}
	if _, ok := c.Resources.Requests[corev1.ResourceMemory]; !ok {
		t.Error("agent has no memory request")
	}
	if _, ok := c.Resources.Limits[corev1.ResourceMemory]; !ok {
		t.Error("agent has no memory limit")
	}
	// The only host path is the cgroup tree, mounted read-only.
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m
	}
	for _, v := range pod.Volumes {
		if v.HostPath == nil {
			continue
		}
		if v.HostPath.Path != "/sys/fs/cgroup" {
			t.Errorf("host path %s mounted: only /sys/fs/cgroup is expected", v.HostPath.Path)
		}
		if m := mounts[v.Name]; !m.ReadOnly || m.MountPath != "/sys/fs/cgroup" {
			t.Errorf("host path %s mounted as %+v: want read-only at /sys/fs/cgroup", v.HostPath.Path, m)
		}
	}

	// The rendered config file is one `swiftlane agent --config` accepts.
	var cm corev1.ConfigMap
	find(t, objs, "ConfigMap", "swl-swiftlane-agent", &cm)
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(cm.Data["config.yaml"]), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatalf("rendered agent config rejected: %v\n%s", err, cm.Data["config.yaml"])
	}
	if cfg.Scheduler.SliceNsDefault != 2000000 || cfg.API.Interval != 5 || cfg.Scheduler.Mode != config.ModeKernel || cfg.Automatic.Enabled {
		t.Errorf("rendered config %+v: want the chart's defaults", cfg)
	}
}

// agentCapabilities renders the chart and returns the agent container's
// added capabilities, sorted, and the config it would load.
func agentCapabilities(t *testing.T, args ...string) ([]corev1.Capability, config.Config) {
	t.Helper()
	objs := render(t, args...)
	var ds appsv1.DaemonSet
	find(t, objs, "DaemonSet", "swl-swiftlane-agent", &ds)
	add := slices.Clone(ds.Spec.Template.Spec.Containers[0].SecurityContext.Capabilities.Add)
	slices.Sort(add)
	var cm corev1.ConfigMap
	find(t, objs, "ConfigMap", "swl-swiftlane-agent", &cm)
	cfg, err := config.Parse([]byte(cm.Data["config.yaml"]))
	if err != nil {
		t.Fatalf("rendered agent config rejected: %v\n%s", err, cm.Data["config.yaml"])
	}
	return add, cfg
}

// The scheduler mode and automatic mode reach the agent's config file, and
// each adds only the capability it needs: IPC_LOCK to lock the user-space
// scheduler's memory, SYS_ADMIN for the GTP-U tracer's module BTF.
func TestChartAgentModes(t *testing.T) {
	base := []corev1.Capability{"BPF", "PERFMON", "SYS_PTRACE"}
	with := func(extra ...corev1.Capability) []corev1.Capability {
		out := append(slices.Clone(base), extra...)
		slices.Sort(out)
		return out
	}

	add, cfg := agentCapabilities(t, "--set", "agent.config.scheduler.mode=userspace", "--set", "agent.config.scheduler.policy=fifo")
	if cfg.Scheduler.Mode != config.ModeUserspace || cfg.Scheduler.Policy != "fifo" || cfg.Automatic.Enabled {
		t.Errorf("user-space mode: rendered scheduler %+v, automatic %+v", cfg.Scheduler, cfg.Automatic)
	}
	if want := with("IPC_LOCK"); !slices.Equal(add, want) {
		t.Errorf("user-space mode: capabilities %v, want %v", add, want)
	}

	add, cfg = agentCapabilities(t, "--set", "agent.config.automatic.enabled=true", "--set", "agent.config.automatic.class=high",
		"--set", "agent.config.automatic.slice_ns=200000", "--set", "agent.config.automatic.idle_timeout_ms=2000",
		"--set", "agent.config.automatic.functions={gtp_encap_recv}", "--set", "agent.config.automatic.companions={nr-ue}")
	a := cfg.Automatic
	if !a.Enabled || a.Class != strategy.High || a.SliceNs != 200000 || a.IdleTimeoutMs != 2000 ||
		!slices.Equal(a.Functions, []string{"gtp_encap_recv"}) || !slices.Equal(a.Companions, []string{"nr-ue"}) || cfg.Scheduler.Mode != config.ModeKernel {
		t.Errorf("automatic mode: rendered %+v, scheduler %+v", a, cfg.Scheduler)
	}
	if want := with("SYS_ADMIN", "SYSLOG"); !slices.Equal(add, want) {
		t.Errorf("automatic mode: capabilities %v, want %v", add, want)
	}

	if add, _ = agentCapabilities(t, "--set", "agent.config.scheduler.mode=userspace", "--set", "agent.config.automatic.enabled=true"); !slices.Equal(add, with("IPC_LOCK", "SYS_ADMIN", "SYSLOG")) {
		t.Errorf("both: capabilities %v", add)
	}
}

// The generated keys are ones `swiftlane api` loads from its read-only
// --data-dir without generating anything, and the certificate chains to the
// CA for the Service's names.
func TestChartAPISecrets(t *testing.T) {
	objs := render(t, "--set", "api.tls.extraSANs={swiftlane.example.com,192.0.2.7}")
	var authSecret, caSecret, tlsSecret corev1.Secret
	find(t, objs, "Secret", "swl-swiftlane-api-auth", &authSecret)
	find(t, objs, "Secret", "swl-swiftlane-api-ca", &caSecret)
	find(t, objs, "Secret", "swl-swiftlane-api-tls", &tlsSecret)

	dir := t.TempDir()
	for _, k := range []string{auth.KeyFile, auth.CredentialFile} {
		v, ok := authSecret.Data[k]
		if !ok {
			t.Fatalf("auth Secret has no %s", k)
		}
		if err := os.WriteFile(filepath.Join(dir, k), v, 0o400); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(dir, 0o500); err != nil { // as read-only as the Secret volume
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(dir, 0o700) })
	a, bootstrap, err := auth.LoadOrCreate(dir)
	if err != nil {
		t.Fatalf("the API cannot load the chart's keys: %v", err)
	}
	if bootstrap != "" {
		t.Error("the API generated a new admin credential instead of using the chart's")
	}
	cred := strings.TrimSpace(string(authSecret.Data[auth.CredentialFile]))
	if len(cred) < 32 || !a.CheckAdmin(auth.AdminUser, cred) {
		t.Errorf("admin credential (%d characters) not accepted", len(cred))
	}
	tok, _, err := a.Issue("chart-test", auth.Viewer, "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Verify(tok); err != nil {
		t.Errorf("a token signed with the chart's key does not verify: %v", err)
	}

	pair, err := tls.X509KeyPair(tlsSecret.Data["tls.crt"], tlsSecret.Data["tls.key"])
	if err != nil {
		t.Fatalf("tls.crt/tls.key: %v", err)
	}
	leaf := pair.Leaf
	if !bytes.Equal(tlsSecret.Data["ca.crt"], caSecret.Data["ca.crt"]) {
		t.Error("the TLS Secret's ca.crt is not the CA's certificate")
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caSecret.Data["ca.crt"]) {
		t.Fatal("ca.crt holds no certificate")
	}
	for _, name := range []string{
		"swl-swiftlane-api", "swl-swiftlane-api.swl-system", "swl-swiftlane-api.swl-system.svc",
		"swl-swiftlane-api.swl-system.svc.cluster.local", "localhost", "swiftlane.example.com", "127.0.0.1", "192.0.2.7",
	} {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("certificate for %s: %v", name, err)
		}
	}
	if ip := net.ParseIP("192.0.2.7"); !slices.ContainsFunc(leaf.IPAddresses, ip.Equal) {
		t.Errorf("IP SANs %v lack %v", leaf.IPAddresses, ip)
	}
	if d := time.Until(leaf.NotAfter); d < 364*24*time.Hour || d > 366*24*time.Hour {
		t.Errorf("certificate valid for %v, want api.tls.certValidityDays (365 days)", d)
	}

	// The API mounts the keys and the serving certificate, never the CA key.
	var dep appsv1.Deployment
	find(t, objs, "Deployment", "swl-swiftlane-api", &dep)
	pod := dep.Spec.Template.Spec
	var secrets []string
	for _, v := range pod.Volumes {
		if v.Secret != nil {
			secrets = append(secrets, v.Secret.SecretName)
		}
		if v.HostPath != nil {
			t.Errorf("API mounts host path %s", v.HostPath.Path)
		}
	}
	slices.Sort(secrets)
	if want := []string{"swl-swiftlane-api-auth", "swl-swiftlane-api-tls"}; !slices.Equal(secrets, want) {
		t.Errorf("API mounts Secrets %v, want %v", secrets, want)
	}
	c := pod.Containers[0]
	for _, arg := range []string{"api", "--store=kubernetes", "--namespace=" + testNamespace, "--data-dir=/var/lib/swiftlane",
		"--tls-cert=/etc/swiftlane/tls/tls.crt", "--tls-key=/etc/swiftlane/tls/tls.key"} {
		if !slices.Contains(c.Args, arg) {
			t.Errorf("API args %v lack %s", c.Args, arg)
		}
	}
	if psc := pod.SecurityContext; psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
		t.Error("API pod does not run as non-root")
	}
	if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.Capabilities == nil || len(sc.Capabilities.Add) != 0 || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("API container securityContext %+v: want read-only root, all capabilities dropped", sc)
	}
}

// values.schema.json and the templates refuse bad values with the key's name.
func TestChartRejectsBadValues(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want []string // all in helm's error
	}{
		{"strategies in the agent config", []string{"--set", "agent.config.strategies[0].name=x"}, []string{"config", "strategies"}},
		{"unknown top-level key", []string{"--set", "agnet.port=1"}, []string{"agnet"}},
		{"pull policy", []string{"--set", "image.pullPolicy=Sometimes"}, []string{"pullPolicy"}},
		{"slice below 50 us", []string{"--set", "agent.config.scheduler.slice_ns_default=1000"}, []string{"slice_ns_default"}},
		{"heartbeat", []string{"--set", "agent.config.api.interval=0"}, []string{"interval"}},
		{"port", []string{"--set", "agent.port=70000"}, []string{"port"}},
		{"digest", []string{"--set", "image.digest=latest"}, []string{"digest"}},
		{"service account name without create", []string{"--set", "agent.serviceAccount.create=false"}, []string{"agent.serviceAccount.name"}},
		{"ServiceMonitor without its API", []string{"--set", "metrics.serviceMonitor.enabled=true"}, []string{"monitoring.coreos.com/v1", "--api-versions"}},
		{"scheduler mode", []string{"--set", "agent.config.scheduler.mode=hybrid"}, []string{"/agent/config/scheduler/mode", "'kernel', 'userspace'"}},
		{"user-space policy", []string{"--set", "agent.config.scheduler.mode=userspace", "--set", "agent.config.scheduler.policy=lottery"}, []string{"/agent/config/scheduler/policy", "'vruntime', 'fifo'"}},
		{"policy in kernel mode", []string{"--set", "agent.config.scheduler.policy=fifo"}, []string{"agent.config.scheduler.policy fifo: policies are for agent.config.scheduler.mode userspace"}},
		{"automatic key misspelt", []string{"--set", "agent.config.automatic.enable=true"}, []string{"/agent/config/automatic", "'enable' not allowed"}},
		{"automatic class", []string{"--set", "agent.config.automatic.class=urgent"}, []string{"/agent/config/automatic/class", "'critical', 'high', 'normal', 'background'"}},
		{"automatic slice", []string{"--set", "agent.config.automatic.slice_ns=10"}, []string{"/agent/config/automatic/slice_ns", "must be 0", "want 50,000"}},
		{"automatic idle timeout", []string{"--set", "agent.config.automatic.idle_timeout_ms=5"}, []string{"/agent/config/automatic/idle_timeout_ms", "want 100"}},
		{"audit bound", []string{"--set", "api.audit.maxEntries=0"}, []string{"/api/audit/maxEntries", "want 1"}},
		{"automatic function name", []string{"--set", "agent.config.automatic.functions={gtp encap}"}, []string{"/agent/config/automatic/functions/0", "does not match pattern"}},
		{"lb without kube-proxy removed", []string{"--set", "lb.enabled=true", "--set", "lb.apiServer.host=192.0.2.1"},
			[]string{"lb.kubeProxyRemoved: lb.enabled needs kube-proxy removed first", "kube-proxy --cleanup", "lb.kubeProxyRemoved=true", "lb.serviceProxyName"}},
		{"lb without the apiserver", []string{"--set", "lb.enabled=true", "--set", "lb.kubeProxyRemoved=true"},
			[]string{"lb.apiServer.host:", "without Service NAT", "--set lb.apiServer.host="}},
		{"lb services in the node settings", append(slices.Clone(lbOn), "--set", "lb.config.services[0].name=web"), []string{"/lb/config", "'services' not allowed"}},
		{"lb without interfaces", append(slices.Clone(lbOn), "--set-json", "lb.config.interfaces=[]"), []string{"/lb/config/interfaces", "minItems"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := template(t, tc.args...)
			if err == nil {
				t.Fatalf("helm template %v succeeded", tc.args)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q: %v", w, err)
				}
			}
		})
	}
}

func TestChartServiceMonitor(t *testing.T) {
	objs := render(t, "--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.serviceMonitor.labels.release=prom",
		"--api-versions", "monitoring.coreos.com/v1/ServiceMonitor")
	sm := object(t, objs, "ServiceMonitor", "swl-swiftlane-agent")
	if sm.GetLabels()["release"] != "prom" {
		t.Errorf("ServiceMonitor labels %v lack release=prom", sm.GetLabels())
	}
	var svc corev1.Service
	find(t, objs, "Service", "swl-swiftlane-agent-metrics", &svc)
	if svc.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("metrics Service clusterIP %q, want None (one target per agent)", svc.Spec.ClusterIP)
	}
	sel, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
	for k, v := range sel {
		if svc.Labels[k] != v {
			t.Errorf("ServiceMonitor selects %s=%s, the metrics Service has %q", k, v, svc.Labels[k])
		}
	}
	// Off by default.
	for _, o := range render(t, "--api-versions", "monitoring.coreos.com/v1/ServiceMonitor") {
		if o.GetKind() == "ServiceMonitor" {
			t.Error("ServiceMonitor rendered although metrics.serviceMonitor.enabled is false")
		}
	}
}

// The uninstall hook: its four objects are post-delete hooks, the
// ServiceAccount and RBAC created before the Job, all removed once it
// succeeds; the Job runs `swiftlane agent cleanup` as non-root.
func TestChartCleanupHook(t *testing.T) {
	objs := render(t)
	name := testRelease + "-swiftlane-cleanup"
	weights := map[string]string{"ServiceAccount": "-1", "ClusterRole": "-1", "ClusterRoleBinding": "-1", "Job": "0"}
	for kind, weight := range weights {
		a := object(t, objs, kind, name).GetAnnotations()
		if a["helm.sh/hook"] != "post-delete" || a["helm.sh/hook-weight"] != weight ||
			a["helm.sh/hook-delete-policy"] != "before-hook-creation,hook-succeeded" {
			t.Errorf("%s %s annotations %v: want a post-delete hook of weight %s, deleted on success", kind, name, a, weight)
		}
	}
	var job batchv1.Job
	find(t, objs, "Job", name, &job)
	pod := job.Spec.Template.Spec
	if pod.ServiceAccountName != name || pod.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("Job pod: service account %q, restart %q", pod.ServiceAccountName, pod.RestartPolicy)
	}
	c := pod.Containers[0]
	if !slices.Equal(c.Args[:2], []string{"agent", "cleanup"}) {
		t.Errorf("Job args %v, want agent cleanup", c.Args)
	}
	if psc := pod.SecurityContext; psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
		t.Error("cleanup pod does not run as non-root")
	}
	if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("cleanup container securityContext %+v: want read-only root, all capabilities dropped", sc)
	}

	// Without RBAC only the ServiceAccount and the Job; disabled, nothing.
	for _, tc := range []struct {
		set   string
		kinds []string
	}{
		{"rbac.create=false", []string{"Job", "ServiceAccount"}},
		{"cleanup.enabled=false", nil},
	} {
		var kinds []string
		for _, o := range render(t, "--set", tc.set) {
			if o.GetName() == name {
				kinds = append(kinds, o.GetKind())
			}
		}
		if slices.Sort(kinds); !slices.Equal(kinds, tc.kinds) {
			t.Errorf("with %s: %s objects %v, want %v", tc.set, name, kinds, tc.kinds)
		}
	}
}
