// SPDX-License-Identifier: Apache-2.0

package kubeagent

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/swiftlane/swiftlane/apis/swiftlane/v1alpha1"
	"github.com/swiftlane/swiftlane/internal/apitypes"
	"github.com/swiftlane/swiftlane/internal/applier"
	"github.com/swiftlane/swiftlane/internal/kubetest"
	"github.com/swiftlane/swiftlane/internal/podcgroup"
	"github.com/swiftlane/swiftlane/internal/strategy"
)

// The agent against a real kube-apiserver: strategies select this node's
// pods, the pods' cgroups (a kubelet-shaped tree in a temp dir, since there
// is no kubelet) reach the scheduler target, status comes back per node,
// and the scoping rules hold. The scheduler's own maps are checked in the VM
// test (test/vm); here the target records what it is given.
func TestAgentAppliesPodStrategies(t *testing.T) {
	env, core, crd := startWithCRDs(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg := env.RESTConfig()
	for _, ns := range []string{"team", "other", "swiftlane-system"} {
		if _, err := core.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"tier": ns}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// No controller-manager here to create it; pod admission needs it.
		if _, err := core.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	node, err := core.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"swiftlane.io/lane": "fast"}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	root := t.TempDir() // the cgroup2 root, as the kubelet would lay it out
	upf := createPod(t, ctx, core, root, "team", "upf", "n1", map[string]string{"app": "upf"})
	createPod(t, ctx, core, root, "team", "web", "n1", map[string]string{"app": "web"})
	createPod(t, ctx, core, root, "other", "upf", "n1", map[string]string{"app": "upf"})
	createPod(t, ctx, core, "", "team", "upf-elsewhere", "n2", map[string]string{"app": "upf"})

	res, err := podcgroup.NewResolver(podcgroup.Layout{Version: podcgroup.Unified, Unified: root}, "/", podcgroup.Systemd)
	if err != nil {
		t.Fatal(err)
	}
	rec := applier.NewRecorder()
	synced := make(chan struct{}, 1)
	var fromEvents atomic.Int32
	a, err := New(Options{
		Config: cfg, Node: "n1", SystemNamespace: "swiftlane-system", Cgroups: Resolver{res},
		Applier: fakeTreeApplier(rec, root), Interval: 200 * time.Millisecond,
		// What automatic mode would report (test/vm traces real GTP-U).
		Carriers: func() []apitypes.Carrier {
			return []apitypes.Carrier{{PID: 4242, Command: "nr-gnb", Class: "critical", Since: time.Now(), LastPacket: time.Now(), Packets: 10, PacketsPerSecond: 2.4}}
		},
		OnSynced: func(st SyncTimes) {
			if st.Start.IsZero() || st.Expanded.Before(st.Start) || st.Applied.Before(st.Expanded) || st.Start.Before(st.Event) {
				t.Errorf("resync stages out of order: %+v", st)
			}
			if !st.Event.IsZero() {
				fromEvents.Add(1)
			}
			select {
			case synced <- struct{}{}:
			default:
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	actx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(actx) }()
	halt := sync.OnceFunc(func() { stop(); <-done })
	t.Cleanup(halt)

	upfID := podCgroupID(t, root, upf)
	waitSynced := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.After(time.Minute)
		for !ok() {
			select {
			case <-synced:
			case <-deadline:
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}

	// A strategy in "team" selecting app=upf: only team/upf on n1.
	create(t, ctx, crd, &v1alpha1.SchedulingStrategy{
		ObjectMeta: metav1.ObjectMeta{Name: "upf", Namespace: "team"},
		Spec: v1alpha1.SchedulingStrategySpec{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "upf"}},
			Class: v1alpha1.ClassCritical, Slice: &metav1.Duration{Duration: 2 * time.Millisecond}},
	})
	waitSynced("team/upf's cgroup in the target", func() bool { _, ok := rec.Cgroup(upfID); return ok })
	if fromEvents.Load() == 0 {
		t.Error("no resync said when the change that started it arrived (SyncTimes.Event)")
	}
	if e, _ := rec.Cgroup(upfID); e.Class != strategy.Critical || e.SliceNs != 2_000_000 {
		t.Errorf("entry for team/upf = %+v, want critical with a 2 ms slice", e)
	}
	if n := rec.Cgroups(); n != 1 {
		t.Errorf("%d cgroups in the target, want 1 (other/upf is another namespace, upf-elsewhere another node)", n)
	}
	st := waitStatus(t, ctx, crd, "team", "upf", func(n v1alpha1.StrategyNodeStatus) bool { return n.Pods == 1 })
	if c := meta.FindStatusCondition(st.Conditions, ConditionApplied); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Applied condition = %+v, want True", c)
	}

	// Scoping: namespaceSelector only from the system namespace; a tenant
	// strategy without a pod selector applies to nothing.
	create(t, ctx, crd, &v1alpha1.SchedulingStrategy{
		ObjectMeta: metav1.ObjectMeta{Name: "wide", Namespace: "team"},
		Spec: v1alpha1.SchedulingStrategySpec{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			NamespaceSelector: &metav1.LabelSelector{}, Class: v1alpha1.ClassHigh},
	})
	create(t, ctx, crd, &v1alpha1.SchedulingStrategy{
		ObjectMeta: metav1.ObjectMeta{Name: "all-pings", Namespace: "team"},
		Spec:       v1alpha1.SchedulingStrategySpec{CommandRegex: "ping", Class: v1alpha1.ClassCritical},
	})
	wide := waitStatus(t, ctx, crd, "team", "wide", func(n v1alpha1.StrategyNodeStatus) bool { return n.Pods == 1 })
	if c := meta.FindStatusCondition(wide.Conditions, ConditionApplied); c == nil || !strings.Contains(c.Message, "namespaceSelector ignored") {
		t.Errorf("team/wide condition = %+v, want a message that namespaceSelector is ignored", c)
	}
	pings := waitStatus(t, ctx, crd, "team", "all-pings", func(n v1alpha1.StrategyNodeStatus) bool { return len(n.Conditions) > 0 })
	if c := meta.FindStatusCondition(pings.Conditions, ConditionApplied); c == nil || c.Status != metav1.ConditionFalse || c.Reason != "PodSelectorRequired" {
		t.Errorf("team/all-pings condition = %+v, want False/PodSelectorRequired", c)
	}
	// From the system namespace the same selector reaches other namespaces.
	create(t, ctx, crd, &v1alpha1.SchedulingStrategy{
		ObjectMeta: metav1.ObjectMeta{Name: "upf-everywhere", Namespace: "swiftlane-system"},
		Spec: v1alpha1.SchedulingStrategySpec{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "upf"}},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "other"}}, Class: v1alpha1.ClassHigh},
	})
	waitSynced("other/upf via the system namespace's strategy", func() bool { return rec.Cgroups() == 3 })

	// A cgroupPath this node lacks matches nothing here: reported by the
	// Applier (logged, and swiftlane_strategies_unmatchable on /metrics),
	// and no longer once the strategy goes.
	create(t, ctx, crd, &v1alpha1.SchedulingStrategy{
		ObjectMeta: metav1.ObjectMeta{Name: "batch", Namespace: "swiftlane-system"},
		Spec:       v1alpha1.SchedulingStrategySpec{CgroupPath: "/batch.slice", Class: v1alpha1.ClassBackground},
	})
	waitSynced("swiftlane-system/batch reported as matching nothing", func() bool {
		u := a.o.Applier.Unmatchable()
		return len(u) == 1 && u[0].Reason == strategy.ReasonCgroupMissing
	})
	// Named after the SchedulingStrategy (the node's log and /metrics use
	// this label), not as the Applier's unnamed entry strategies[i].
	if u := a.o.Applier.Unmatchable(); u[0].Strategy != "swiftlane-system/batch" {
		t.Errorf("the unmatchable strategy is labelled %q, want swiftlane-system/batch", u[0].Strategy)
	}
	// ... and in the node's SchedulingNode, which the API and ctl read.
	unmatchable := func() []v1alpha1.UnmatchableStrategy {
		var sn v1alpha1.SchedulingNode
		if err := crd.Get().Resource(v1alpha1.NodesResource.Resource).Name("n1").Do(ctx).Into(&sn); err != nil {
			return nil
		}
		return sn.Status.Unmatchable
	}
	waitFor(t, "batch in the SchedulingNode's unmatchable strategies", func() bool {
		u := unmatchable()
		return len(u) == 1 && u[0].Strategy == "swiftlane-system/batch" && u[0].Reason == strategy.ReasonCgroupMissing && u[0].Fix != ""
	})
	if err := crd.Delete().Namespace("swiftlane-system").Resource(v1alpha1.StrategiesResource.Resource).Name("batch").Do(ctx).Error(); err != nil {
		t.Fatal(err)
	}
	waitSynced("swiftlane-system/batch's report to go", func() bool { return len(a.o.Applier.Unmatchable()) == 0 })
	waitFor(t, "the SchedulingNode to list no unmatchable strategy", func() bool { return len(unmatchable()) == 0 })

	// Pod deleted: its entry goes.
	if err := core.CoreV1().Pods("team").Delete(ctx, "upf", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	waitSynced("team/upf's cgroup to leave the target", func() bool { _, ok := rec.Cgroup(upfID); return !ok })
	waitStatus(t, ctx, crd, "team", "upf", func(n v1alpha1.StrategyNodeStatus) bool { return n.Pods == 0 })

	// Not for this node any more: the node's entry is removed.
	patch(t, ctx, crd, "team", "upf", `{"spec":{"nodeSelector":{"swiftlane.io/lane":"slow"}}}`)
	waitFor(t, "n1's entry to leave team/upf's status", func() bool {
		s := get(t, ctx, crd, "team", "upf")
		return len(s.Status.Nodes) == 0
	})

	// The node record, owned by the Node object.
	var sn v1alpha1.SchedulingNode
	waitFor(t, "the SchedulingNode", func() bool {
		return crd.Get().Resource(v1alpha1.NodesResource.Resource).Name("n1").Do(ctx).Into(&sn) == nil && sn.Status.Mode != ""
	})
	if sn.Status.Mode != ModeSchedule || len(sn.OwnerReferences) != 1 || sn.OwnerReferences[0].UID != node.UID {
		t.Errorf("SchedulingNode: mode %q owners %+v", sn.Status.Mode, sn.OwnerReferences)
	}
	if c := sn.Status.Carriers; len(c) != 1 || c[0].PID != 4242 || c[0].Command != "nr-gnb" || c[0].Packets != 10 || c[0].PacketsPerSecond != 2 {
		t.Errorf("SchedulingNode carriers: %+v, want nr-gnb (4242) with 10 packets at 2/s", c)
	}

	// The agent gone (the chart's post-delete hook runs after the
	// DaemonSet's deletion), Cleanup removes what it wrote and no spec.
	halt()
	for _, s := range []struct{ ns, name string }{{"team", "wide"}, {"swiftlane-system", "upf-everywhere"}} {
		if len(get(t, ctx, crd, s.ns, s.name).Status.Nodes) == 0 {
			t.Fatalf("%s/%s has no node entry before Cleanup: nothing to test", s.ns, s.name)
		}
	}
	before := get(t, ctx, crd, "team", "upf") // no entry since its nodeSelector changed
	removed, err := Cleanup(ctx, cfg)
	if err != nil {
		t.Fatalf("Cleanup: %v", err)
	}
	if !slices.Equal(removed.Nodes, []string{"n1"}) {
		t.Errorf("Cleanup deleted SchedulingNodes %q, want [n1]", removed.Nodes)
	}
	if want := []string{"swiftlane-system/upf-everywhere", "team/all-pings", "team/wide"}; !slices.Equal(slices.Sorted(slices.Values(removed.Statuses)), want) {
		t.Errorf("Cleanup cleared the status of %q, want %q", removed.Statuses, want)
	}
	var left v1alpha1.SchedulingNodeList
	if err := crd.Get().Resource(v1alpha1.NodesResource.Resource).Do(ctx).Into(&left); err != nil || len(left.Items) != 0 {
		t.Errorf("SchedulingNodes after Cleanup: %d (err %v), want none", len(left.Items), err)
	}
	for _, s := range []struct{ ns, name string }{{"team", "wide"}, {"team", "all-pings"}, {"swiftlane-system", "upf-everywhere"}} {
		got := get(t, ctx, crd, s.ns, s.name)
		if len(got.Status.Nodes) != 0 {
			t.Errorf("%s/%s status after Cleanup: %+v, want no node entry", s.ns, s.name, got.Status.Nodes)
		}
		if got.Spec.Class == "" || got.Generation != 1 {
			t.Errorf("%s/%s spec changed by Cleanup: generation %d, class %q", s.ns, s.name, got.Generation, got.Spec.Class)
		}
	}
	if after := get(t, ctx, crd, "team", "upf"); after.ResourceVersion != before.ResourceVersion {
		t.Errorf("team/upf (no entry to clear) written by Cleanup: resourceVersion %s -> %s", before.ResourceVersion, after.ResourceVersion)
	}
	// Again: nothing left to remove, no error.
	if again, err := Cleanup(ctx, cfg); err != nil || len(again.Nodes)+len(again.Statuses) != 0 {
		t.Errorf("second Cleanup: %+v, %v; want nothing removed", again, err)
	}
}

// Cleanup where the CRDs are gone (deleted by hand before the uninstall):
// nothing to remove is not an error.
func TestCleanupWithoutCRDs(t *testing.T) {
	env := kubetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if removed, err := Cleanup(ctx, env.RESTConfig()); err != nil || len(removed.Nodes)+len(removed.Statuses) != 0 {
		t.Errorf("Cleanup without CRDs: %+v, %v; want nothing removed and no error", removed, err)
	}
}

func crdDir(t *testing.T) string {
	dir, err := filepath.Abs("../../deploy/helm/swiftlane/crds")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// createPod creates a pod bound to node and, if root is set, the cgroup the
// kubelet would make for it (BestEffort, systemd driver).
func createPod(t *testing.T, ctx context.Context, core kubernetes.Interface, root, ns, name, node string, labels map[string]string) *corev1.Pod {
	t.Helper()
	pod, err := core.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: corev1.PodSpec{NodeName: node, AutomountServiceAccountToken: new(bool),
			Containers: []corev1.Container{{Name: "c", Image: "example.invalid/none"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if root != "" {
		if err := os.MkdirAll(podDir(root, pod), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return pod
}

func podDir(root string, pod *corev1.Pod) string {
	uid := strings.ReplaceAll(string(pod.UID), "-", "_")
	return filepath.Join(root, "kubepods.slice", "kubepods-besteffort.slice", fmt.Sprintf("kubepods-besteffort-pod%s.slice", uid))
}

func podCgroupID(t *testing.T, root string, pod *corev1.Pod) uint64 {
	t.Helper()
	fi, err := os.Stat(podDir(root, pod))
	if err != nil {
		t.Fatal(err)
	}
	return inode(fi)
}

func create(t *testing.T, ctx context.Context, crd *rest.RESTClient, s *v1alpha1.SchedulingStrategy) {
	t.Helper()
	if err := crd.Post().Namespace(s.Namespace).Resource(v1alpha1.StrategiesResource.Resource).Body(s).Do(ctx).Error(); err != nil {
		t.Fatalf("create %s/%s: %v", s.Namespace, s.Name, err)
	}
}

func patch(t *testing.T, ctx context.Context, crd *rest.RESTClient, ns, name, body string) {
	t.Helper()
	if err := crd.Patch("application/merge-patch+json").Namespace(ns).Resource(v1alpha1.StrategiesResource.Resource).Name(name).Body([]byte(body)).Do(ctx).Error(); err != nil {
		t.Fatalf("patch %s/%s: %v", ns, name, err)
	}
}

func get(t *testing.T, ctx context.Context, crd *rest.RESTClient, ns, name string) *v1alpha1.SchedulingStrategy {
	t.Helper()
	var s v1alpha1.SchedulingStrategy
	if err := crd.Get().Namespace(ns).Resource(v1alpha1.StrategiesResource.Resource).Name(name).Do(ctx).Into(&s); err != nil {
		t.Fatalf("get %s/%s: %v", ns, name, err)
	}
	return &s
}

// waitStatus waits until n1's entry of the strategy's status satisfies ok.
func waitStatus(t *testing.T, ctx context.Context, crd *rest.RESTClient, ns, name string, ok func(v1alpha1.StrategyNodeStatus) bool) v1alpha1.StrategyNodeStatus {
	t.Helper()
	var got v1alpha1.StrategyNodeStatus
	waitFor(t, fmt.Sprintf("n1's status of %s/%s", ns, name), func() bool {
		for _, n := range get(t, ctx, crd, ns, name).Status.Nodes {
			if n.Node == "n1" && ok(n) {
				got = n
				return true
			}
		}
		return false
	})
	return got
}

// waitFor polls the API server: its state changes without telling us.
func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func inode(fi os.FileInfo) uint64 { return fi.Sys().(*syscall.Stat_t).Ino }

// fakeTreeApplier resolves cgroup ids in the test's cgroup tree, a temporary
// directory that podcgroup.CgroupID refuses (not cgroup2), by inode as
// cgroup2 numbers them.
func fakeTreeApplier(rec *applier.Recorder, root string) *applier.Applier {
	a := applier.New(rec, "/proc", root, nil)
	a.SetCgroupIDFunc(func(dir string) (uint64, error) {
		fi, err := os.Stat(dir)
		if err != nil {
			return 0, err
		}
		return inode(fi), nil
	})
	return a
}

// TestContainerOfProcess: a workload's container is named from the
// container id in the process's cgroup and the pod's container statuses.
func TestContainerOfProcess(t *testing.T) {
	const uid = "0b7d5a2c-1f3e-4c5d-9a8b-7c6d5e4f3a2b"
	const ctr = "4f3c2b1a0f9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c8b7a6f5e4d3c"
	root := t.TempDir()
	for pid, cg := range map[string]string{
		"10": "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + strings.ReplaceAll(uid, "-", "_") + ".slice/cri-containerd-" + ctr + ".scope\n",
		"11": "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + strings.ReplaceAll(uid, "-", "_") + ".slice\n",
		"12": "0::/system.slice/sshd.service\n",
	} {
		os.MkdirAll(filepath.Join(root, pid), 0o755)
		os.WriteFile(filepath.Join(root, pid, "cgroup"), []byte(cg), 0o644)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: uid}, Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{
		{Name: "sidecar", ContainerID: "containerd://" + strings.Repeat("a", 64)},
		{Name: "gnb", ContainerID: "containerd://" + ctr},
	}}}
	a := &Agent{o: Options{ProcRoot: root}}
	for pid, want := range map[int][2]string{10: {"gnb", ctr}, 11: {"", ""}, 12: {"", ""}, 13: {"", ""}} {
		if name, id := a.containerOf(pod, pid); name != want[0] || id != want[1] {
			t.Errorf("pid %d: container %q %q, want %q %q", pid, name, id, want[0], want[1])
		}
	}
}

// TestCoreStrategy: core errors name the CRD's fields, and a pod-selecting
// strategy needs no matcher of its own (the pod's cgroup becomes one).
func TestCoreStrategy(t *testing.T) {
	spec := func(edit func(*v1alpha1.SchedulingStrategySpec)) *v1alpha1.SchedulingStrategy {
		s := &v1alpha1.SchedulingStrategy{Spec: v1alpha1.SchedulingStrategySpec{Class: "high", CommandRegex: "x"}}
		edit(&s.Spec)
		return s
	}
	for name, tc := range map[string]struct {
		edit func(*v1alpha1.SchedulingStrategySpec)
		err  string // prefix; "" for none
	}{
		"valid":           {func(*v1alpha1.SchedulingStrategySpec) {}, ""},
		"bad RE2":         {func(s *v1alpha1.SchedulingStrategySpec) { s.CommandRegex = `(\1)` }, "spec.commandRegex: "},
		"short slice":     {func(s *v1alpha1.SchedulingStrategySpec) { s.Slice = &metav1.Duration{Duration: time.Microsecond} }, "spec.slice: "},
		"no matcher":      {func(s *v1alpha1.SchedulingStrategySpec) { s.CommandRegex = "" }, "spec.commandRegex: "},
		"pods only":       {func(s *v1alpha1.SchedulingStrategySpec) { s.CommandRegex, s.PodSelector = "", &metav1.LabelSelector{} }, ""},
		"unknown class":   {func(s *v1alpha1.SchedulingStrategySpec) { s.Class = "urgent" }, "spec.class: "},
		"relative cgroup": {func(s *v1alpha1.SchedulingStrategySpec) { s.CgroupPath = "batch" }, "spec.cgroupPath: "},
	} {
		_, err := coreStrategy(spec(tc.edit))
		if (tc.err == "") != (err == nil) || err != nil && !strings.HasPrefix(err.Error(), tc.err) {
			t.Errorf("%s: %v, want error prefix %q", name, err, tc.err)
		}
	}
}

// A slow status write (here delayed on the wire; in a cluster, client-go's
// rate limit or a busy API server) must not hold back the next strategy's
// map entries: statuses are written after the resync, by their own worker.
func TestMapsDoNotWaitForStatus(t *testing.T) {
	env, core, crd := startWithCRDs(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := core.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := core.CoreV1().ServiceAccounts("team").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := core.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	podA := createPod(t, ctx, core, root, "team", "a", "n1", map[string]string{"app": "a"})
	podB := createPod(t, ctx, core, root, "team", "b", "n1", map[string]string{"app": "b"})
	idA, idB := podCgroupID(t, root, podA), podCgroupID(t, root, podB)

	const slow = 2 * time.Second
	acfg := env.RESTConfig()
	acfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if req.Method == http.MethodPatch && strings.Contains(req.URL.Path, "/schedulingstrategies/") && strings.HasSuffix(req.URL.Path, "/status") {
				time.Sleep(slow)
			}
			return rt.RoundTrip(req)
		})
	}
	res, err := podcgroup.NewResolver(podcgroup.Layout{Version: podcgroup.Unified, Unified: root}, "/", podcgroup.Systemd)
	if err != nil {
		t.Fatal(err)
	}
	rec := applier.NewRecorder()
	a, err := New(Options{Config: acfg, Node: "n1", Cgroups: Resolver{res}, Applier: fakeTreeApplier(rec, root)})
	if err != nil {
		t.Fatal(err)
	}
	actx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(actx) }()
	t.Cleanup(func() { stop(); <-done })

	strat := func(name string) *v1alpha1.SchedulingStrategy {
		return &v1alpha1.SchedulingStrategy{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team"},
			Spec: v1alpha1.SchedulingStrategySpec{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}, Class: v1alpha1.ClassCritical}}
	}
	create(t, ctx, crd, strat("a"))
	waitFor(t, "a's cgroup in the target", func() bool { _, ok := rec.Cgroup(idA); return ok })
	// a's status write is now on the wire for the next two seconds.
	start := time.Now()
	create(t, ctx, crd, strat("b"))
	waitFor(t, "b's cgroup in the target", func() bool { _, ok := rec.Cgroup(idB); return ok })
	// a's write began up to a poll (50 ms) before b's create: half of slow
	// still tells waiting from not waiting.
	if d := time.Since(start); d >= slow/2 {
		t.Errorf("b reached the target %v after its create: it waited for a's status write (%v)", d, slow)
	}
	waitStatus(t, ctx, crd, "team", "b", func(n v1alpha1.StrategyNodeStatus) bool { return n.Pods == 1 })
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// startWithCRDs starts a control plane with swiftlane's CRDs established and
// returns clients for it.
func startWithCRDs(t *testing.T) (*kubetest.Env, kubernetes.Interface, *rest.RESTClient) {
	t.Helper()
	env := kubetest.Start(t)
	env.Kubectl(t, "apply", "--server-side", "-f", crdDir(t))
	env.Kubectl(t, "wait", "--for=condition=Established", "--timeout=60s", "crd/schedulingstrategies.swiftlane.io", "crd/schedulingnodes.swiftlane.io")
	cfg := env.RESTConfig()
	crd, err := v1alpha1.NewRESTClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return env, kubernetes.NewForConfigOrDie(cfg), crd
}
