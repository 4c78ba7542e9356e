// SPDX-License-Identifier: Apache-2.0

package crdstore

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/swiftlane/swiftlane/apis/swiftlane/v1alpha1"
	"github.com/swiftlane/swiftlane/internal/apitypes"
	"github.com/swiftlane/swiftlane/internal/crdconv"
	"github.com/swiftlane/swiftlane/internal/store"
)

// Nodes are SchedulingNodes (cluster-scoped, named after the node), read
// from the API server on every call: agents write them every few seconds
// and readers are few. Registration and heartbeat live in the status
// subresource. A SchedulingNode without status.registeredAt (created, not
// yet registered) is not a node yet.
//
// Counters are not in SchedulingNodeStatus: this store keeps each node's
// last counters in memory, so a replica reports those of the heartbeats it
// received, and none after a restart.

// RegisterNode creates the object if needed and writes the registration
// into its status, conditionally on the status's resourceVersion: a
// concurrent heartbeat through another replica is re-read, not overwritten.
func (s *Store) RegisterNode(ctx context.Context, name string, r apitypes.Registration, now time.Time) (apitypes.Node, error) {
	var out v1alpha1.SchedulingNode
	err := retryConflicts(ctx, "register node "+name, func(ctx context.Context) error {
		var cur v1alpha1.SchedulingNode
		err := s.nodeReq("GET").Name(name).Do(ctx).Into(&cur)
		if apierrors.IsNotFound(err) {
			obj := &v1alpha1.SchedulingNode{
				TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "SchedulingNode"},
				ObjectMeta: metav1.ObjectMeta{Name: name},
			}
			err = s.nodeReq("POST").Body(obj).Do(ctx).Into(&cur)
			if apierrors.IsAlreadyExists(err) {
				// Created meanwhile (another replica, or the node's
				// kubeagent): a conflict like any other, read it again.
				return apierrors.NewConflict(v1alpha1.NodesResource.GroupResource(), name, err)
			}
		}
		if err != nil {
			return s.nodeError("register", name, err)
		}
		st := &cur.Status
		st.Labels, st.Version, st.Kernel, st.Mode, st.Reason = r.Labels, r.Version, r.Kernel, r.Mode, r.Reason
		st.HeartbeatSeconds = int32(min(r.HeartbeatSeconds, math.MaxInt32))
		st.RegisteredAt = metav1.NewTime(now)
		err = s.nodeReq("PUT").Name(name).SubResource("status").Body(&cur).Do(ctx).Into(&out)
		if err != nil && !apierrors.IsConflict(err) {
			return s.nodeError("register", name, err)
		}
		return err
	})
	if err != nil {
		return apitypes.Node{}, err
	}
	return nodeFromObject(&out, s.countersOf(name)), nil
}

// Heartbeat merges the heartbeat's fields into the status. It needs no
// resourceVersion: only the node's agent writes these fields, the merge
// leaves the registration alone, and the newest heartbeat should win.
func (s *Store) Heartbeat(ctx context.Context, name string, h apitypes.Heartbeat, now time.Time) (apitypes.Node, error) {
	patch, err := json.Marshal(map[string]any{"status": map[string]any{
		"schedulerState":  h.SchedulerState,
		"appliedRevision": int64(min(h.AppliedRevision, math.MaxInt64)),
		"workloads":       workloadsOf(h.Workloads),
		"carriers":        crdconv.Carriers(h.Carriers),
		"unmatchable":     crdconv.Unmatchable(h.Unmatchable),
		"lastHeartbeat":   metav1.NewTime(now),
	}})
	if err != nil {
		return apitypes.Node{}, err
	}
	var out v1alpha1.SchedulingNode
	err = s.rc.Patch(types.MergePatchType).Resource(v1alpha1.NodesResource.Resource).Name(name).SubResource("status").
		Body(patch).Do(ctx).Into(&out)
	if err != nil {
		return apitypes.Node{}, s.nodeError("heartbeat of", name, err)
	}
	s.cmu.Lock()
	if h.Counters != nil {
		s.counters[name] = h.Counters
	}
	s.cmu.Unlock()
	return nodeFromObject(&out, s.countersOf(name)), nil
}

func (s *Store) countersOf(name string) *apitypes.Counters {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	return s.counters[name]
}

func (s *Store) GetNode(ctx context.Context, name string) (apitypes.Node, error) {
	var o v1alpha1.SchedulingNode
	if err := s.nodeReq("GET").Name(name).Do(ctx).Into(&o); err != nil {
		return apitypes.Node{}, s.nodeError("read", name, err)
	}
	if o.Status.RegisteredAt.IsZero() {
		return apitypes.Node{}, store.ErrNotFound
	}
	return nodeFromObject(&o, s.countersOf(name)), nil
}

func (s *Store) ListNodes(ctx context.Context) ([]apitypes.Node, error) {
	var out []apitypes.Node
	var cont string
	for {
		var l v1alpha1.SchedulingNodeList
		if err := s.nodeReq("GET").VersionedParams(&metav1.ListOptions{Limit: listPage, Continue: cont}, s.pc).Do(ctx).Into(&l); err != nil {
			return nil, s.nodeError("list", "", err)
		}
		for i := range l.Items {
			if !l.Items[i].Status.RegisteredAt.IsZero() {
				out = append(out, nodeFromObject(&l.Items[i], s.countersOf(l.Items[i].Name)))
			}
		}
		if cont = l.Continue; cont == "" {
			return out, nil
		}
	}
}

func (s *Store) DeleteNode(ctx context.Context, name string) error {
	if err := s.nodeReq("DELETE").Name(name).Do(ctx).Error(); err != nil {
		return s.nodeError("delete", name, err)
	}
	s.cmu.Lock()
	delete(s.counters, name)
	s.cmu.Unlock()
	return nil
}

func (s *Store) nodeError(op, name string, err error) error {
	switch {
	case apierrors.IsNotFound(err):
		return store.ErrNotFound
	case apierrors.IsInvalid(err):
		if fe, ok := invalidToField(err, ""); ok && fe.Field == "name" {
			return fe
		}
		return fmt.Errorf("%s node %s: the Kubernetes API server refused it: %w", op, name, err)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("%s node %s: %v: grant the API's service account get, list, create, update, patch, delete on schedulingnodes.%s and their status", op, name, err, v1alpha1.GroupVersion.Group)
	}
	if name == "" {
		return fmt.Errorf("%s nodes: %w", op, err)
	}
	return fmt.Errorf("%s node %s: %w", op, name, err)
}
