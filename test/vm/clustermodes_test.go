// SPDX-License-Identifier: Apache-2.0
//go:build vmtest

package vm

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/swiftlane/swiftlane/apis/swiftlane/v1alpha1"
	"github.com/swiftlane/swiftlane/internal/gtplab"
)

// The chart's two other agent modes on the node TestCluster started, each
// with exactly the capabilities the chart adds for it (read back from the
// agent's /proc/PID/status). A capability the kernel refuses fails these
// tests at once with the agent's log, which has the kernel's error: the
// agent exits (user-space mode's mlockall) or turns automatic mode off and
// says why (the tracer's attach).

// Automatic mode: a gNB pod sends the UEs' GTP-U to the in-tree gtp UPF on
// the node (the lab of test/vm/gtp_test.go: `swiftlane lab up`, and the
// pod runs `swiftlane lab gnb` from the swiftlane image). The agent's tracer
// finds the gNB's process by the UPF's GTP-U path running in its system
// calls: it is in the SchedulingNode's status.carriers (what the API's
// /nodes/{name}/carriers serves on the Kubernetes store), nothing else is,
// and it is in the scheduler's process map with no strategy.
func TestClusterAutomatic(t *testing.T) {
	ctx := runCtx(t, 20*time.Minute)
	n := clusterNode(t, ctx)
	mark := logMark(t)
	requireState(t, "disabled", "")
	// The tracer attaches to the modules loaded when the agent starts.
	startLab(t)
	gtplab.EnsureTUNDevice()

	agent := n.installAgent(t, ctx, "--set", "agent.config.automatic.enabled=true")
	requireState(t, "enabled", "swiftlane")
	n.requireChartCapabilities(t, ctx, agent)
	// Its sender marks too: without them a call is credited with every
	// GTP-U packet its softirq runs, whoever sent it.
	line := n.waitAgentLog(t, agent, regexp.MustCompile(`automatic mode: tracing GTP-U.*sender_marks=true.*`),
		regexp.MustCompile(`automatic mode is off on this node.*|.*whoever sent them.*`), "the agent's GTP-U tracer to attach with its sender marks")
	t.Logf("agent: %s", line)

	// The gNB joins the lab's UE and gNB namespaces and makes the UEs'
	// TUN there: privileged, with the node's /run/netns (where ip(8) keeps
	// them). Its privileges are the workload's, not the agent's.
	const ns = "lab-gtp"
	n.namespace(t, ctx, ns)
	gnb := n.startGnbPod(t, ctx, ns)
	pid := gnb.containerPID(t, "gnb")
	uePing(t, 5) // the round trip through the pod's gNB and the UPF
	// The UEs' background traffic keeps the gNB a carrier (an idle one
	// loses its entry after idle_timeout_ms) while the checks read.
	startChild(t, exec.Command(swiftlaneBin(t), "lab", "traffic", "--pps", "20"), "traffic: UEs", "the UEs' background traffic")

	var carriers []v1alpha1.Carrier
	n.waitUntil(t, fmt.Sprintf("the gNB (pid %d) in the SchedulingNode's status.carriers", pid), 2*time.Minute, func() bool {
		var sn v1alpha1.SchedulingNode
		if n.crd.Get().Resource(v1alpha1.NodesResource.Resource).Name(n.name).Do(ctx).Into(&sn) != nil {
			return false
		}
		carriers = sn.Status.Carriers
		return slices.ContainsFunc(carriers, func(c v1alpha1.Carrier) bool { return int(c.PID) == pid })
	})
	for _, c := range carriers {
		if int(c.PID) != pid || c.Class != "critical" {
			t.Errorf("carrier %+v: only the gNB (pid %d) carries GTP-U, as critical", c, pid)
		}
	}
	t.Logf("carriers: %+v", carriers)
	maps := n.schedulerMaps(t)
	n.waitUntil(t, "the gNB in the scheduler's process map", time.Minute, func() bool { return maps.hasPID(pid) })
	if maps.hasCgroup(gnb.cgroupID) {
		t.Error("the gNB pod's cgroup is in the scheduler's cgroup map: automatic mode prioritises processes, and no strategy selects the pod")
	}

	n.uninstallAgent(t)
	checkKernelLog(t, mark)
}

// User-space mode: the agent runs the policy in Go (mlockall: IPC_LOCK)
// and applies a strategy to a labelled pod as in kernel mode.
func TestClusterUserspace(t *testing.T) {
	ctx := runCtx(t, 20*time.Minute)
	n := clusterNode(t, ctx)
	mark := logMark(t)
	requireState(t, "disabled", "")
	agent := n.installAgent(t, ctx, "--set", "agent.config.scheduler.mode=userspace")
	requireState(t, "enabled", userOps)
	n.requireChartCapabilities(t, ctx, agent)

	const ns = "lab-user"
	n.namespace(t, ctx, ns)
	critical := n.runPod(t, ctx, ns, "echo", map[string]string{"tier": "critical"})
	plain := n.runPod(t, ctx, ns, "plain", map[string]string{"tier": "batch"})
	n.applyCriticalStrategy(t, ctx, ns)
	maps := n.schedulerMaps(t)
	n.waitCovered(t, critical, maps, time.Minute)
	if !maps.none(plain) {
		t.Fatal("the pod without the label is in the scheduler's maps")
	}
	requireState(t, "enabled", userOps) // the Go policy kept up with two pods starting

	n.uninstallAgent(t)
	checkKernelLog(t, mark)
}

// A capability missing from the agent's pod: the scheduler's load needs
// CAP_PERFMON beside CAP_BPF. Without it the agent must exit at once with
// the kernel's refusal in its log, not hang or run half attached, and the
// node must stay on its default scheduler. The chart cannot be told to drop
// one of its capabilities, so the test removes it from the DaemonSet, as an
// admission policy or a hand edit would.
func TestClusterMissingCapability(t *testing.T) {
	ctx := runCtx(t, 15*time.Minute)
	n := clusterNode(t, ctx)
	requireState(t, "disabled", "")
	old := n.installAgent(t, ctx)
	requireState(t, "enabled", "swiftlane")

	dsc := n.core.AppsV1().DaemonSets(modesSysNS)
	ds, err := dsc.Get(ctx, modesRelease+"-agent", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := &ds.Spec.Template.Spec.Containers[0]
	if c.Name != "agent" || c.SecurityContext == nil || c.SecurityContext.Capabilities == nil {
		t.Fatalf("the DaemonSet's first container is %q without capabilities: the chart changed", c.Name)
	}
	add := c.SecurityContext.Capabilities.Add
	i := slices.Index(add, corev1.Capability("PERFMON"))
	if i < 0 {
		t.Fatalf("the chart adds %v, no PERFMON: this test's premise changed", add)
	}
	c.SecurityContext.Capabilities.Add = slices.Delete(add, i, i+1)
	if _, err := dsc.Update(ctx, ds, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The rollout replaces the agent; the new one must exit, not wait.
	refused := regexp.MustCompile(`(?i)operation not permitted|permission denied`)
	var log string
	n.waitUntil(t, "the agent without CAP_PERFMON to exit with the kernel's error", 5*time.Minute, func() bool {
		pods, err := n.core.CoreV1().Pods(modesSysNS).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=agent"})
		if err != nil {
			return false
		}
		for i := range pods.Items {
			p := &clusterPod{Pod: &pods.Items[i]}
			if p.UID == old.UID {
				continue
			}
			for _, cs := range p.Status.ContainerStatuses {
				if term := terminated(cs); term != nil {
					if term.ExitCode == 0 {
						t.Fatalf("the agent without CAP_PERFMON exited 0:\n%s", n.podLog(p, "agent"))
					}
					log = n.podLog(p, "agent")
					return true
				}
			}
		}
		return false
	})
	if !refused.MatchString(log) || !strings.Contains(log, "CAP_PERFMON") {
		t.Fatalf("the agent without CAP_PERFMON exited without the kernel's refusal and the capabilities it needs in its log:\n%s", log)
	}
	t.Logf("the agent's last lines:\n%s", lastLines(log, 5))
	waitState(t, "disabled") // the old agent detached; the new one never attached
}

// lastLines is the end of a log, for the test's output.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}

const (
	modesRelease = "swiftlane"
	modesSysNS   = "swiftlane-system"
)

// installAgent installs the chart with the values (no API: these tests
// read the agents' records from the Kubernetes API) and waits for its
// agent to be Ready; the release is uninstalled when the test ends.
func (n *node) installAgent(t *testing.T, ctx context.Context, values ...string) *clusterPod {
	t.Helper()
	t.Cleanup(func() {
		n.dump() // the agent's log goes with its pod
		if out, err := n.command("helm", "uninstall", modesRelease, "--namespace", modesSysNS, "--ignore-not-found",
			"--wait", "--timeout", "10m").CombinedOutput(); err != nil {
			t.Errorf("helm uninstall: %v\n%s", err, out)
		}
	})
	args := append([]string{"install", modesRelease, "deploy/helm/swiftlane", "--namespace", modesSysNS, "--create-namespace",
		"--set", "api.enabled=false", "--set", "agent.config.api.interval=1", "--wait", "--timeout", "10m"}, values...)
	n.helm(t, args...)
	return n.waitAgent(t, ctx)
}

func (n *node) uninstallAgent(t *testing.T) {
	t.Helper()
	n.helm(t, "uninstall", modesRelease, "--namespace", modesSysNS, "--wait", "--timeout", "10m")
	waitState(t, "disabled")
}

// waitAgent waits for the agent pod to be Ready (attached, caches synced).
// Its container exiting fails the test at once with its log: an agent the
// kernel refuses exits, and waiting for the rollout would only time out.
func (n *node) waitAgent(t *testing.T, ctx context.Context) *clusterPod {
	t.Helper()
	var p *clusterPod
	n.waitUntil(t, "the agent pod to be Ready", 5*time.Minute, func() bool {
		pods, err := n.core.CoreV1().Pods(modesSysNS).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=agent"})
		if err != nil || len(pods.Items) != 1 {
			return false
		}
		p = &clusterPod{Pod: &pods.Items[0]}
		for _, cs := range p.Status.ContainerStatuses {
			if term := terminated(cs); term != nil {
				t.Fatalf("the agent's container exited (%s, exit code %d):\n%s", term.Reason, term.ExitCode, n.podLog(p, "agent"))
			}
		}
		return slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
			return c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
		}) && p.findCgroup()
	})
	return p
}

// terminated is how a container's current or last run ended, if one did.
func terminated(cs corev1.ContainerStatus) *corev1.ContainerStateTerminated {
	if t := cs.State.Terminated; t != nil {
		return t
	}
	return cs.LastTerminationState.Terminated
}

// podLog is what the kubelet kept of a container's output (every restart).
func (n *node) podLog(p *clusterPod, container string) string {
	files, _ := filepath.Glob(fmt.Sprintf("/var/log/pods/%s_%s_%s/%s/*.log", p.Namespace, p.Name, p.UID, container))
	var b strings.Builder
	for _, f := range files {
		out, _ := os.ReadFile(f)
		b.Write(out)
	}
	return b.String()
}

// waitAgentLog waits for a line of the agent's log matching ok and returns
// it; a line matching bad fails the test at once with the agent's log.
func (n *node) waitAgentLog(t *testing.T, p *clusterPod, ok, bad *regexp.Regexp, what string) string {
	t.Helper()
	var line string
	n.waitUntil(t, what, 2*time.Minute, func() bool {
		log := n.podLog(p, "agent")
		if bad.MatchString(log) {
			t.Fatalf("%s: the agent says %q:\n%s", what, bad.FindString(log), log)
		}
		line = ok.FindString(log)
		return line != ""
	})
	return line
}

// Capabilities the chart may add, by their Kubernetes names.
var capBits = map[corev1.Capability]uint{
	"BPF": unix.CAP_BPF, "PERFMON": unix.CAP_PERFMON, "SYS_PTRACE": unix.CAP_SYS_PTRACE,
	"IPC_LOCK": unix.CAP_IPC_LOCK, "SYS_ADMIN": unix.CAP_SYS_ADMIN, "SYSLOG": unix.CAP_SYSLOG,
}

// requireChartCapabilities: the agent process's effective and bounding
// sets are exactly what the chart's DaemonSet adds (it drops ALL), so the
// test shows the mode works with those and no more.
func (n *node) requireChartCapabilities(t *testing.T, ctx context.Context, agent *clusterPod) {
	t.Helper()
	ds, err := n.core.AppsV1().DaemonSets(modesSysNS).Get(ctx, modesRelease+"-agent", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var want uint64
	var names []corev1.Capability
	for _, c := range ds.Spec.Template.Spec.Containers {
		if c.Name != "agent" {
			continue
		}
		if sc := c.SecurityContext; sc == nil || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
			t.Fatalf("the agent container does not drop ALL capabilities: %+v", c.SecurityContext)
		}
		names = c.SecurityContext.Capabilities.Add
		for _, name := range names {
			bit, ok := capBits[name]
			if !ok {
				t.Fatalf("the chart adds %s: add it to capBits", name)
			}
			want |= 1 << bit
		}
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", agent.containerPID(t, "agent")))
	if err != nil {
		t.Fatal(err)
	}
	for _, set := range []string{"CapEff", "CapBnd"} {
		m := regexp.MustCompile(`(?m)^` + set + `:\s*([0-9a-f]+)$`).FindSubmatch(status)
		if m == nil {
			t.Fatalf("no %s in the agent's /proc/PID/status", set)
		}
		if got, _ := strconv.ParseUint(string(m[1]), 16, 64); got != want {
			t.Fatalf("the agent's %s is %#x, want %#x (the chart's %v)", set, got, want, names)
		}
	}
	t.Logf("the agent runs with exactly the chart's capabilities: %v", names)
}

// startGnbPod runs the lab's gNB in a pod and waits until it is forwarding;
// the pod is deleted when the test ends.
func (n *node) startGnbPod(t *testing.T, ctx context.Context, ns string) *clusterPod {
	t.Helper()
	privileged, root := true, int64(0)
	toContainer := corev1.MountPropagationHostToContainer
	created, err := n.core.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "gnb", Namespace: ns},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "gnb", Image: n.env.image, ImagePullPolicy: corev1.PullNever, Args: []string{"lab", "gnb"},
				SecurityContext: &corev1.SecurityContext{Privileged: &privileged, RunAsUser: &root},
				VolumeMounts:    []corev1.VolumeMount{{Name: "netns", MountPath: "/run/netns", MountPropagation: &toContainer}},
			}},
			Volumes: []corev1.Volume{{Name: "netns", VolumeSource: corev1.VolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: "/run/netns"}}}},
			TerminationGracePeriodSeconds: new(int64),
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p := &clusterPod{Pod: created}
	t.Cleanup(func() {
		n.dump()
		n.core.CoreV1().Pods(ns).Delete(context.Background(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		n.waitUntil(t, "the gNB pod to be gone", 2*time.Minute, func() bool {
			_, err := n.core.CoreV1().Pods(ns).Get(context.Background(), p.Name, metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		})
		if t.Failed() {
			t.Logf("=== the gNB's log\n%s", n.podLog(p, "gnb"))
		}
	})
	n.waitUntil(t, "the gNB pod to forward", 5*time.Minute, func() bool {
		got, err := n.core.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		p.Pod = got
		for _, cs := range got.Status.ContainerStatuses {
			if term := terminated(cs); term != nil {
				t.Fatalf("the gNB exited (%s, exit code %d):\n%s", term.Reason, term.ExitCode, n.podLog(p, "gnb"))
			}
		}
		return got.Status.Phase == corev1.PodRunning && p.findCgroup() && strings.Contains(n.podLog(p, "gnb"), "gnb ready")
	})
	return p
}
