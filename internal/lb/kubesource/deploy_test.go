// SPDX-License-Identifier: Apache-2.0

package kubesource

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	appsv1 "k8s.io/api/apps/v1"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/swiftlane/swiftlane/internal/lb/balancer"
	lbbpf "github.com/swiftlane/swiftlane/internal/lb/bpf"
	"github.com/swiftlane/swiftlane/internal/lb/labnet"
	"github.com/swiftlane/swiftlane/internal/lb/services"
)

// manifest is deploy/lb/swiftlane-lb.yaml, the example DaemonSet.
var manifest = filepath.Join("..", "..", "..", "deploy", "lb", "swiftlane-lb.yaml")

// manifestObjects decodes the manifest's documents by kind.
func manifestObjects(t *testing.T) (ds *appsv1.DaemonSet, cm *corev1.ConfigMap) {
	t.Helper()
	f, err := os.Open(manifest)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := utilyaml.NewYAMLReader(bufio.NewReader(f))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		var meta metav1.TypeMeta
		if err := utilyaml.Unmarshal(doc, &meta); err != nil {
			t.Fatal(err)
		}
		switch meta.Kind {
		case "DaemonSet":
			ds = &appsv1.DaemonSet{}
			err = utilyaml.UnmarshalStrict(doc, ds)
		case "ConfigMap":
			cm = &corev1.ConfigMap{}
			err = utilyaml.UnmarshalStrict(doc, cm)
		}
		if err != nil {
			t.Fatalf("%s: %v", meta.Kind, err)
		}
	}
	if ds == nil || cm == nil {
		t.Fatalf("%s: want a DaemonSet and a ConfigMap", manifest)
	}
	return ds, cm
}

// The manifest against a real kube-apiserver: it applies, its node settings
// parse, and the source runs with nothing but its ServiceAccount's rights,
// which grant no more than the source reads.
func TestManifestRBAC(t *testing.T) {
	c := startCluster(t)
	_, cm := manifestObjects(t)
	node, err := services.Parse([]byte(cm.Data["node.yaml"]))
	if err != nil {
		t.Fatalf("ConfigMap node.yaml: %v", err)
	}
	if len(node.Services) > 0 {
		t.Fatal("ConfigMap node.yaml lists services; --source kubernetes rejects that")
	}

	// kube-system comes from an apiserver controller that may not have run yet.
	_, err = c.cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-system"}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	c.env.Kubectl(t, "apply", "--server-side", "-f", manifest)

	tr, err := c.cs.CoreV1().ServiceAccounts("kube-system").CreateToken(t.Context(), "swiftlane-lb", &authnv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	saCfg := rest.AnonymousClientConfig(c.env.RESTConfig())
	saCfg.BearerToken = tr.Status.Token
	sa := kubernetes.NewForConfigOrDie(saCfg)

	// What the source needs works: the Node once, then Services and slices.
	n, err := c.cs.CoreV1().Nodes().Create(t.Context(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "198.18.0.1"}}
	if _, err := c.cs.CoreV1().Nodes().UpdateStatus(t.Context(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	addrs, err := NodeAddresses(t.Context(), sa, "node-1", false)
	if err != nil {
		t.Fatalf("as the ServiceAccount: %v", err)
	}
	node.NodeAddresses = addrs
	c.createService(t, webService())
	c.putSlice(t, endpointSlice("web", "web-a", webPorts, readyEP("10.244.1.2")))
	a := runSource(t, sa, Options{Node: node, Debounce: 20 * time.Millisecond}, nil)
	a.await(t, `
  - name: ns/web
    clusterIP: 10.96.0.10
    ports:
      - {name: http, protocol: TCP, port: 80, targetPort: 8080, nodePort: 30080}
      - {name: dns, protocol: UDP, port: 53, targetPort: 5353, nodePort: 30053}
    endpoints: [{address: 10.244.1.2}]
`)

	// And nothing else: no writes, no other kinds, no list of Nodes.
	ctx := t.Context()
	for what, err := range map[string]error{
		"list nodes": func() error { _, err := sa.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); return err }(),
		"list pods":  func() error { _, err := sa.CoreV1().Pods("").List(ctx, metav1.ListOptions{}); return err }(),
		"list secrets": func() error {
			_, err := sa.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{})
			return err
		}(),
		"get configmap": func() error {
			_, err := sa.CoreV1().ConfigMaps("kube-system").Get(ctx, "swiftlane-lb", metav1.GetOptions{})
			return err
		}(),
		"delete service": sa.CoreV1().Services(c.ns).Delete(ctx, "web", metav1.DeleteOptions{}),
		"create endpointslice": func() error {
			_, err := sa.DiscoveryV1().EndpointSlices(c.ns).Create(ctx, endpointSlice("web", "forged", webPorts, readyEP("10.244.6.6")), metav1.CreateOptions{})
			return err
		}(),
		"update node": func() error { _, err := sa.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); return err }(),
	} {
		if !apierrors.IsForbidden(err) {
			t.Errorf("the ServiceAccount may %s (err %v), want Forbidden", what, err)
		}
	}
}

const (
	capsHelperEnv = "SWL_LB_CAPS_HELPER"
	capsPinEnv    = "SWL_LB_CAPS_PIN" // the helper's pin directory
	// The helper's cgroup for the socket programs (--host-cgroup), passed
	// as its file descriptor 3: `ip netns exec` mounts a fresh /sys, which
	// hides the caller's cgroup mounts.
	capsCgroupEnv = "SWL_LB_CAPS_CGROUP"
)

// TestCapabilitiesHelper is the load balancer as TestManifestCapabilities
// runs it: a child process with a reduced capability set, inside the node
// namespace. It reports "ready <CapEff>" once the program is loaded and
// attached, serves until its stdin closes, then sweeps until the closed
// connection's sessions are gone.
func TestCapabilitiesHelper(t *testing.T) {
	path := os.Getenv(capsHelperEnv)
	if path == "" {
		t.Skip("a child of TestManifestCapabilities")
	}
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	cfg, err := services.Load(path)
	if err != nil {
		fail(err)
	}
	// Pinned, as the manifest runs it (--pin-dir on the host's bpffs).
	b, err := balancer.Open(cfg, balancer.Options{PinDir: os.Getenv(capsPinEnv)})
	if err != nil {
		fail(err)
	}
	if n, err := b.AttachInterfaces(); err != nil || n == 0 {
		fail(fmt.Errorf("attached %d interfaces: %v", n, err))
	}
	if os.Getenv(capsCgroupEnv) != "" {
		host, err := b.Datapath().AttachCgroup("/proc/self/fd/3", os.Getenv(capsPinEnv))
		if err != nil {
			fail(err)
		}
		defer host.Close()
	}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		fail(err)
	}
	var capEff string
	for _, l := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(l, "CapEff:"); ok {
			capEff = strings.TrimSpace(v)
		}
	}
	fmt.Printf("ready %s\n", capEff)
	io.Copy(io.Discard, os.Stdin)
	// The sweep runs the program's sweep_delete (BPF_PROG_RUN): the test's
	// closed connection must be expired with these capabilities too.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := b.Sweep(); err != nil {
			fail(fmt.Errorf("sweep: %w", err))
		}
		ss, err := b.Datapath().Sessions()
		if err != nil {
			fail(err)
		}
		if len(ss) == 0 {
			break
		}
		if time.Now().After(deadline) {
			fail(fmt.Errorf("sweep: %d session entries left 10 s after the connection closed", len(ss)))
		}
		time.Sleep(200 * time.Millisecond)
	}
	b.Close()
	os.Exit(0)
}

// The DaemonSet's capabilities are exactly what the load balancer needs:
// with them (and uid 0, as in the manifest) it loads, attaches and
// translates real traffic; without any one of them it fails to start.
func TestManifestCapabilities(t *testing.T) {
	labnet.RequireRoot(t)
	ds, _ := manifestObjects(t)
	if len(ds.Spec.Template.Spec.Containers) != 1 {
		t.Fatal("want one container")
	}
	sc := ds.Spec.Template.Spec.Containers[0].SecurityContext
	if sc == nil || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) ||
		sc.Privileged == nil || *sc.Privileged || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Fatalf("securityContext %+v: want privileged and allowPrivilegeEscalation false, drop [ALL]", sc)
	}
	var caps []string
	for _, c := range sc.Capabilities.Add {
		caps = append(caps, strings.ToLower(string(c)))
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Fatalf("setpriv (util-linux) runs the load balancer with the manifest's capabilities: %v", err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}

	topo, err := labnet.New(1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := topo.Close(); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	e, err := labnet.StartEcho(topo.Backends[0], "b0", echoPort)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	cfgPath := filepath.Join(t.TempDir(), "services.yaml")
	if err := os.WriteFile(cfgPath, []byte(fmt.Sprintf(`
interfaces: [ext0, "v*"]
sessions: {closingIdle: 1s}
services:
  - name: web
    clusterIP: 10.96.0.10
    ports: [{port: 80, targetPort: %d}]
    endpoints: [{address: %v}]
`, echoPort, topo.BackendIPs[0])), 0o644); err != nil {
		t.Fatal(err)
	}

	// The socket programs attach to a cgroup of the test's own, which no
	// process joins; removed after the pins (cleanups run last first).
	root, err := lbbpf.CgroupRoot()
	if err != nil {
		t.Fatal(err)
	}
	cgroup := filepath.Join(root, fmt.Sprintf("swiftlane-caps-%d", os.Getpid()))
	if err := os.Mkdir(cgroup, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(cgroup) })
	cgroupDir, err := os.Open(cgroup)
	if err != nil {
		t.Fatal(err)
	}
	defer cgroupDir.Close()

	// A private bpffs, a fresh pin directory per run, detached after it.
	bpffs := t.TempDir()
	if out, err := exec.Command("mount", "-t", "bpf", "bpf", bpffs).CombinedOutput(); err != nil {
		t.Fatalf("mount bpffs: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", bpffs).Run() })
	runs := 0

	// start runs the helper with exactly caps as its bounding set; root's
	// permitted and effective sets on exec are the bounding set.
	start := func(caps []string) (cmd *exec.Cmd, stdin io.WriteCloser, ready string, stderr *bytes.Buffer) {
		t.Helper()
		runs++
		pinDir := filepath.Join(bpffs, fmt.Sprint(runs))
		t.Cleanup(func() {
			if err := topo.Node.Do(func() error { return lbbpf.Cleanup(pinDir) }); err != nil {
				t.Errorf("cleanup %s: %v", pinDir, err)
			}
		})
		bounding := "-all"
		for _, c := range caps {
			bounding += ",+" + c
		}
		cmd = exec.Command("ip", "netns", "exec", topo.Node.Name,
			"setpriv", "--bounding-set="+bounding, "--inh-caps=-all", "--",
			self, "-test.run=^TestCapabilitiesHelper$")
		cmd.Env = append(os.Environ(), capsHelperEnv+"="+cfgPath, capsPinEnv+"="+pinDir, capsCgroupEnv+"=1")
		cmd.ExtraFiles = []*os.File{cgroupDir}
		stderr = &bytes.Buffer{}
		cmd.Stderr = stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		line, _ := bufio.NewReader(stdout).ReadString('\n') // EOF if it exits
		return cmd, stdin, strings.TrimSpace(line), stderr
	}

	cmd, stdin, ready, stderr := start(caps)
	want := uint64(0)
	for _, c := range caps {
		n, ok := capNumbers[c]
		if !ok {
			t.Fatalf("capability %q of the manifest is unknown to this test", c)
		}
		want |= 1 << n
	}
	if ready != fmt.Sprintf("ready %016x", want) {
		stdin.Close()
		cmd.Wait()
		t.Fatalf("with %v: %q, want ready with CapEff %016x; stderr:\n%s", caps, ready, want, stderr)
	}
	name, peer, err := askOnce(topo.Client, "tcp", "10.96.0.10:80")
	stdin.Close()
	if werr := cmd.Wait(); werr != nil {
		t.Fatalf("helper: %v\n%s", werr, stderr)
	}
	if err != nil || name != "b0" || !strings.HasPrefix(peer, topo.ClientIP.String()+":") {
		t.Fatalf("with %v: ClusterIP answered %q seeing %q (err %v), want b0 seeing the client", caps, name, peer, err)
	}
	t.Logf("with %v: loaded, attached (interfaces and the socket programs' cgroup) and translated", caps)

	for i := range caps {
		fewer := slices.Delete(slices.Clone(caps), i, i+1)
		cmd, stdin, ready, stderr := start(fewer)
		stdin.Close()
		err := cmd.Wait()
		if ready != "" || err == nil {
			t.Fatalf("without %s the load balancer started (%q, exit %v): the manifest grants more than it needs", caps[i], ready, err)
		}
		t.Logf("without %s: %s", caps[i], firstLine(stderr.String()))
	}
}

var capNumbers = map[string]int{
	"bpf": unix.CAP_BPF, "net_admin": unix.CAP_NET_ADMIN, "perfmon": unix.CAP_PERFMON,
	"sys_admin": unix.CAP_SYS_ADMIN, "sys_resource": unix.CAP_SYS_RESOURCE, "net_raw": unix.CAP_NET_RAW,
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
