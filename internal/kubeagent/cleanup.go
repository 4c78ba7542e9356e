// SPDX-License-Identifier: Apache-2.0

package kubeagent

// Cleanup removes what the agents wrote, once they are gone: the Helm chart
// runs it as a post-delete hook. The agents themselves cannot: on uninstall
// their RBAC is deleted beside their DaemonSet, before they get SIGTERM.

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/swiftlane/swiftlane/apis/swiftlane/v1alpha1"
)

// Removed is what Cleanup removed.
type Removed struct {
	// Nodes are the SchedulingNodes deleted.
	Nodes []string
	// Statuses are the strategies (namespace/name) whose node entries were cleared.
	Statuses []string
}

// cleanupManager is the field manager of Cleanup's status writes.
const cleanupManager = "swiftlane-cleanup"

// Cleanup deletes every SchedulingNode and clears status.nodes of every
// SchedulingStrategy; specs are not touched. Run it only when no agent runs:
// a running agent writes its records again at its next heartbeat or resync.
// Objects deleted meanwhile and CRDs already removed are not errors. It goes
// on past a failed object and returns all failures joined.
func Cleanup(ctx context.Context, cfg *rest.Config) (Removed, error) {
	var out Removed
	crd, err := v1alpha1.NewRESTClient(cfg)
	if err != nil {
		return out, err
	}
	var errs []error

	var nodes v1alpha1.SchedulingNodeList
	err = crd.Get().Resource(v1alpha1.NodesResource.Resource).Do(ctx).Into(&nodes)
	switch {
	case apierrors.IsNotFound(err): // no CRD, no records
	case err != nil:
		errs = append(errs, fmt.Errorf("list SchedulingNodes: %w", err))
	}
	for _, n := range nodes.Items {
		err := crd.Delete().Resource(v1alpha1.NodesResource.Resource).Name(n.Name).Do(ctx).Error()
		switch {
		case err == nil:
			out.Nodes = append(out.Nodes, n.Name)
		case !apierrors.IsNotFound(err):
			errs = append(errs, fmt.Errorf("delete SchedulingNode %s: %w", n.Name, err))
		}
	}

	var strategies v1alpha1.SchedulingStrategyList
	err = crd.Get().Resource(v1alpha1.StrategiesResource.Resource).Do(ctx).Into(&strategies)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		errs = append(errs, fmt.Errorf("list SchedulingStrategies: %w", err))
	}
	for _, s := range strategies.Items {
		if len(s.Status.Nodes) == 0 {
			continue
		}
		// A merge patch, not an apply: the entries belong to one field
		// manager per node (swiftlane-agent-<node>), and null drops them all.
		err := crd.Patch(types.MergePatchType).Namespace(s.Namespace).Resource(v1alpha1.StrategiesResource.Resource).
			Name(s.Name).SubResource("status").Param("fieldManager", cleanupManager).
			Body([]byte(`{"status":{"nodes":null}}`)).Do(ctx).Error()
		switch {
		case err == nil:
			out.Statuses = append(out.Statuses, s.Namespace+"/"+s.Name)
		case !apierrors.IsNotFound(err):
			errs = append(errs, fmt.Errorf("clear status of strategy %s/%s: %w", s.Namespace, s.Name, err))
		}
	}
	return out, errors.Join(errs...)
}
