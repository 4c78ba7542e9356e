// SPDX-License-Identifier: Apache-2.0
//go:build k8stest

// The real swiftlane binaries run as the chart starts them, and the
// helpers that run a rendered pod as a local process.

package k8s

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
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
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/swiftlane/swiftlane/apis/swiftlane/v1alpha1"
	"github.com/swiftlane/swiftlane/internal/apiclient"
	"github.com/swiftlane/swiftlane/internal/apitypes"
	"github.com/swiftlane/swiftlane/internal/auth"
	"github.com/swiftlane/swiftlane/internal/strategy"
)

// The real `swiftlane agent` and `swiftlane api`, started with the exact
// arguments, environment and files (ConfigMap, Secrets) the chart renders,
// under the chart's service accounts: the chart and the binaries agree on
// flags, the generated keys work, and the RBAC is enough for what the
// binaries really do. The agent runs in observe mode (no sched_ext here).
func TestChartBinaries(t *testing.T) {
	bin := swiftlane(t) // before any deadline: the build takes a while
	k := cluster(t)
	objs := k.applyChart(t, "--set", "agent.config.api.interval=1")

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
	c := apiclient.NewClient("https://"+addr, "", &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12})
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

// applyChart applies the CRDs and the chart rendered with args in
// testNamespace, and returns the rendered objects (their Secrets are what
// the started processes read: each render generates fresh key material).
func (k *kube) applyChart(t *testing.T, args ...string) []*unstructured.Unstructured {
	t.Helper()
	k.applyCRDs(t)
	k.namespace(t, testNamespace)
	manifest, err := template(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	k.mustApply(t, manifest)
	return decodeObjects(t, manifest)
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
