// SPDX-License-Identifier: Apache-2.0
//go:build k8stest

package k8s

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/swiftlane/swiftlane/apis/swiftlane/v1alpha1"
	"github.com/swiftlane/swiftlane/internal/api"
	"github.com/swiftlane/swiftlane/internal/apitypes"
	"github.com/swiftlane/swiftlane/internal/auth"
	"github.com/swiftlane/swiftlane/internal/config"
	"github.com/swiftlane/swiftlane/internal/kubetest"
	"github.com/swiftlane/swiftlane/internal/strategy"
)

// chartDir is the chart under test, from this package's directory.
var chartDir = filepath.Join("..", "..", "deploy", "helm", "swiftlane")

// tool is the path of a binary lab/k8s.sh built (helm, kubectl, ...).
func tool(t *testing.T, name string) string {
	t.Helper()
	dir := os.Getenv("SWL_K8S_BIN")
	if dir == "" {
		t.Fatal("SWL_K8S_BIN is not set: run SWL_K8S_BIN=$(bash lab/k8s.sh) go test -tags k8stest ./test/k8s/")
	}
	p := filepath.Join(dir, name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s: %v (bash lab/k8s.sh builds it)", name, err)
	}
	return p
}

// run runs a binary and returns its stdout; the error carries stderr.
func run(t *testing.T, stdin []byte, bin string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+helmHome, "HELM_CONFIG_HOME="+helmHome, "HELM_DATA_HOME="+helmHome)
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w: %s", filepath.Base(bin), strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// helmHome keeps helm's cache and config out of the user's home.
var helmHome string

const (
	testRelease   = "swl"
	testNamespace = "swl-system"
	// kubeVersion is what helm template and lint assume: helm built without
	// its release ldflags assumes 1.20, below the chart's kubeVersion.
	kubeVersion = "1.36.0"
)

// template is helm template of the chart for testRelease in testNamespace.
func template(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return run(t, nil, tool(t, "helm"), append([]string{"template", testRelease, chartDir,
		"--namespace", testNamespace, "--kube-version", kubeVersion}, args...)...)
}

// render runs helm template for testRelease in testNamespace with extra
// arguments (--set ...) and returns the objects.
func render(t *testing.T, args ...string) []*unstructured.Unstructured {
	t.Helper()
	out, err := template(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return decodeObjects(t, out)
}

func decodeObjects(t *testing.T, manifest string) []*unstructured.Unstructured {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096)
	var objs []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			return objs
		} else if err != nil {
			t.Fatalf("rendered manifest: %v", err)
		}
		if m == nil {
			continue // an empty document
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
}

// object returns the one rendered object of that kind and name.
func object(t *testing.T, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	var have []string
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
		have = append(have, o.GetKind()+"/"+o.GetName())
	}
	t.Fatalf("no %s %s rendered; have %v", kind, name, have)
	return nil
}

// find converts the one rendered object of that kind and name into out.
func find(t *testing.T, objs []*unstructured.Unstructured, kind, name string, out any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(object(t, objs, kind, name).Object, out); err != nil {
		t.Fatalf("%s %s: %v", kind, name, err)
	}
}

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
	if want := with("SYS_ADMIN"); !slices.Equal(add, want) {
		t.Errorf("automatic mode: capabilities %v, want %v", add, want)
	}

	if add, _ = agentCapabilities(t, "--set", "agent.config.scheduler.mode=userspace", "--set", "agent.config.automatic.enabled=true"); !slices.Equal(add, with("IPC_LOCK", "SYS_ADMIN")) {
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
		{"automatic function name", []string{"--set", "agent.config.automatic.functions={gtp encap}"}, []string{"/agent/config/automatic/functions/0", "does not match pattern"}},
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

// The rendered chart applies cleanly to a real API server (server-side
// apply, twice: the second changes nothing), and each service account can
// do what its component does and nothing more.
func TestChartApply(t *testing.T) {
	k := cluster(t)
	k.applyCRDs(t)
	k.namespace(t, testNamespace)
	manifest, err := template(t)
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
			{apiSA, "list", "schedulingnodes.swiftlane.io", "", "", true},
			{apiSA, "delete", "schedulingnodes.swiftlane.io", "", "", true},
			{apiSA, "update", "schedulingnodes.swiftlane.io", "status", "", true},
			// ... and nothing else.
			{apiSA, "get", "schedulingstrategies.swiftlane.io", "", "tenant-a", false},
			{apiSA, "create", "schedulingstrategies.swiftlane.io", "", "tenant-a", false},
			{apiSA, "patch", "schedulingstrategies.swiftlane.io", "status", testNamespace, false},
			{apiSA, "get", "secrets", "", testNamespace, false},
			{apiSA, "list", "pods", "", testNamespace, false},
			{apiSA, "delete", "namespaces", "", "", false},
			{apiSA, "update", "schedulingnodes.swiftlane.io", "", "", false},
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
		apiNodeRules := []string{"swiftlane.io/schedulingnodes create,delete,get,list,watch", "swiftlane.io/schedulingnodes/status patch,update"}
		for _, c := range []struct {
			as, ns string
			want   []string
		}{
			{agentSA, testNamespace, agentRules},
			{agentSA, "tenant-a", agentRules},
			{apiSA, testNamespace, append([]string{"swiftlane.io/schedulingstrategies create,delete,get,list,update,watch"}, apiNodeRules...)},
			{apiSA, "tenant-a", apiNodeRules},
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

// The real `swiftlane agent` and `swiftlane api`, started with the exact
// arguments, environment and files (ConfigMap, Secrets) the chart renders,
// under the chart's service accounts: the chart and the binaries agree on
// flags, the generated keys work, and the RBAC is enough for what the
// binaries really do. The agent runs in observe mode (no sched_ext here).
func TestChartBinaries(t *testing.T) {
	bin := swiftlane(t) // before any deadline: the build takes a while
	k := cluster(t)
	k.applyCRDs(t)
	k.namespace(t, testNamespace)
	manifest, err := template(t, "--set", "agent.config.api.interval=1")
	if err != nil {
		t.Fatal(err)
	}
	k.mustApply(t, manifest)
	objs := decodeObjects(t, manifest)

	const node = "chart-node-a"
	tenant := k.namespace(t, "chart-tenant")
	k.mustApply(t, fmt.Sprintf(`
apiVersion: v1
kind: Node
metadata:
  name: %[1]s
  labels: {zone: a}
---
apiVersion: v1
kind: Pod
metadata:
  name: gnb
  namespace: %[2]s
  labels: {app: gnb}
spec:
  nodeName: %[1]s
  automountServiceAccountToken: false
  containers: [{name: gnb, image: gnb}]
---
apiVersion: swiftlane.io/v1alpha1
kind: SchedulingStrategy
metadata:
  name: gnb
  namespace: %[2]s
spec:
  podSelector: {matchLabels: {app: gnb}}
  nodeSelector: {zone: a}
  class: critical
`, node, tenant))

	crd, err := v1alpha1.NewRESTClient(k.config)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()

	var ds appsv1.DaemonSet
	find(t, objs, "DaemonSet", testRelease+"-swiftlane-agent", &ds)
	agentSA := testRelease + "-swiftlane-agent"
	agentProc := k.start(t, bin, objs, ds.Spec.Template.Spec, node,
		k.serviceAccountConfig(t, testNamespace, agentSA, k.agentPod(t, testNamespace, agentSA, node)))
	// The agent creates its SchedulingNode with the Node's labels ...
	agentAlive := agentProc.alive(ctx)
	lw := cache.NewListWatchFromClient(crd, v1alpha1.NodesResource.Resource, "", fields.OneTermEqualSelector("metadata.name", node))
	if _, err := watchtools.UntilWithSync(agentAlive, lw, &v1alpha1.SchedulingNode{}, nil, func(e watch.Event) (bool, error) {
		n, ok := e.Object.(*v1alpha1.SchedulingNode)
		return ok && n.Status.Mode == "observe" && n.Status.Labels["zone"] == "a", nil
	}); err != nil {
		t.Fatalf("no SchedulingNode %s in observe mode with the node's labels: %v (%v)\nagent:\n%s", node, err, context.Cause(agentAlive), agentProc.log.String())
	}
	// ... and its entry of the strategy's status, counting the node's pod.
	lw = cache.NewListWatchFromClient(crd, v1alpha1.StrategiesResource.Resource, tenant, fields.OneTermEqualSelector("metadata.name", "gnb"))
	if _, err := watchtools.UntilWithSync(agentAlive, lw, &v1alpha1.SchedulingStrategy{}, nil, func(e watch.Event) (bool, error) {
		s, ok := e.Object.(*v1alpha1.SchedulingStrategy)
		return ok && slices.ContainsFunc(s.Status.Nodes, func(n v1alpha1.StrategyNodeStatus) bool { return n.Node == node && n.Pods == 1 }), nil
	}); err != nil {
		t.Fatalf("no status.nodes[%s] with 1 pod: %v (%v)\nagent:\n%s", node, err, context.Cause(agentAlive), agentProc.log.String())
	}

	// The chart's probes get 200 from the agent, and Prometheus its metrics.
	for _, pr := range []*corev1.Probe{agentProc.container.LivenessProbe, agentProc.container.ReadinessProbe,
		{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/metrics", Port: intstr.FromString("http")}}}} {
		if code := agentProc.probe(t, pr); code != http.StatusOK {
			t.Errorf("agent %s: HTTP %d", pr.HTTPGet.Path, code)
		}
	}

	var dep appsv1.Deployment
	find(t, objs, "Deployment", testRelease+"-swiftlane-api", &dep)
	apiProc := k.start(t, bin, objs, dep.Spec.Template.Spec, node, k.serviceAccountConfig(t, testNamespace, testRelease+"-swiftlane-api", nil))
	addr := apiProc.await(t, ctx, regexp.MustCompile(`control plane on https://(\S+)`))
	for _, pr := range []*corev1.Probe{apiProc.container.LivenessProbe, apiProc.container.ReadinessProbe} {
		if code := apiProc.probe(t, pr); code != http.StatusOK {
			t.Errorf("API %s: HTTP %d", pr.HTTPGet.Path, code)
		}
	}
	var tlsSecret, authSecret corev1.Secret
	find(t, objs, "Secret", testRelease+"-swiftlane-api-tls", &tlsSecret)
	find(t, objs, "Secret", testRelease+"-swiftlane-api-auth", &authSecret)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(tlsSecret.Data["ca.crt"])
	c := api.NewClient("https://"+addr, "", &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12})
	if _, err := c.Health(ctx); err != nil {
		t.Fatalf("health over TLS with the chart's CA: %v\napi:\n%s", err, apiProc.log.String())
	}
	login, err := c.Login(ctx, auth.AdminUser, strings.TrimSpace(string(authSecret.Data[auth.CredentialFile])))
	if err != nil {
		t.Fatalf("log in with the chart's admin credential: %v", err)
	}
	admin := c.WithToken(login.Token)
	critical := strategy.Critical
	if _, err := admin.CreateStrategy(ctx, apitypes.Strategy{Strategy: strategy.Strategy{Name: "upf", Class: &critical, CommandRegex: "upf"}}); err != nil {
		t.Fatalf("create a strategy through the API: %v\napi:\n%s", err, apiProc.log.String())
	}
	if _, err := k.kubectl(t, nil, "get", "-n", testNamespace, "schedulingstrategy", "upf"); err != nil {
		t.Errorf("the API's strategy is no SchedulingStrategy: %v", err)
	}
	nodes, err := admin.ListNodes(ctx)
	if err != nil || !slices.ContainsFunc(nodes.Nodes, func(n apitypes.Node) bool { return n.Name == node }) {
		t.Errorf("the API does not list the agent's node %s: %v %+v", node, err, nodes)
	}
	// An agent outside the cluster registers and heartbeats through the API.
	tok, err := admin.CreateToken(ctx, apitypes.TokenRequest{Role: string(auth.Agent), Node: "chart-rest-node"})
	if err != nil {
		t.Fatal(err)
	}
	rest := c.WithToken(tok.Token)
	if _, err := rest.RegisterNode(ctx, "chart-rest-node", apitypes.Registration{Version: "test", Kernel: "6.18", Mode: "observe", HeartbeatSeconds: 5}); err != nil {
		t.Errorf("register a node through the API: %v", err)
	} else if _, err := rest.Heartbeat(ctx, "chart-rest-node", apitypes.Heartbeat{SchedulerState: "disabled", Workloads: []apitypes.Workload{}}); err != nil {
		t.Errorf("heartbeat through the API: %v", err)
	}
	if err := admin.DeleteNode(ctx, "chart-rest-node"); err != nil {
		t.Errorf("forget a node through the API: %v", err)
	}
	if _, err := admin.DeleteStrategy(ctx, "upf"); err != nil {
		t.Errorf("delete a strategy through the API: %v", err)
	}

	for name, p := range map[string]*process{"agent": agentProc, "api": apiProc} {
		if err := p.stop(); err != nil {
			t.Errorf("%s did not exit cleanly on SIGTERM: %v\n%s", name, err, p.log.String())
		}
		if strings.Contains(strings.ToLower(p.log.String()), "forbidden") {
			t.Errorf("the %s was refused something:\n%s", name, p.log.String())
		}
	}
}

// helm install and upgrade against the API server: the generated keys are
// kept across upgrades (lookup), the serving certificate is re-signed by the
// same CA when its names change or it nears expiry, and only then does the
// API roll.
func TestChartInstallUpgradeKeepsKeys(t *testing.T) {
	k := cluster(t)
	k.applyCRDs(t)
	const rel, ns = "swl2", "swl2-system"
	k.namespace(t, ns)
	helm := func(args ...string) string {
		t.Helper()
		out, err := k.helm(t, append(args, "--namespace", ns)...)
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		return out
	}
	notes := helm("install", rel, chartDir, "--skip-crds")
	// The install notes name the real objects.
	for _, want := range []string{
		"kubectl get schedulingnodes", "kubectl get schedulingstrategies -A",
		"port-forward service/" + rel + "-swiftlane-api 8443:443",
		"get secret " + rel + "-swiftlane-api-auth", `{.data.admin\.credential}`,
		"get secret " + rel + "-swiftlane-api-tls", `{.data.ca\.crt}`,
	} {
		if !strings.Contains(notes, want) {
			t.Errorf("install notes lack %q:\n%s", want, notes)
		}
	}
	t.Cleanup(func() { k.helm(t, "uninstall", rel, "--namespace", ns) })

	type state struct {
		auth, ca, tls map[string][]byte
		rollout       string // the API pod template's checksum/secrets
	}
	read := func() state {
		t.Helper()
		var s state
		for name, dst := range map[string]*map[string][]byte{
			rel + "-swiftlane-api-auth": &s.auth, rel + "-swiftlane-api-ca": &s.ca, rel + "-swiftlane-api-tls": &s.tls,
		} {
			sec, err := k.client.CoreV1().Secrets(ns).Get(t.Context(), name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			*dst = sec.Data
		}
		dep, err := k.client.AppsV1().Deployments(ns).Get(t.Context(), rel+"-swiftlane-api", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s.rollout = dep.Spec.Template.Annotations["checksum/secrets"]
		return s
	}
	same := func(what string, a, b map[string][]byte) {
		t.Helper()
		for key := range a {
			if !bytes.Equal(a[key], b[key]) {
				t.Errorf("%s %s changed", what, key)
			}
		}
	}
	verifies := func(s state, name string) {
		t.Helper()
		pair, err := tls.X509KeyPair(s.tls["tls.crt"], s.tls["tls.key"])
		if err != nil {
			t.Fatal(err)
		}
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(s.ca["ca.crt"])
		if _, err := pair.Leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: roots}); err != nil {
			t.Errorf("certificate for %s: %v", name, err)
		}
	}

	installed := read()
	verifies(installed, rel+"-swiftlane-api."+ns+".svc")

	helm("upgrade", rel, chartDir)
	upgraded := read()
	same("auth", installed.auth, upgraded.auth)
	same("CA", installed.ca, upgraded.ca)
	same("TLS", installed.tls, upgraded.tls)
	if upgraded.rollout != installed.rollout {
		t.Error("an upgrade that changed no key rolls the API")
	}

	helm("upgrade", rel, chartDir, "--set", "api.tls.extraSANs={ui.example.com}")
	resigned := read()
	same("auth", installed.auth, resigned.auth)
	same("CA", installed.ca, resigned.ca)
	if bytes.Equal(resigned.tls["tls.crt"], installed.tls["tls.crt"]) {
		t.Error("new api.tls.extraSANs did not re-sign the certificate")
	}
	verifies(resigned, "ui.example.com")
	verifies(resigned, rel+"-swiftlane-api."+ns+".svc")
	if resigned.rollout == installed.rollout {
		t.Error("a re-signed certificate does not roll the API")
	}

	// 30 days before expiry the next upgrade re-signs it.
	soon := strconv.FormatInt(time.Now().Add(29*24*time.Hour).Unix(), 10)
	if _, err := k.kubectl(t, nil, "annotate", "--overwrite", "-n", ns, "secret", rel+"-swiftlane-api-tls", "swiftlane.io/not-after="+soon); err != nil {
		t.Fatal(err)
	}
	helm("upgrade", rel, chartDir, "--reuse-values")
	renewed := read()
	if bytes.Equal(renewed.tls["tls.crt"], resigned.tls["tls.crt"]) {
		t.Error("a certificate 29 days from expiry was not re-signed")
	}
	same("CA", installed.ca, renewed.ca)
	verifies(renewed, "ui.example.com")
}

// process is a swiftlane binary started by start.
type process struct {
	container corev1.Container
	ports     map[int32]string // container port -> local address
	cmd       *exec.Cmd
	log       *syncBuffer
	exited    chan struct{} // closed when it has exited, err set
	err       error
}

// start runs the pod's one container as a local process of the swiftlane
// binary: its volumes materialised under a temporary directory (ConfigMaps
// and Secrets from objs; host paths as they are), mount paths in its
// arguments pointed there, $(VAR) references expanded, listen addresses on
// an ephemeral loopback port, and a kubeconfig with creds.
func (k *kube) start(t *testing.T, bin string, objs []*unstructured.Unstructured, pod corev1.PodSpec, node string, creds *rest.Config) *process {
	t.Helper()
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Containers))
	}
	c := pod.Containers[0]
	dir := t.TempDir()
	local := map[string]string{} // volume name -> local path
	for _, v := range pod.Volumes {
		p := filepath.Join(dir, v.Name)
		var data map[string][]byte
		var items []corev1.KeyToPath
		switch {
		case v.HostPath != nil:
			local[v.Name] = v.HostPath.Path
			continue
		case v.EmptyDir != nil:
		case v.ConfigMap != nil:
			var cm corev1.ConfigMap
			find(t, objs, "ConfigMap", v.ConfigMap.Name, &cm)
			data, items = map[string][]byte{}, v.ConfigMap.Items
			for key, val := range cm.Data {
				data[key] = []byte(val)
			}
		case v.Secret != nil:
			var sec corev1.Secret
			find(t, objs, "Secret", v.Secret.SecretName, &sec)
			data, items = sec.Data, v.Secret.Items
		default:
			t.Fatalf("volume %s: unsupported source", v.Name)
		}
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if items == nil {
			for key := range data {
				items = append(items, corev1.KeyToPath{Key: key, Path: key})
			}
		}
		for _, it := range items {
			if err := os.WriteFile(filepath.Join(p, it.Path), data[it.Key], 0o600); err != nil {
				t.Fatal(err)
			}
		}
		local[v.Name] = p
	}
	mounts := slices.Clone(c.VolumeMounts)
	slices.SortFunc(mounts, func(a, b corev1.VolumeMount) int { return len(b.MountPath) - len(a.MountPath) })

	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName":
			env[e.Name] = node
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		default:
			t.Fatalf("env %s: unsupported source", e.Name)
		}
	}
	p := &process{log: &syncBuffer{}, exited: make(chan struct{}), ports: map[int32]string{}}
	listen := regexp.MustCompile(`^(--[a-z-]+)=:([0-9]+)$`)
	var args []string
	for _, a := range c.Args {
		for name, val := range env {
			a = strings.ReplaceAll(a, "$("+name+")", val)
		}
		for _, m := range mounts {
			if l, ok := local[m.Name]; ok && l != m.MountPath {
				a = strings.ReplaceAll(a, "="+m.MountPath, "="+l)
			}
		}
		if m := listen.FindStringSubmatch(a); m != nil {
			port, _ := strconv.Atoi(m[2])
			p.ports[int32(port)] = freeAddr(t)
			a = m[1] + "=" + p.ports[int32(port)]
		}
		args = append(args, a)
	}
	args = slices.Insert(args, 1, "--kubeconfig="+kubeconfigFor(t, creds)) // after the subcommand

	p.container = c
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	for name, val := range env {
		p.cmd.Env = append(p.cmd.Env, name+"="+val)
	}
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() { p.stop() })
	t.Logf("started swiftlane %s", strings.Join(args, " "))
	return p
}

// probe runs one of the container's HTTP probes as the kubelet would
// (HTTPS without verifying the certificate) and returns the status code.
func (p *process) probe(t *testing.T, pr *corev1.Probe) int {
	t.Helper()
	if pr == nil || pr.HTTPGet == nil {
		t.Fatalf("%s: no HTTP probe", p.container.Name)
	}
	port := int32(pr.HTTPGet.Port.IntValue())
	for _, cp := range p.container.Ports {
		if cp.Name == pr.HTTPGet.Port.String() {
			port = cp.ContainerPort
		}
	}
	addr, ok := p.ports[port]
	if !ok {
		t.Fatalf("%s: the probe's port %s is no port the process listens on (%v)", p.container.Name, pr.HTTPGet.Port.String(), p.ports)
	}
	scheme := strings.ToLower(string(pr.HTTPGet.Scheme))
	if scheme == "" {
		scheme = "http"
	}
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := hc.Get(scheme + "://" + addr + pr.HTTPGet.Path)
	if err != nil {
		t.Fatalf("%s probe %s: %v", p.container.Name, pr.HTTPGet.Path, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// freeAddr is a loopback address with a port nothing listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// alive is ctx, also cancelled when the process exits.
func (p *process) alive(ctx context.Context) context.Context {
	ctx, cancel := context.WithCancelCause(ctx)
	go func() {
		select {
		case <-p.exited:
			cancel(fmt.Errorf("the process exited: %v", p.err))
		case <-ctx.Done():
		}
	}()
	return ctx
}

// await returns the first submatch of re in the process's output, once it
// appears.
func (p *process) await(t *testing.T, ctx context.Context, re *regexp.Regexp) string {
	t.Helper()
	for {
		if m := re.FindStringSubmatch(p.log.String()); m != nil {
			return m[1]
		}
		select {
		case <-p.exited:
			t.Fatalf("exited (%v) before printing %s:\n%s", p.err, re, p.log.String())
		case <-ctx.Done():
			t.Fatalf("no %s within the deadline:\n%s", re, p.log.String())
		case <-p.log.wrote():
		}
	}
}

// stop sends SIGTERM and waits for the exit (SIGKILL after 20 s).
func (p *process) stop() error {
	select {
	case <-p.exited:
		return p.err
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return p.err
	case <-time.After(20 * time.Second):
		p.cmd.Process.Kill()
		<-p.exited
		return errors.New("killed after 20 s without exiting on SIGTERM")
	}
}

// swiftlane builds the binary under test once.
func swiftlane(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		binPath = filepath.Join(workDir, "swiftlane")
		cmd := exec.Command("go", "build", "-o", binPath, "github.com/swiftlane/swiftlane")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// syncBuffer collects a process's output; wrote wakes up readers.
type syncBuffer struct {
	mu     sync.Mutex
	b      bytes.Buffer
	notify chan struct{}
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.notify != nil {
		close(b.notify)
		b.notify = nil
	}
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// wrote is closed by the next Write.
func (b *syncBuffer) wrote() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.notify == nil {
		b.notify = make(chan struct{})
	}
	return b.notify
}

// kube is a real control plane (kube-apiserver + etcd) and an admin's clients.
type kube struct {
	kubeconfig string
	config     *rest.Config // admin
	client     kubernetes.Interface

	crdsOnce sync.Once
	crdsErr  error
}

func (k *kube) kubectl(t *testing.T, stdin []byte, args ...string) (string, error) {
	t.Helper()
	return run(t, stdin, tool(t, "kubectl"), append([]string{"--kubeconfig", k.kubeconfig}, args...)...)
}

func (k *kube) helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return run(t, nil, tool(t, "helm"), append([]string{"--kubeconfig", k.kubeconfig}, args...)...)
}

// mustApply server-side applies a manifest as the admin.
func (k *kube) mustApply(t *testing.T, manifest string) {
	t.Helper()
	if out, err := k.kubectl(t, []byte(manifest), "apply", "--server-side", "--field-manager=chart-test", "-f", "-"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

// applyCRDs installs the chart's CRDs (once per control plane) and waits
// until they are served.
func (k *kube) applyCRDs(t *testing.T) {
	t.Helper()
	k.crdsOnce.Do(func() {
		if _, k.crdsErr = k.kubectl(t, nil, "apply", "--server-side", "--field-manager=chart-test", "-f", filepath.Join(chartDir, "crds")); k.crdsErr != nil {
			return
		}
		_, k.crdsErr = k.kubectl(t, nil, "wait", "--for=condition=Established", "--timeout=60s",
			"crd/schedulingstrategies.swiftlane.io", "crd/schedulingnodes.swiftlane.io")
	})
	if k.crdsErr != nil {
		t.Fatalf("CRDs: %v", k.crdsErr)
	}
}

// namespace makes sure a namespace exists, with the "default" service
// account pods need (there is no controller manager to create it).
func (k *kube) namespace(t *testing.T, name string) string {
	t.Helper()
	k.mustApply(t, fmt.Sprintf("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: %[1]s\n---\napiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: default\n  namespace: %[1]s\n", name))
	return name
}

// tokenSeconds is the lifetime of service account tokens the tests request.
var tokenSeconds int64 = 3600

// serviceAccountConfig is a client configuration authenticating as a
// service account, with a token from the TokenRequest API; bound to pod
// (if not nil) as the kubelet binds the tokens it projects, so it names the
// pod's node.
func (k *kube) serviceAccountConfig(t *testing.T, ns, name string, pod *corev1.Pod) *rest.Config {
	t.Helper()
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &tokenSeconds}}
	if pod != nil {
		req.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}
	}
	tr, err := k.client.CoreV1().ServiceAccounts(ns).CreateToken(t.Context(), name, req, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for %s/%s: %v", ns, name, err)
	}
	cfg := rest.AnonymousClientConfig(k.config)
	cfg.BearerToken = tr.Status.Token
	return cfg
}

// agentPod stores a pod of the agent's service account bound to node, the
// object an agent's projected token is bound to (no kubelet runs it).
func (k *kube) agentPod(t *testing.T, ns, sa, node string) *corev1.Pod {
	t.Helper()
	pod, err := k.client.CoreV1().Pods(ns).Create(t.Context(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "agent-", Namespace: ns},
		Spec: corev1.PodSpec{
			NodeName: node, ServiceAccountName: sa, AutomountServiceAccountToken: new(false),
			Containers: []corev1.Container{{Name: "agent", Image: "swiftlane"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pod
}

// kubeconfigFor writes a kubeconfig for cfg (a service account's).
func kubeconfigFor(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: test, cluster: {server: %q, certificate-authority-data: %s}}]
users: [{name: test, user: {token: %q}}]
contexts: [{name: test, context: {cluster: test, user: test}}]
current-context: test
`, cfg.Host, base64.StdEncoding.EncodeToString(cfg.CAData), cfg.BearerToken)
	f, err := os.CreateTemp(t.TempDir(), "kubeconfig-")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(kc); err != nil {
		t.Fatal(err)
	}
	return f.Name()
}

// rules is what user may do in namespace ns (cluster-wide rules included),
// one "group/resource verb,verb" line per resource, sorted. The rules every
// authenticated user gets (self-reviews) are left out.
func (k *kube) rules(t *testing.T, user, ns string) []string {
	t.Helper()
	cfg := rest.CopyConfig(k.config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.AuthorizationV1().SelfSubjectRulesReviews().Create(t.Context(), &authorizationv1.SelfSubjectRulesReview{
		Spec: authorizationv1.SelfSubjectRulesReviewSpec{Namespace: ns},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("rules of %s in %s: %v", user, ns, err)
	}
	if r.Status.Incomplete {
		t.Fatalf("rules of %s in %s incomplete: %s", user, ns, r.Status.EvaluationError)
	}
	verbs := map[string]map[string]bool{}
	for _, rule := range r.Status.ResourceRules {
		for _, g := range rule.APIGroups {
			if g == "authorization.k8s.io" || g == "authentication.k8s.io" {
				continue
			}
			for _, res := range rule.Resources {
				key := g + "/" + res
				if len(rule.ResourceNames) > 0 {
					key += "[" + strings.Join(rule.ResourceNames, ",") + "]"
				}
				if verbs[key] == nil {
					verbs[key] = map[string]bool{}
				}
				for _, v := range rule.Verbs {
					verbs[key][v] = true
				}
			}
		}
	}
	var out []string
	for key, vs := range verbs {
		out = append(out, key+" "+strings.Join(slices.Sorted(maps.Keys(vs)), ","))
	}
	slices.Sort(out)
	return out
}

// workDir holds what the tests build and run (the binary, the control
// plane's data); TestMain removes it.
var workDir string

func TestMain(m *testing.M) {
	var err error
	if workDir, err = os.MkdirTemp("", "swiftlane-k8stest-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	helmHome = filepath.Join(workDir, "helm")
	code := m.Run()
	if shared.server != nil {
		if err := shared.server.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stop the control plane:", err)
		}
	}
	os.RemoveAll(workDir)
	os.Exit(code)
}

// shared is the control plane the cluster tests share, started by the
// first test that needs one.
var shared struct {
	once   sync.Once
	server *kubetest.Server
	kube   *kube
	err    error
}

func cluster(t *testing.T) *kube {
	t.Helper()
	shared.once.Do(func() {
		dir := filepath.Join(workDir, "k8s")
		if shared.err = os.MkdirAll(dir, 0o700); shared.err != nil {
			return
		}
		shared.server, shared.err = kubetest.Run(context.Background(), dir, kubetest.Options{BinDir: os.Getenv(kubetest.EnvBinDir)})
		if shared.err != nil {
			return
		}
		cfg := shared.server.RESTConfig()
		c, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			shared.err = err
			return
		}
		shared.kube = &kube{kubeconfig: shared.server.Kubeconfig(), config: cfg, client: c}
	})
	if shared.err != nil {
		t.Fatalf("control plane: %v", shared.err)
	}
	return shared.kube
}
