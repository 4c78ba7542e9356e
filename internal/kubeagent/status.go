// SPDX-License-Identifier: Apache-2.0

package kubeagent

// Each strategy's status: this node's entry, written by its own worker after
// the resync that produced it.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/swiftlane/swiftlane/apis/swiftlane/v1alpha1"
	"github.com/swiftlane/swiftlane/internal/crdconv"
)

// nodeStatus is this node's entry of one strategy's status, as last written.
type nodeStatus struct {
	generation     int64
	pods, procs    int32
	status, reason string
	message        string
	appliedAt      metav1.Time
	transition     metav1.Time
}

// statusWorker writes the statuses of the last resync, retrying failures
// with backoff.
func (a *Agent) statusWorker(ctx context.Context) {
	for {
		key, quit := a.status.Get()
		if quit {
			return
		}
		a.mu.Lock()
		plans := a.plans
		a.mu.Unlock()
		if err := a.writeStatuses(ctx, plans); err != nil && ctx.Err() == nil {
			a.o.Log.Warn("status write failed; retrying", "err", err)
			a.status.AddRateLimited(key)
		} else {
			a.status.Forget(key)
		}
		a.status.Done(key)
	}
}

// counts returns per strategy key the processes the strategy applies to.
func (a *Agent) counts() map[string]int32 {
	a.mu.Lock()
	exp := a.expansion
	a.mu.Unlock()
	procs := map[string]int32{}
	for _, ap := range a.o.Applier.Applied() {
		if ap.Index >= 0 && ap.Index < len(exp) {
			procs[exp[ap.Index].key]++
		}
	}
	return procs
}

// writeStatuses applies this node's entry of each strategy's status where it
// changed. Strategies not for this node get an empty apply, which removes
// the entry this node's field manager owns.
func (a *Agent) writeStatuses(ctx context.Context, plans []plan) error {
	procs := a.counts()
	now := metav1.Now()
	var errs []error
	for _, p := range plans {
		key := p.s.Namespace + "/" + p.s.Name
		a.mu.Lock()
		prev, had := a.reported[key]
		a.mu.Unlock()
		if !had {
			prev = a.fromObject(p.s)
		}
		if !p.forNode {
			if prev.generation == 0 && !had {
				continue // never reported here
			}
			if err := a.applyStatus(ctx, p.s, nil); err != nil {
				errs = append(errs, err)
				continue
			}
			a.mu.Lock()
			a.reported[key] = nodeStatus{}
			a.mu.Unlock()
			continue
		}
		cur := nodeStatus{generation: p.s.Generation, pods: int32(p.pods), procs: procs[key], message: p.message}
		switch {
		case p.reason != "":
			cur.status, cur.reason = string(metav1.ConditionFalse), p.reason
		case a.o.Mode == ModeObserve:
			cur.status, cur.reason = string(metav1.ConditionFalse), "ObserveMode"
			cur.message = strings.TrimSpace(a.o.Reason + " " + cur.message)
		case p.unresolved > 0:
			cur.status, cur.reason = string(metav1.ConditionFalse), "CgroupNotFound"
		default:
			cur.status, cur.reason = string(metav1.ConditionTrue), "Applied"
			if cur.message == "" {
				cur.message = fmt.Sprintf("%d pod(s), %d process(es) in the scheduler's maps", cur.pods, cur.procs)
			}
		}
		cur.appliedAt, cur.transition = prev.appliedAt, prev.transition
		if cur.pods != prev.pods || cur.procs != prev.procs || cur.generation != prev.generation || cur.appliedAt.IsZero() {
			cur.appliedAt = now
		}
		if cur.status != prev.status || cur.reason != prev.reason || cur.transition.IsZero() {
			cur.transition = now
		}
		if had && cur == prev {
			continue
		}
		if err := a.applyStatus(ctx, p.s, &cur); err != nil {
			errs = append(errs, err)
			continue
		}
		a.mu.Lock()
		a.reported[key] = cur
		a.mu.Unlock()
	}
	// Forget strategies that are gone.
	a.mu.Lock()
	for key := range a.reported {
		if !slices.ContainsFunc(plans, func(p plan) bool { return p.s.Namespace+"/"+p.s.Name == key }) {
			delete(a.reported, key)
		}
	}
	a.mu.Unlock()
	return errors.Join(errs...)
}

// fromObject reads this node's entry back from the object (after a restart,
// so transition times survive it).
func (a *Agent) fromObject(s *v1alpha1.SchedulingStrategy) nodeStatus {
	for _, n := range s.Status.Nodes {
		if n.Node != a.o.Node {
			continue
		}
		ns := nodeStatus{generation: n.ObservedGeneration, pods: n.Pods, procs: n.Processes, appliedAt: n.AppliedAt}
		if c := meta.FindStatusCondition(n.Conditions, ConditionApplied); c != nil {
			ns.status, ns.reason, ns.message, ns.transition = string(c.Status), c.Reason, c.Message, c.LastTransitionTime
		}
		return ns
	}
	return nodeStatus{}
}

// applyStatus server-side applies this node's entry (nil: no entry).
func (a *Agent) applyStatus(ctx context.Context, s *v1alpha1.SchedulingStrategy, st *nodeStatus) error {
	nodes := []v1alpha1.StrategyNodeStatus{}
	if st != nil {
		nodes = append(nodes, v1alpha1.StrategyNodeStatus{
			Node: a.o.Node, ObservedGeneration: st.generation, Pods: st.pods, Processes: st.procs, AppliedAt: st.appliedAt,
			Conditions: []metav1.Condition{{Type: ConditionApplied, Status: metav1.ConditionStatus(st.status), Reason: st.reason,
				Message: crdconv.Truncate(st.message, 1024), ObservedGeneration: st.generation, LastTransitionTime: st.transition}},
		})
	}
	body, err := json.Marshal(map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(), "kind": "SchedulingStrategy",
		"metadata": map[string]any{"name": s.Name, "namespace": s.Namespace},
		"status":   map[string]any{"nodes": nodes},
	})
	if err != nil {
		return err
	}
	err = a.crd.Patch(types.ApplyPatchType).Namespace(s.Namespace).Resource(v1alpha1.StrategiesResource.Resource).
		Name(s.Name).SubResource("status").Param("fieldManager", a.fieldManager()).Param("force", "true").
		Body(body).Do(ctx).Error()
	if apierrors.IsNotFound(err) {
		return nil // deleted meanwhile; its delete event resyncs
	}
	if err != nil {
		return fmt.Errorf("status of strategy %s/%s: %w", s.Namespace, s.Name, err)
	}
	return nil
}
