// SPDX-License-Identifier: Apache-2.0
//go:build vmtest

package vm

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/swiftlane/swiftlane/apis/swiftlane/v1alpha1"
	"github.com/swiftlane/swiftlane/internal/probe"
)

// The Kubernetes agent on a real sched_ext kernel, against a real
// kube-apiserver on the host (make test-k8s starts it and passes the
// guest's kubeconfig in SWL_KUBECONFIG; the CRDs are installed). No kubelet:
// the test makes the cgroup a kubelet would make for the pod and runs the
// pod's processes in it.
//
// A strategy selecting the pod by label puts the pod's cgroup in the
// scheduler's cgroup map and its processes in the process map, including
// one started after the strategy; the node's status entry counts them;
// deleting the pod removes them. Then it times kubectl-apply-equivalent
// (server-side apply) → cgroup map entry over many applies, split into
// stages with the times the agent logs for each resync.
func TestK8sAgentAppliesPodStrategy(t *testing.T) {
	kc := os.Getenv("SWL_KUBECONFIG")
	if kc == "" {
		if os.Getenv("SWL_REQUIRE_K8S") != "" {
			t.Fatal("SWL_KUBECONFIG is not set: run this through `make test-k8s`")
		}
		t.Skip("no kube-apiserver: run `make test-k8s`")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	// client-go's default limiter (5 requests/s, burst 10) is per client:
	// this one sends two requests per timed apply, and each apply waited
	// ~100 ms for a token before it was sent (kubectl, one process per
	// apply, starts with a full burst). The agent keeps its default.
	cfg.QPS = -1
	ctx := runCtx(t, 10*time.Minute)
	core := kubernetes.NewForConfigOrDie(cfg)
	crd, err := v1alpha1.NewRESTClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const node, ns = "vm1", "ran"
	for _, name := range []string{ns, "swiftlane-system"} {
		if _, err := core.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// No controller-manager here to create it; pod admission needs it.
		if _, err := core.CoreV1().ServiceAccounts(name).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := core.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// debug: the agent logs each resync's stages ("resync applied").
	agentCfg := filepath.Join(t.TempDir(), "agent.yaml")
	if err := os.WriteFile(agentCfg, []byte("debug: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	agent := startProcess(t, "agent", swiftlaneBin(t), "agent", "--config", agentCfg, "--source", "kubernetes", "--node", node,
		"--kubeconfig", kc, "--system-namespace", "swiftlane-system", "--kubelet-cgroup-driver", "systemd")
	agent.waitLine(t, "scheduler attached; agent running")
	requireState(t, "enabled", "swiftlane")
	cgMap, procMap := schedulerMap(t, "cgroup_strategy"), schedulerMap(t, "tgid_strategy")

	pod := kubeletPodFor(t, ctx, core, ns, "gnb", node, map[string]string{"app": "gnb"})
	before := pod.run(t, "sleep", "600")

	apply := func(name string) {
		t.Helper()
		body := fmt.Sprintf(`{"apiVersion":"swiftlane.io/v1alpha1","kind":"SchedulingStrategy","metadata":{"name":%q,"namespace":%q},`+
			`"spec":{"podSelector":{"matchLabels":{"app":"gnb"}},"class":"critical"}}`, name, ns)
		if err := crd.Patch(types.ApplyPatchType).Namespace(ns).Resource(v1alpha1.StrategiesResource.Resource).Name(name).
			Param("fieldManager", "vmtest").Body([]byte(body)).Do(ctx).Error(); err != nil {
			t.Fatalf("apply strategy %s: %v", name, err)
		}
	}
	remove := func(name string) {
		t.Helper()
		if err := crd.Delete().Namespace(ns).Resource(v1alpha1.StrategiesResource.Resource).Name(name).Do(ctx).Error(); err != nil {
			t.Fatalf("delete strategy %s: %v", name, err)
		}
	}

	apply("gnb")
	waitFor(t, "the pod's cgroup in the scheduler's cgroup map", func() bool { return inMap(cgMap, pod.cgroupID) }, agent)
	waitFor(t, "the pod's process in the scheduler's process map", func() bool { return inMap(procMap, uint32(before.Process.Pid)) }, agent)
	after := pod.run(t, "sleep", "601")
	waitFor(t, "a process started after the strategy in the process map", func() bool { return inMap(procMap, uint32(after.Process.Pid)) }, agent)
	waitFor(t, "the node's status entry to count 1 pod and 2 processes", func() bool {
		var s v1alpha1.SchedulingStrategy
		if crd.Get().Namespace(ns).Resource(v1alpha1.StrategiesResource.Resource).Name("gnb").Do(ctx).Into(&s) != nil {
			return false
		}
		return slices.ContainsFunc(s.Status.Nodes, func(n v1alpha1.StrategyNodeStatus) bool {
			return n.Node == node && n.Pods == 1 && n.Processes == 2
		})
	}, agent)

	// apply → cgroup map, over many applies: the strategy is deleted (and
	// seen gone from the map) between two. Stages, from the apply's start:
	// watch (API server stores it, the agent's informer gets the event),
	// queue (until the agent's worker takes it), expand (pods → cgroups),
	// map (the Applier's map writes, until this test sees the entry); they
	// add up to the total. request (the apply's round trip) runs alongside:
	// the event can arrive before the response.
	remove("gnb")
	waitFor(t, "the pod's cgroup to leave the map", func() bool { return !inMap(cgMap, pod.cgroupID) }, agent)
	const applies = 50
	stageNames := []string{"request", "watch", "queue", "expand", "map"}
	lat := make([]float64, 0, applies)
	stages := map[string][]float64{}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	for i := range applies {
		agent.drainLines()
		start := time.Now()
		apply("lat")
		returned := time.Now()
		for !inMap(cgMap, pod.cgroupID) { // the map has no change notification: poll it
			if time.Since(start) > time.Minute {
				t.Fatalf("apply %d: the pod's cgroup did not reach the map in a minute", i)
			}
			time.Sleep(200 * time.Microsecond)
		}
		seen := time.Now()
		r := agent.waitResync(t, start)
		lat = append(lat, ms(seen.Sub(start)))
		for name, d := range map[string]time.Duration{
			"request": returned.Sub(start), "watch": r.event.Sub(start), "queue": r.start.Sub(r.event),
			"expand": r.expanded.Sub(r.start), "map": seen.Sub(r.expanded),
		} {
			stages[name] = append(stages[name], ms(d))
		}
		remove("lat")
		waitFor(t, "the cgroup to leave the map", func() bool { return !inMap(cgMap, pod.cgroupID) }, agent)
	}
	slices.Sort(lat)
	p50, p99 := probe.Quantile(lat, 0.50), probe.Quantile(lat, 0.99)
	t.Logf("kubectl-apply → scheduler map over %d applies: p50 %.1f ms, p99 %.1f ms", applies, p50, p99)
	res := map[string]any{"apply_to_map_p50_ms": p50, "apply_to_map_p99_ms": p99, "applies": applies}
	for _, name := range stageNames {
		v := stages[name]
		slices.Sort(v)
		sp50, sp99 := probe.Quantile(v, 0.50), probe.Quantile(v, 0.99)
		t.Logf("  stage %-7s p50 %6.1f ms, p99 %6.1f ms", name, sp50, sp99)
		res["apply_to_map_stage_"+name+"_p50_ms"], res["apply_to_map_stage_"+name+"_p99_ms"] = sp50, sp99
	}
	mergeK8sResults(t, res)

	// Pod deleted: its cgroup and processes leave the maps.
	apply("gnb")
	waitFor(t, "the pod's cgroup back in the map", func() bool { return inMap(cgMap, pod.cgroupID) }, agent)
	if err := core.CoreV1().Pods(ns).Delete(ctx, "gnb", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the deleted pod's cgroup and processes to leave the maps", func() bool {
		return !inMap(cgMap, pod.cgroupID) && !inMap(procMap, uint32(before.Process.Pid)) && !inMap(procMap, uint32(after.Process.Pid))
	}, agent)
}

// agentResync is one resync as the agent logs it at debug level.
type agentResync struct{ event, start, expanded time.Time }

// drainLines drops the output lines read so far.
func (p *proc) drainLines() {
	for {
		select {
		case <-p.lines:
		default:
			return
		}
	}
}

// waitResync returns the first resync the agent logs that a change after
// since started.
func (p *proc) waitResync(t *testing.T, since time.Time) agentResync {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case l := <-p.lines:
			if r, ok := parseResync(l); ok && !r.event.Before(since.Truncate(time.Microsecond)) {
				return r
			}
		case <-p.done:
			t.Fatalf("%s exited:\n%s", p.name, p.out)
		case <-deadline:
			t.Fatalf("%s logged no resync for a change since %s (msg=\"resync applied\" with event_unix_us):\n%s", p.name, since, p.out)
		}
	}
}

// parseResync reads a "resync applied" line of slog's text format.
func parseResync(line string) (agentResync, bool) {
	kv := logFields(line)
	us, err := strconv.ParseInt(kv["event_unix_us"], 10, 64)
	if kv["msg"] != "resync applied" || err != nil {
		return agentResync{}, false
	}
	queue, err1 := time.ParseDuration(kv["queue"])
	expand, err2 := time.ParseDuration(kv["expand"])
	if err1 != nil || err2 != nil {
		return agentResync{}, false
	}
	ev := time.UnixMicro(us)
	return agentResync{event: ev, start: ev.Add(queue), expanded: ev.Add(queue + expand)}, true
}

// logFields splits a slog text line into its key=value pairs.
func logFields(line string) map[string]string {
	out := map[string]string{}
	for {
		line = strings.TrimLeft(line, " ")
		k, rest, ok := strings.Cut(line, "=")
		if !ok {
			return out
		}
		var v string
		if strings.HasPrefix(rest, `"`) {
			q, err := strconv.QuotedPrefix(rest)
			if err != nil {
				return out
			}
			v, _ = strconv.Unquote(q)
			rest = rest[len(q):]
		} else {
			v, rest, _ = strings.Cut(rest, " ")
		}
		out[k] = v
		line = rest
	}
}

// schedulerMap finds one of the attached scheduler's maps by name.
func schedulerMap(t *testing.T, name string) *ebpf.Map {
	t.Helper()
	var found *ebpf.Map
	for id := ebpf.MapID(0); ; {
		next, err := ebpf.MapGetNextID(id)
		if errors.Is(err, os.ErrNotExist) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		id = next
		m, err := ebpf.NewMapFromID(id)
		if err != nil {
			continue // gone meanwhile
		}
		if info, err := m.Info(); err == nil && info.Name == name {
			if found != nil {
				found.Close()
			}
			found = m // the newest wins: the scheduler the agent just loaded
			continue
		}
		m.Close()
	}
	if found == nil {
		t.Fatalf("no BPF map named %s: is the scheduler loaded?", name)
	}
	t.Cleanup(func() { found.Close() })
	return found
}

func inMap[K uint32 | uint64](m *ebpf.Map, key K) bool {
	var v [24]byte // struct swl_strategy
	return m.Lookup(key, &v) == nil
}

// kubeletPod is a pod object bound to a node plus the cgroup a kubelet with
// the systemd driver and containerd would make for it.
type kubeletPod struct {
	*corev1.Pod
	dir, container string
	cgroupID       uint64
}

func kubeletPodFor(t *testing.T, ctx context.Context, core kubernetes.Interface, ns, name, node string, labels map[string]string) *kubeletPod {
	t.Helper()
	pod, err := core.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: corev1.PodSpec{NodeName: node, AutomountServiceAccountToken: new(bool),
			Containers: []corev1.Container{{Name: "main", Image: "example.invalid/none"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	uid := strings.ReplaceAll(string(pod.UID), "-", "_")
	dir := filepath.Join("/sys/fs/cgroup/kubepods.slice/kubepods-besteffort.slice", "kubepods-besteffort-pod"+uid+".slice")
	id := make([]byte, 32)
	rand.Read(id)
	container := filepath.Join(dir, "cri-containerd-"+hex.EncodeToString(id)+".scope")
	if err := os.MkdirAll(container, 0o755); err != nil {
		t.Fatal(err)
	}
	p := &kubeletPod{Pod: pod, dir: dir, container: container, cgroupID: cgroupInode(t, dir)}
	t.Cleanup(func() {
		// Processes are killed by their own cleanups (registered later,
		// run earlier); then the empty cgroups can go.
		os.Remove(container)
		os.Remove(dir)
	})
	return p
}

// run starts a process inside the pod's container cgroup (it joins before
// exec, as runc does).
func (p *kubeletPod) run(t *testing.T, argv ...string) *exec.Cmd {
	t.Helper()
	script := fmt.Sprintf(`echo $$ > %s/cgroup.procs && exec "$@"`, p.container)
	cmd := exec.Command("sh", append([]string{"-c", script, "sh"}, argv...)...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

func cgroupInode(t *testing.T, dir string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// mergeK8sResults sets keys (and "kernel") in the JSON object the file
// SWL_K8S_RESULTS names, keeping the keys other tests wrote there.
func mergeK8sResults(t *testing.T, kv map[string]any) {
	t.Helper()
	path := os.Getenv("SWL_K8S_RESULTS")
	if path == "" {
		return
	}
	out := map[string]any{}
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("SWL_K8S_RESULTS: %s is not a JSON object: %v", path, err)
		}
	case !errors.Is(err, os.ErrNotExist):
		t.Fatalf("SWL_K8S_RESULTS: %v", err)
	}
	for k, v := range kv {
		out[k] = v
	}
	out["kernel"] = kernelRelease(t)
	b, err = json.MarshalIndent(out, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func kernelRelease(t *testing.T) string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}
