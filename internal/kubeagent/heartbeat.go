// SPDX-License-Identifier: Apache-2.0

package kubeagent

// This node's SchedulingNode (mode, scheduler state, the processes strategies
// apply to), refreshed every Interval.

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/swiftlane/swiftlane/apis/swiftlane/v1alpha1"
	"github.com/swiftlane/swiftlane/internal/apitypes"
	"github.com/swiftlane/swiftlane/internal/crdconv"
	"github.com/swiftlane/swiftlane/internal/podcgroup"
	"github.com/swiftlane/swiftlane/internal/strategy"
)

// workloads lists the processes strategies apply to, for the node report
// (it reads each one's cgroup in procfs to name its container).
func (a *Agent) workloads() []v1alpha1.Workload {
	a.mu.Lock()
	exp := a.expansion
	a.mu.Unlock()
	wl := []v1alpha1.Workload{}
	for _, ap := range a.o.Applier.Applied() {
		if ap.Index < 0 || ap.Index >= len(exp) {
			continue
		}
		if len(wl) == crdconv.MaxWorkloads {
			break
		}
		x := exp[ap.Index]
		w := v1alpha1.Workload{PID: int32(ap.PID), Strategy: x.key, Class: ap.Class.String(),
			Inherited: ap.Inherited, Cmdline: crdconv.Truncate(ap.Cmdline, 256), Pod: x.pod}
		if x.podObj != nil {
			w.PodUID = string(x.podObj.UID)
			w.Container, w.ContainerID = a.containerOf(x.podObj, ap.PID)
		}
		wl = append(wl, w)
	}
	return wl
}

// unmatchable lists what the Applier reports as matching nothing, named
// after the SchedulingStrategy (namespace/name): the Applier's entries are
// expansions without names of their own. A strategy expanded per pod is
// listed once per reason.
func (a *Agent) unmatchable() []apitypes.Unmatchable {
	a.mu.Lock()
	exp := a.expansion
	a.mu.Unlock()
	var us []strategy.Unmatchable
	seen := map[[2]string]bool{}
	for _, u := range a.o.Applier.Unmatchable() {
		if u.Index >= 0 && u.Index < len(exp) {
			u.Strategy = exp[u.Index].key
		}
		if k := [2]string{u.Strategy, u.Reason}; !seen[k] {
			seen[k] = true
			us = append(us, u)
		}
	}
	return apitypes.UnmatchableOf(us)
}

// containerOf names the container of pod a process runs in, from the
// container id in its cgroup path and the pod's container statuses ("" when
// the process is not in one of them, e.g. in the pod cgroup itself).
func (a *Agent) containerOf(pod *corev1.Pod, pid int) (name, id string) {
	pp, ok, err := podcgroup.PodOfProcess(a.o.ProcRoot, pid)
	if err != nil || !ok || pp.ContainerID == "" || pp.Conmon || pp.UID != string(pod.UID) {
		return "", ""
	}
	for _, list := range [][]corev1.ContainerStatus{pod.Status.ContainerStatuses, pod.Status.InitContainerStatuses, pod.Status.EphemeralContainerStatuses} {
		for _, cs := range list {
			if _, cid, ok := strings.Cut(cs.ContainerID, "://"); ok && cid == pp.ContainerID {
				return cs.Name, pp.ContainerID
			}
		}
	}
	return "", pp.ContainerID
}

// heartbeats keeps this node's SchedulingNode current and refreshes the
// strategies' process counts (processes come and go without any Kubernetes
// event: the scheduler's exec/fork/exit events update the Applier).
func (a *Agent) heartbeats(ctx context.Context) {
	tick := time.NewTicker(a.o.Interval)
	defer tick.Stop()
	for {
		if a.o.Mode == ModeObserve {
			// No scheduler, no process events: resolve again before reporting.
			a.queue.Add(resyncKey)
		} else {
			a.refreshCounts()
		}
		if err := a.heartbeat(ctx); err != nil && ctx.Err() == nil {
			a.o.Log.Warn("SchedulingNode heartbeat failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// refreshCounts queues a status write when a strategy's process count moved
// since it was reported; it writes only what changed.
func (a *Agent) refreshCounts() {
	procs := a.counts()
	a.mu.Lock()
	defer a.mu.Unlock()
	for key, st := range a.reported {
		if st.generation != 0 && st.procs != procs[key] {
			a.status.Add(statusKey)
			return
		}
	}
}

func (a *Agent) heartbeat(ctx context.Context) error {
	wl := a.workloads()
	state := "unknown"
	if a.o.SchedulerState != nil {
		state = a.o.SchedulerState()
	}
	nodeLabels := map[string]string{}
	md := map[string]any{"name": a.o.Node}
	if n, err := a.nodes.Get(a.o.Node); err == nil {
		nodeLabels = n.Labels
		// Owned by the Node: deleting the node garbage-collects its record.
		md["ownerReferences"] = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: n.Name, UID: n.UID}}
	}
	obj := map[string]any{"apiVersion": v1alpha1.GroupVersion.String(), "kind": "SchedulingNode", "metadata": md}
	body, _ := json.Marshal(obj)
	if err := a.crd.Patch(types.ApplyPatchType).Resource(v1alpha1.NodesResource.Resource).Name(a.o.Node).
		Param("fieldManager", a.fieldManager()).Param("force", "true").Body(body).Do(ctx).Error(); err != nil {
		return fmt.Errorf("apply SchedulingNode %s: %w", a.o.Node, err)
	}
	var carriers []v1alpha1.Carrier
	if a.o.Carriers != nil {
		carriers = crdconv.Carriers(a.o.Carriers())
	}
	obj["status"] = v1alpha1.SchedulingNodeStatus{
		Version: a.o.Version, Kernel: a.o.Kernel, Mode: a.o.Mode, Reason: a.o.Reason, Labels: nodeLabels,
		HeartbeatSeconds: int32(max(a.o.Interval.Round(time.Second), time.Second) / time.Second),
		SchedulerState:   state, RegisteredAt: a.started, LastHeartbeat: metav1.Now(), Workloads: wl,
		Carriers: carriers, Unmatchable: crdconv.Unmatchable(a.unmatchable()),
	}
	body, _ = json.Marshal(obj)
	if err := a.crd.Patch(types.ApplyPatchType).Resource(v1alpha1.NodesResource.Resource).Name(a.o.Node).
		SubResource("status").Param("fieldManager", a.fieldManager()).Param("force", "true").Body(body).Do(ctx).Error(); err != nil {
		return fmt.Errorf("status of SchedulingNode %s: %w", a.o.Node, err)
	}
	return nil
}
