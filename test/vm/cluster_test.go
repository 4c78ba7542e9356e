// SPDX-License-Identifier: Apache-2.0
//go:build vmtest

package vm

import (
	"context"
	"fmt"
	"io"
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

	"github.com/cilium/ebpf"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/swiftlane/swiftlane/apis/swiftlane/v1alpha1"
	"github.com/swiftlane/swiftlane/internal/kubetest"
)

// A real one-node cluster, as a platform team would try swiftlane first
// (make test-cluster). etcd, kube-apiserver, kube-controller-manager and
// kube-scheduler run on the host (internal/kubetest, started by
// mk/k8s-vm.sh); this guest, on the sched_ext kernel, is the node:
// containerd, runc and the CNI bridge, kube-proxy and a kubelet that joins.
// Nothing is faked: the chart is installed with helm, the images come from
// `make image`, and every check reads what the kernel, the kubelet or the
// API server says.
//
//   - helm install: the API Deployment and the agent DaemonSet become Ready,
//     the agent attaches swiftlane and reports the node (SchedulingNode);
//   - a pod labelled tier=critical and a SchedulingStrategy selecting it:
//     the pod's cgroup is in the scheduler's cgroup map and each of its
//     processes in the process map, the strategy's node status counts
//     them; a pod without the label is in neither;
//   - the pod deleted and created again, and a container killed and
//     restarted by the kubelet: the new processes are covered within 1 s;
//   - the strategy deleted: the pod leaves the maps;
//   - helm upgrade with a changed value rolls the agent: the node ends on
//     the new agent's scheduler, which applies the strategy again, and the
//     kernel logged no error;
//   - helm uninstall: sched_ext is disabled, the workloads run on, and the
//     release left nothing behind but the CRDs: its post-delete hook
//     removed the SchedulingNode and the node's entry of the strategy's
//     status, and then itself.
func TestCluster(t *testing.T) {
	ctx := runCtx(t, 45*time.Minute)
	n := clusterNode(t, ctx)
	mark := logMark(t)
	requireState(t, "disabled", "")
	core, crd := n.core, n.crd

	// helm install, with the chart's default image: `make image` built it
	// under that name and the node imported it.
	const release, sysNS, ns = "swiftlane", "swiftlane-system", "lab"
	start := time.Now()
	n.helm(t, "install", release, "deploy/helm/swiftlane", "--namespace", sysNS, "--create-namespace",
		"--wait", "--timeout", "15m")
	// helm's --wait takes a DaemonSet as ready once its pods are scheduled
	// and no more than maxUnavailable are not Ready: with one node and
	// maxUnavailable 1, before the agent has attached. A rollout's end is
	// what kubectl rollout status waits for (as NOTES.txt says).
	n.rolloutStatus(t, sysNS, release+"-agent")
	t.Logf("helm install: API Deployment and agent DaemonSet ready in %v", time.Since(start).Round(time.Second))
	requireState(t, "enabled", "swiftlane")
	agentUID := n.agentPod(t, ctx, sysNS).UID
	n.waitUntil(t, "the agent to report the node (SchedulingNode) with sched_ext enabled", 2*time.Minute, func() bool {
		var sn v1alpha1.SchedulingNode
		if crd.Get().Resource(v1alpha1.NodesResource.Resource).Name(n.name).Do(ctx).Into(&sn) != nil {
			return false
		}
		return sn.Status.Mode == "schedule" && strings.HasPrefix(sn.Status.SchedulerState, "enabled")
	})

	// The workloads: the same pod with and without the label.
	n.namespace(t, ctx, ns)
	critical := n.runPod(t, ctx, ns, "echo", map[string]string{"tier": "critical"})
	plain := n.runPod(t, ctx, ns, "plain", map[string]string{"tier": "batch"})

	n.applyCriticalStrategy(t, ctx, ns)
	maps := n.schedulerMaps(t)
	n.waitCovered(t, critical, maps, time.Minute)
	n.waitUntil(t, "the strategy's status to count the pod and its processes on the node", time.Minute, func() bool {
		var s v1alpha1.SchedulingStrategy
		if crd.Get().Namespace(ns).Resource(v1alpha1.StrategiesResource.Resource).Name("critical").Do(ctx).Into(&s) != nil {
			return false
		}
		want := int32(len(critical.pids()))
		return slices.ContainsFunc(s.Status.Nodes, func(st v1alpha1.StrategyNodeStatus) bool {
			return st.Node == n.name && st.Pods == 1 && st.Processes >= want
		})
	})
	if !maps.none(plain) {
		t.Fatal("the pod without the label is in the scheduler's maps")
	}

	// Deleted and created again: a new pod, a new cgroup, new processes.
	res := map[string]any{}
	if err := core.CoreV1().Pods(ns).Delete(ctx, critical.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	n.waitUntil(t, "the deleted pod to be gone", 2*time.Minute, func() bool {
		_, err := core.CoreV1().Pods(ns).Get(ctx, critical.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	critical = n.runPodTimed(t, ctx, ns, "echo", map[string]string{"tier": "critical"}, maps, "recreated pod", res)

	// A container killed: the kubelet restarts it in the same pod.
	old := critical.containerPID(t, "echo")
	before := critical.pids()
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	n.coverNewProcesses(t, critical, maps, 1, func(pid int) bool { return pid != old && !slices.Contains(before, pid) },
		"restarted container", res)
	mergeK8sResults(t, res)

	// Strategy deleted: back to normal.
	if err := crd.Delete().Namespace(ns).Resource(v1alpha1.StrategiesResource.Resource).Name("critical").Do(ctx).Error(); err != nil {
		t.Fatal(err)
	}
	n.waitUntil(t, "the pod to leave the scheduler's maps", time.Minute, func() bool { return maps.none(critical) })

	// helm upgrade with a changed value rolls the agent (its config
	// checksum changes): the old one detaches, the new one attaches.
	n.applyCriticalStrategy(t, ctx, ns)
	n.waitCovered(t, critical, maps, time.Minute)
	watch := watchSchedState()
	n.helm(t, "upgrade", release, "deploy/helm/swiftlane", "--namespace", sysNS, "--reuse-values",
		"--set", "agent.config.scheduler.slice_ns_default=3000000", "--wait", "--timeout", "15m")
	n.rolloutStatus(t, sysNS, release+"-agent") // as after the install
	states := watch()
	t.Logf("sched_ext during the upgrade: %s", strings.Join(states, " -> "))
	if newUID := n.agentPod(t, ctx, sysNS).UID; newUID == agentUID {
		t.Fatal("helm upgrade did not replace the agent pod")
	}
	requireState(t, "enabled", "swiftlane")
	maps = n.schedulerMaps(t) // the new scheduler's
	n.waitCovered(t, critical, maps, time.Minute)
	if !maps.none(plain) {
		t.Fatal("after the upgrade, the pod without the label is in the scheduler's maps")
	}

	// helm uninstall: the scheduler detaches and the release's objects go.
	// What the agent wrote is there before, so its absence after means
	// something.
	n.waitUntil(t, "the new agent's entry in the strategy's status", time.Minute, func() bool {
		var st v1alpha1.SchedulingStrategy
		return crd.Get().Namespace(ns).Resource(v1alpha1.StrategiesResource.Resource).Name("critical").Do(ctx).Into(&st) == nil &&
			len(st.Status.Nodes) == 1 && st.Status.Nodes[0].Node == n.name
	})
	n.helm(t, "uninstall", release, "--namespace", sysNS, "--wait", "--timeout", "10m")
	waitState(t, "disabled")
	for _, p := range []*clusterPod{critical, plain} {
		for _, pid := range p.pids() {
			if err := syscall.Kill(pid, 0); err != nil {
				t.Errorf("pod %s: process %d is gone after the uninstall: %v", p.Name, pid, err)
			}
		}
	}
	n.requireNothingLeft(t, ctx, sysNS, release)
	var nodes v1alpha1.SchedulingNodeList
	if err := crd.Get().Resource(v1alpha1.NodesResource.Resource).Do(ctx).Into(&nodes); err != nil || len(nodes.Items) != 0 {
		t.Errorf("SchedulingNodes after helm uninstall: %d (%v), want none (the chart's cleanup hook deletes them)", len(nodes.Items), err)
	}
	var st v1alpha1.SchedulingStrategy
	if err := crd.Get().Namespace(ns).Resource(v1alpha1.StrategiesResource.Resource).Name("critical").Do(ctx).Into(&st); err != nil {
		t.Errorf("the strategy after helm uninstall: %v (it is the user's: it stays)", err)
	} else if len(st.Status.Nodes) != 0 {
		t.Errorf("the strategy's status after helm uninstall: %+v, want no node entry", st.Status.Nodes)
	}
	checkKernelLog(t, mark)
}

// clusterEnv is what make test-cluster (mk/cluster.mk, through mk/k8s-vm.sh) passes to the guest.
type clusterEnv struct {
	kubeconfig string   // admin, server at 10.0.2.2
	bin        string   // SWL_K8S_BIN: kubelet, kube-proxy, containerd, ctr, helm, kubectl
	images     []string // OCI layout tarballs to import
	image      string   // the swiftlane image, for the workload pods
	pause      string   // the pod sandbox image
	logs       string   // where the node's daemons log
	dns        string   // SWL_CLUSTER_DNS: the cluster DNS Service's IP the kubelet gives pods; none if empty
}

func clusterEnvFrom(t *testing.T) clusterEnv {
	e := clusterEnv{
		kubeconfig: os.Getenv("SWL_KUBECONFIG"),
		bin:        os.Getenv("SWL_K8S_BIN"),
		images:     strings.FieldsFunc(os.Getenv("SWL_CLUSTER_IMAGES"), func(r rune) bool { return r == ',' }),
		image:      os.Getenv("SWL_CLUSTER_IMAGE"),
		pause:      os.Getenv("SWL_CLUSTER_PAUSE"),
		logs:       os.Getenv("SWL_CLUSTER_LOGS"),
		dns:        os.Getenv("SWL_CLUSTER_DNS"),
	}
	if e.kubeconfig == "" || e.bin == "" || len(e.images) == 0 || e.image == "" || e.pause == "" || e.logs == "" {
		if os.Getenv("SWL_REQUIRE_CLUSTER") != "" {
			t.Fatal("SWL_KUBECONFIG, SWL_K8S_BIN, SWL_CLUSTER_{IMAGES,IMAGE,PAUSE,LOGS} are not all set: run this through `make test-cluster`")
		}
		t.Skip("no cluster control plane: run `make test-cluster`")
	}
	return e
}

// node is this guest as a Kubernetes node.
type node struct {
	env     clusterEnv
	name    string
	config  *rest.Config
	core    kubernetes.Interface
	crd     *rest.RESTClient // swiftlane.io/v1alpha1
	daemons []daemon
	helmEnv []string
	atExit  []func() // undone in reverse order when the test binary ends
	// dump shows the logs once if the current test failed (cleanups that
	// delete pods call it first).
	dump func()
}

// The node is started by the first cluster test and kept for the others
// (its start-up under TCG takes minutes); TestMain stops it.
var shared struct {
	once sync.Once
	n    *node
}

// clusterNode returns the started node, starting it on the first call. A
// failed test leaves the node's daemons' and the agent's logs.
func clusterNode(t *testing.T, ctx context.Context) *node {
	t.Helper()
	env := clusterEnvFrom(t)
	shared.once.Do(func() { shared.n = startNode(t, ctx, env) })
	n := shared.n
	if n == nil {
		t.Fatal("the node did not start (see the first cluster test)")
	}
	n.dump = sync.OnceFunc(func() {
		if t.Failed() {
			n.dumpLogs(t)
		}
	})
	t.Cleanup(n.dump)
	return n
}

// stopClusterNode stops what startNode started, if a test started it.
func stopClusterNode() {
	if n := shared.n; n != nil {
		for _, f := range slices.Backward(n.atExit) {
			f()
		}
	}
}

// dumpLogs shows the pods' state, the system namespace's pod logs and the
// node daemons' log tails. kubectl logs would need the API server to reach
// this guest's kubelet, which slirp does not allow: the kubelet's files are
// read instead.
func (n *node) dumpLogs(t *testing.T) {
	out, _ := n.command("kubectl", "get", "pods", "--all-namespaces", "--request-timeout=20s", "-o", "wide").CombinedOutput()
	t.Logf("=== pods\n%s", out)
	// Whether the node was starved or short of memory, and which pod.
	state, ops := readState()
	t.Logf("=== sched_ext %s (%s)", state, ops)
	events, _ := filepath.Glob("/sys/fs/cgroup/kubepods/*/pod*/memory.events")
	for _, f := range append([]string{"/proc/pressure/cpu", "/proc/pressure/memory"}, events...) {
		b, _ := os.ReadFile(f)
		t.Logf("=== %s\n%s", f, b)
	}
	logs, _ := filepath.Glob("/var/log/pods/swiftlane-system_*/*/*.log")
	for _, l := range logs {
		t.Logf("=== %s (last 40 lines)\n%s", l, kubetest.Tail(l, 40))
	}
	for _, d := range n.daemons {
		t.Logf("=== %s (last 30 lines of %s)\n%s", d.name, d.log, kubetest.Tail(d.log, 30))
	}
	// What is runnable or blocked now: a pod that never starts under a
	// scheduler shows which task waits (runc, the shim, the pause process).
	ps, _ := exec.Command("ps", "-eLo", "pid,tid,stat,wchan:28,etime,comm").CombinedOutput()
	var stuck []string
	for _, l := range strings.Split(string(ps), "\n") {
		if f := strings.Fields(l); len(f) > 2 && (strings.HasPrefix(f[2], "R") || strings.HasPrefix(f[2], "D")) && f[len(f)-1] != "ps" {
			stuck = append(stuck, l)
		}
	}
	t.Logf("=== runnable (R) and blocked (D) threads\n%s", strings.Join(stuck, "\n"))
	// The agent's scheduler counters (both modes): dispatch paths, user
	// space's round trips, rescues.
	ips, _ := n.command("kubectl", "get", "pods", "-n", "swiftlane-system", "--request-timeout=20s", "-o", "jsonpath={.items[*].status.podIP}").Output()
	for _, ip := range strings.Fields(string(ips)) {
		if m, err := httpGetText("http://" + ip + ":9461/metrics"); err == nil {
			var lines []string
			for _, l := range strings.Split(m, "\n") {
				if strings.HasPrefix(l, "swiftlane_") {
					lines = append(lines, l)
				}
			}
			t.Logf("=== agent %s metrics\n%s", ip, strings.Join(lines, "\n"))
		}
	}
}

// httpGetText is a short GET for diagnostics.
func httpGetText(url string) (string, error) {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var b strings.Builder
	_, err = io.Copy(&b, resp.Body)
	return b.String(), err
}

const (
	nodeName   = "swiftlane-lab"
	nodeIP     = "10.0.2.15"
	podCIDR    = "10.244.0.0/24"
	clusterDir = "/var/lib/swiftlane-cluster"
	criSocket  = "/run/containerd/containerd.sock"
)

// startNode makes this guest a node: writable state directories, containerd
// with the images, kube-proxy and the kubelet, until the Node is Ready.
func startNode(t *testing.T, ctx context.Context, env clusterEnv) *node {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", env.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS = -1
	n := &node{env: env, name: nodeName, config: cfg, core: kubernetes.NewForConfigOrDie(cfg)}
	if n.crd, err = v1alpha1.NewRESTClient(cfg); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(env.logs, 0o755); err != nil {
		t.Fatal(err)
	}
	home, err := os.MkdirTemp("", "helm")
	if err != nil {
		t.Fatal(err)
	}
	n.atExit = append(n.atExit, func() { os.RemoveAll(home) })
	n.helmEnv = []string{"KUBECONFIG=" + env.kubeconfig, "HELM_CACHE_HOME=" + home + "/cache",
		"HELM_CONFIG_HOME=" + home + "/config", "HELM_DATA_HOME=" + home + "/data"}

	// The host's root is read-only here: the node's state goes to tmpfs
	// (overlayfs, containerd's snapshotter, cannot stack on the 9p root).
	for _, dir := range []string{"/var/lib", "/var/log"} {
		if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "mode=0755"); err != nil {
			t.Fatalf("mount tmpfs on %s: %v", dir, err)
		}
		n.atExit = append(n.atExit, func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	}
	// What a node's provisioning loads: conntrack (kube-proxy sets its
	// sysctls before anything else) and bridge netfilter, so that traffic
	// between pods on the bridge passes kube-proxy's rules too.
	for _, mod := range []string{"nf_conntrack", "br_netfilter"} {
		if out, err := exec.Command("modprobe", mod).CombinedOutput(); err != nil {
			t.Fatalf("modprobe %s: %v\n%s", mod, err, out)
		}
	}
	for _, kv := range [][2]string{{"net/ipv4/ip_forward", "1"}, {"net/bridge/bridge-nf-call-iptables", "1"}} {
		if err := os.WriteFile("/proc/sys/"+kv[0], []byte(kv[1]), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{clusterDir + "/net.d", "/var/lib/kubelet"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(name, content string) string {
		t.Helper()
		p := filepath.Join(clusterDir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}

	// containerd v2: CRI with runc (cgroupfs, as the kubelet below) and the
	// CNI bridge; the sandbox image is ours (no registry to pull from).
	containerdCfg := write("containerd.toml", fmt.Sprintf(`version = 3
root = "/var/lib/containerd"
state = "/run/containerd"
# Snapshotters this node has no use for (btrfs is not even built without cgo).
disabled_plugins = ["io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]

[grpc]
  address = %[1]q

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"

[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = %[2]q

[plugins.'io.containerd.cri.v1.runtime'.containerd]
  default_runtime_name = "runc"

[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
  BinaryName = "/usr/sbin/runc"
  SystemdCgroup = false

[plugins.'io.containerd.cri.v1.runtime'.cni]
  bin_dirs = ["/usr/lib/cni"]
  conf_dir = %[3]q
`, criSocket, env.pause, clusterDir+"/net.d"))
	write("net.d/10-lab.conflist", fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "lab",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, podCIDR))
	// The shim is found on PATH, next to containerd.
	path := "PATH=" + env.bin + ":/usr/sbin:/usr/bin:/sbin:/bin"
	n.startDaemon(t, "containerd", []string{path}, filepath.Join(env.bin, "containerd"), "--config", containerdCfg)
	n.waitUntil(t, "containerd's socket", time.Minute, func() bool {
		_, err := os.Stat(criSocket)
		return err == nil
	})
	for _, img := range env.images {
		n.run(t, "ctr", "--address", criSocket, "--namespace", "k8s.io", "images", "import", img)
	}
	listed := n.run(t, "ctr", "--address", criSocket, "--namespace", "k8s.io", "images", "list", "--quiet")
	for _, want := range []string{env.image, env.pause} {
		if !slices.Contains(strings.Fields(listed), want) {
			t.Fatalf("containerd has no image %s after the import; it lists:\n%s", want, listed)
		}
	}

	// The cluster's CA: the API server's client certificate for kubelets
	// (exec, logs) is signed by it.
	ca := cfg.TLSClientConfig.CAData
	if len(ca) == 0 {
		if ca, err = os.ReadFile(cfg.TLSClientConfig.CAFile); err != nil {
			t.Fatalf("the kubeconfig's CA: %v", err)
		}
	}
	caFile := write("ca.crt", string(ca))
	kubeletCfg := write("kubelet.yaml", fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://%s
cgroupDriver: cgroupfs
failSwapOn: false
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: %s
authorization:
  mode: Webhook
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
# The node's disks are tmpfs in a small guest: no eviction or image GC for
# space (0%% disables a threshold; 100 disables image GC).
evictionHard:
  memory.available: 50Mi
  nodefs.available: "0%%"
  nodefs.inodesFree: "0%%"
  imagefs.available: "0%%"
  imagefs.inodesFree: "0%%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
`, criSocket, caFile)+clusterDNS(env.dns))
	n.startDaemon(t, "kube-proxy", nil, filepath.Join(env.bin, "kube-proxy"),
		"--kubeconfig", env.kubeconfig, "--hostname-override", nodeName, "--proxy-mode", "iptables",
		"--cluster-cidr", podCIDR, "--conntrack-max-per-core", "0",
		"--metrics-bind-address", "127.0.0.1:10249", "--healthz-bind-address", "127.0.0.1:10256")
	n.startDaemon(t, "kubelet", []string{path}, filepath.Join(env.bin, "kubelet"),
		"--config", kubeletCfg, "--kubeconfig", env.kubeconfig, "--root-dir", "/var/lib/kubelet",
		"--hostname-override", nodeName, "--node-ip", nodeIP)
	n.waitUntil(t, "the node to be Ready", 5*time.Minute, func() bool {
		nd, err := n.core.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			return false
		}
		return slices.ContainsFunc(nd.Status.Conditions, func(c corev1.NodeCondition) bool {
			return c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue
		})
	})
	n.waitUntil(t, "kube-proxy's rules for the kubernetes Service", 2*time.Minute, func() bool {
		resp, err := http.Get("http://127.0.0.1:10256/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return n
}

// clusterDNS is the kubelet's setting for a cluster DNS add-on at ip
// (make test-conformance deploys CoreDNS there), none if ip is empty.
func clusterDNS(ip string) string {
	if ip == "" {
		return ""
	}
	return "clusterDNS: [" + ip + "]\n"
}

// startDaemon runs a node process with its output in env.logs (stopped
// with the node).
func (n *node) startDaemon(t *testing.T, name string, env []string, bin string, args ...string) {
	t.Helper()
	log := filepath.Join(n.env.logs, name+".log")
	p, err := kubetest.StartProc(name, bin, args, env, log)
	if err != nil {
		t.Fatal(err)
	}
	n.daemons = append(n.daemons, daemon{name, log, p})
	n.atExit = append(n.atExit, func() { p.Stop(stateTimeout) }) // an early exit has failed a test already
}

type daemon struct {
	name, log string
	*kubetest.Proc
}

// stopDaemon stops the node process named name for good (e.g. kube-proxy,
// replaced by the load balancer); waitUntil no longer watches it.
func (n *node) stopDaemon(t *testing.T, name string) {
	t.Helper()
	i := slices.IndexFunc(n.daemons, func(d daemon) bool { return d.name == name })
	if i < 0 {
		t.Fatalf("no node daemon %s", name)
	}
	if err := n.daemons[i].Stop(stateTimeout); err != nil {
		t.Fatalf("stop %s: %v\n%s", name, err, kubetest.Tail(n.daemons[i].log, 20))
	}
	n.daemons = slices.Delete(n.daemons, i, i+1)
}

// waitUntil polls cond (state behind an API or in sysfs) until it holds,
// failing early if a node daemon exits.
func (n *node) waitUntil(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		for _, d := range n.daemons {
			select {
			case <-d.Done():
				t.Fatalf("%s exited while waiting for %s:\n%s", d.name, what, kubetest.Tail(d.log, 40))
			default:
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// command is one of the cluster's tools (helm, kubectl) as the admin.
func (n *node) command(tool string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(n.env.bin, tool), args...)
	cmd.Env = append(os.Environ(), n.helmEnv...)
	return cmd
}

// run runs a tool, again while the API server cannot be reached: under
// TCG on a busy host its TLS handshake sometimes takes longer than the
// tools wait (10 s), and they fail before they send anything.
func (n *node) run(t *testing.T, tool string, args ...string) string {
	t.Helper()
	for try := 1; ; try++ {
		out, err := n.command(tool, args...).CombinedOutput()
		if err == nil {
			return string(out)
		}
		if try == 3 || !unreachable.Match(out) {
			t.Fatalf("%s %s: %v\n%s", tool, strings.Join(args, " "), err, out)
		}
		t.Logf("%s %s: %v, trying again:\n%s", tool, args[0], err, out)
	}
}

var unreachable = regexp.MustCompile(`TLS handshake timeout|Kubernetes cluster unreachable`)

func (n *node) helm(t *testing.T, args ...string) {
	t.Helper()
	start := time.Now()
	out := n.run(t, "helm", args...)
	t.Logf("helm %s (%v):\n%s", args[0], time.Since(start).Round(time.Second), lastBytes([]byte(out), 2000))
}

// rolloutStatus waits until the DaemonSet's rollout is complete: every
// node runs an updated pod that is Ready (the agent: attached).
func (n *node) rolloutStatus(t *testing.T, ns, ds string) {
	t.Helper()
	n.run(t, "kubectl", "--namespace", ns, "rollout", "status", "daemonset/"+ds, "--timeout", "10m")
}

// namespace creates a namespace for workloads and waits for its default
// ServiceAccount (pods cannot be created before it).
func (n *node) namespace(t *testing.T, ctx context.Context, ns string) {
	t.Helper()
	if _, err := n.core.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	n.waitUntil(t, "the default ServiceAccount in "+ns, time.Minute, func() bool {
		_, err := n.core.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil
	})
}

// applyCriticalStrategy applies the strategy "critical" in ns: class
// critical for the pods labelled tier=critical.
func (n *node) applyCriticalStrategy(t *testing.T, ctx context.Context, ns string) {
	t.Helper()
	strategy := `{"apiVersion":"swiftlane.io/v1alpha1","kind":"SchedulingStrategy","metadata":{"name":"critical","namespace":"` + ns + `"},` +
		`"spec":{"podSelector":{"matchLabels":{"tier":"critical"}},"class":"critical"}}`
	if err := n.crd.Patch(types.ApplyPatchType).Namespace(ns).Resource(v1alpha1.StrategiesResource.Resource).Name("critical").
		Param("fieldManager", "vmtest").Body([]byte(strategy)).Do(ctx).Error(); err != nil {
		t.Fatalf("apply strategy: %v", err)
	}
}

// agentPod is the release's one agent pod (there is one node).
func (n *node) agentPod(t *testing.T, ctx context.Context, ns string) *corev1.Pod {
	t.Helper()
	pods, err := n.core.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=agent"})
	if err != nil {
		t.Fatal(err)
	}
	var live []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			live = append(live, p)
		}
	}
	if len(live) != 1 {
		t.Fatalf("%d agent pods, want 1", len(live))
	}
	return &live[0]
}

// clusterPod is a running workload pod and its cgroup on this node.
type clusterPod struct {
	*corev1.Pod
	dir      string // its cgroup: kubepods/<qos>/pod<uid> under the cgroupfs driver
	cgroupID uint64
}

// podSpec: two containers, each the probe's UDP echo server (a Go
// program, so several threads), from the swiftlane image.
func (n *node) podSpec() corev1.PodSpec {
	echo := func(name, port string) corev1.Container {
		return corev1.Container{
			Name: name, Image: n.env.image, ImagePullPolicy: corev1.PullNever,
			Args: []string{"probe", "echo", "--listen", "0.0.0.0:" + port},
		}
	}
	return corev1.PodSpec{
		Containers:                    []corev1.Container{echo("echo", "7777"), echo("sidecar", "7778")},
		TerminationGracePeriodSeconds: new(int64),
	}
}

func (n *node) createPod(t *testing.T, ctx context.Context, ns, name string, labels map[string]string) *clusterPod {
	t.Helper()
	created, err := n.core.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec:       n.podSpec(),
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return &clusterPod{Pod: created}
}

// waitRunning waits until the pod runs with both containers' processes.
func (n *node) waitRunning(t *testing.T, ctx context.Context, p *clusterPod) {
	t.Helper()
	n.waitUntil(t, "pod "+p.Name+" to run", 5*time.Minute, func() bool {
		got, err := n.core.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil || got.Status.Phase != corev1.PodRunning {
			return false
		}
		p.Pod = got
		return p.findCgroup() && p.containerProcesses() == 2
	})
}

func (n *node) runPod(t *testing.T, ctx context.Context, ns, name string, labels map[string]string) *clusterPod {
	t.Helper()
	p := n.createPod(t, ctx, ns, name, labels)
	n.waitRunning(t, ctx, p)
	return p
}

// containerProcesses counts the processes of the pod's current containers.
func (p *clusterPod) containerProcesses() int {
	n := 0
	for _, pid := range p.pids() {
		for _, cs := range p.Status.ContainerStatuses {
			if p.inContainer(pid, cs.Name) {
				n++
				break
			}
		}
	}
	return n
}

// findCgroup finds the pod's cgroup under any QoS class.
func (p *clusterPod) findCgroup() bool {
	base := "pod" + string(p.UID)
	for _, dir := range []string{"/sys/fs/cgroup/kubepods/" + base, "/sys/fs/cgroup/kubepods/burstable/" + base,
		"/sys/fs/cgroup/kubepods/besteffort/" + base} {
		var st syscall.Stat_t
		if syscall.Stat(dir, &st) == nil {
			p.dir, p.cgroupID = dir, st.Ino
			return true
		}
	}
	return false
}

// pids are the processes in the pod's cgroup tree: its containers' and
// the sandbox's.
func (p *clusterPod) pids() []int {
	var pids []int
	filepath.WalkDir(p.dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
			return nil
		}
		b, _ := os.ReadFile(path)
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
		return nil
	})
	return pids
}

// containerPID is the PID of a container's main process, per the kubelet's
// status (container ID) and the runtime's cgroup of that ID.
func (p *clusterPod) containerPID(t *testing.T, name string) int {
	t.Helper()
	for _, pid := range p.pids() {
		if p.inContainer(pid, name) {
			return pid
		}
	}
	t.Fatalf("pod %s: no process of container %s", p.Name, name)
	return 0
}

// inContainer says whether pid runs in the container named name: the
// runtime names each container's cgroup after its ID, which the pod status
// gives for the current instance.
func (p *clusterPod) inContainer(pid int, name string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return false
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name != name {
			continue
		}
		_, id, _ := strings.Cut(cs.ContainerID, "://")
		return id != "" && strings.Contains(string(b), id)
	}
	return false
}

// schedMaps are the attached scheduler's strategy maps.
type schedMaps struct{ cgroups, procs *ebpf.Map }

func (n *node) schedulerMaps(t *testing.T) *schedMaps {
	t.Helper()
	return &schedMaps{cgroups: schedulerMap(t, "cgroup_strategy"), procs: schedulerMap(t, "tgid_strategy")}
}

func (m *schedMaps) hasCgroup(id uint64) bool { return inMap(m.cgroups, id) }
func (m *schedMaps) hasPID(pid int) bool      { return inMap(m.procs, uint32(pid)) }

// covers: the pod's cgroup and every process in it are in the maps.
func (m *schedMaps) covers(p *clusterPod) bool {
	if !m.hasCgroup(p.cgroupID) {
		return false
	}
	for _, pid := range p.pids() {
		if !m.hasPID(pid) {
			return false
		}
	}
	return true
}

// none: neither the pod's cgroup nor any of its processes are.
func (m *schedMaps) none(p *clusterPod) bool {
	if m.hasCgroup(p.cgroupID) {
		return false
	}
	return !slices.ContainsFunc(p.pids(), m.hasPID)
}

func (n *node) waitCovered(t *testing.T, p *clusterPod, m *schedMaps, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	n.waitUntil(t, "pod "+p.Name+"'s cgroup and processes in the scheduler's maps", timeout+time.Second, func() bool {
		if m.covers(p) {
			return true
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s not covered after %v: %s", p.Name, timeout, m.explain(p))
		}
		return false
	})
}

// explain says what of the pod is missing from the maps.
func (m *schedMaps) explain(p *clusterPod) string {
	var b strings.Builder
	fmt.Fprintf(&b, "cgroup %s (id %d) in the cgroup map: %v; processes:", p.dir, p.cgroupID, m.hasCgroup(p.cgroupID))
	for _, pid := range p.pids() {
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		fmt.Fprintf(&b, "\n  %d %s in the process map: %v (%s)", pid, strings.TrimSpace(string(comm)), m.hasPID(pid), strings.TrimSpace(string(cg)))
	}
	return b.String()
}

// runPodTimed creates the pod and times, for each of its processes (the
// sandbox's and both containers'), from the moment it is first seen in the
// pod's cgroup until it is covered.
func (n *node) runPodTimed(t *testing.T, ctx context.Context, ns, name string, labels map[string]string, m *schedMaps, what string, res map[string]any) *clusterPod {
	t.Helper()
	p := n.createPod(t, ctx, ns, name, labels)
	n.waitUntil(t, "the new pod's cgroup", 5*time.Minute, p.findCgroup)
	n.coverNewProcesses(t, p, m, 3, func(int) bool { return true }, what, res)
	n.waitRunning(t, ctx, p)
	return p
}

// coverNewProcesses waits for want processes that match to appear in the
// pod's cgroup and fails unless each is covered
// within 1 s of first being seen in the pod's cgroup. The maps have no
// change notification and neither has cgroup.procs: both are polled, every
// 5 ms, so a time is exact to that.
func (n *node) coverNewProcesses(t *testing.T, p *clusterPod, m *schedMaps, want int, match func(int) bool, what string, res map[string]any) {
	t.Helper()
	firstSeen := map[int]time.Time{}
	covered := map[int]time.Duration{}
	deadline := time.Now().Add(5 * time.Minute)
	for len(covered) < want {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d of %d processes covered after 5 min (seen %v)", what, len(covered), want, firstSeen)
		}
		now := time.Now()
		for _, pid := range p.pids() {
			if !match(pid) {
				continue
			}
			if _, ok := firstSeen[pid]; !ok {
				firstSeen[pid] = now
			}
			if _, ok := covered[pid]; !ok && m.hasCgroup(p.cgroupID) && m.hasPID(pid) {
				covered[pid] = now.Sub(firstSeen[pid])
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	var worst time.Duration
	for pid, d := range covered {
		worst = max(worst, d)
		if d > time.Second {
			t.Errorf("%s: process %d covered %v after it appeared, want within 1 s", what, pid, d)
		}
	}
	t.Logf("%s: %d new processes covered within %v of appearing", what, len(covered), worst)
	res[strings.ReplaceAll(what, " ", "_")+"_covered_max_ms"] = float64(worst.Microseconds()) / 1000
}

// watchSchedState records sched_ext's state transitions until the returned
// function is called.
func watchSchedState() func() []string {
	var (
		mu     sync.Mutex
		states []string
		stop   = make(chan struct{})
		done   = make(chan struct{})
	)
	go func() {
		defer close(done)
		for {
			s, o := readState()
			cur := s + "(" + o + ")"
			mu.Lock()
			if len(states) == 0 || states[len(states)-1] != cur {
				states = append(states, cur)
			}
			mu.Unlock()
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return func() []string {
		close(stop)
		<-done
		return states
	}
}

// requireNothingLeft: after helm uninstall, no object of the release in
// its namespace or cluster-wide, but the CRDs (Helm leaves those).
func (n *node) requireNothingLeft(t *testing.T, ctx context.Context, ns, release string) {
	t.Helper()
	sel := "app.kubernetes.io/instance=" + release
	n.waitUntil(t, "the release's pods to be gone", 5*time.Minute, func() bool {
		pods, err := n.core.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(pods.Items) == 0
	})
	kinds := "deployments,daemonsets,replicasets,jobs,services,endpointslices,configmaps,secrets,serviceaccounts,roles,rolebindings,resourcequotas"
	if out := n.run(t, "kubectl", "get", kinds, "--namespace", ns, "--ignore-not-found", "-o", "name"); strings.TrimSpace(out) != "" {
		var left []string
		for _, o := range strings.Fields(out) {
			// The controller-manager's, in every namespace.
			if o != "configmap/kube-root-ca.crt" && o != "serviceaccount/default" {
				left = append(left, o)
			}
		}
		if len(left) > 0 {
			t.Errorf("left in namespace %s after helm uninstall: %v", ns, left)
		}
	}
	cluster := "clusterroles,clusterrolebindings,validatingadmissionpolicies,validatingadmissionpolicybindings,priorityclasses"
	if out := n.run(t, "kubectl", "get", cluster, "-l", sel, "--ignore-not-found", "-o", "name"); strings.TrimSpace(out) != "" {
		t.Errorf("left cluster-wide after helm uninstall: %s", out)
	}
	if out := n.run(t, "kubectl", "get", "crd", "-o", "name"); !strings.Contains(out, "schedulingstrategies.swiftlane.io") {
		t.Errorf("the CRDs are gone after helm uninstall (Helm keeps them): %s", out)
	}
}
