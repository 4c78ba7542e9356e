// SPDX-License-Identifier: Apache-2.0

package cmd

// `swiftlane agent --source kubernetes` and `swiftlane agent cleanup`: the
// agent with Kubernetes as its control plane.

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/swiftlane/swiftlane/internal/config"
	"github.com/swiftlane/swiftlane/internal/kubeagent"
	"github.com/swiftlane/swiftlane/internal/kubeenv"
	"github.com/swiftlane/swiftlane/internal/noderuntime"
	"github.com/swiftlane/swiftlane/internal/schedext"
)

func newAgentCleanupCmd() *cobra.Command {
	var kubeconfig string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "cleanup",
		Short: "Remove what the Kubernetes agents wrote: SchedulingNodes and strategies' node status",
		Long: `Deletes every SchedulingNode and clears the per-node entries (status.nodes) of
every SchedulingStrategy; strategies themselves stay. The Helm chart runs it
as a post-delete hook, after the agent DaemonSet is gone; run it yourself
after removing the agents another way. Agents still running write their
records again at their next heartbeat.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rc, err := kubeenv.Config(kubeconfig)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			removed, err := kubeagent.Cleanup(ctx, rc)
			out := cmd.OutOrStdout()
			for _, n := range removed.Nodes {
				fmt.Fprintf(out, "deleted SchedulingNode %s\n", n)
			}
			for _, s := range removed.Statuses {
				fmt.Fprintf(out, "cleared node status of SchedulingStrategy %s\n", s)
			}
			return err
		},
	}
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig (default: the pod's service account, else $KUBECONFIG)")
	cmd.Flags().DurationVar(&timeout, "timeout", 2*time.Minute, "give up after this long")
	return cmd
}

// runKubeAgent runs the agent with Kubernetes as the control plane.
func runKubeAgent(ctx context.Context, cfg config.Config, node, kubeconfig, sysNamespace, cgRoot, cgDriver, metricsAddr string) error {
	if msgs := validation.IsDNS1123Subdomain(node); len(msgs) > 0 {
		return fmt.Errorf("--node %q is not a Kubernetes node name: %s", node, strings.Join(msgs, "; "))
	}
	res, err := kubeagent.NewResolver(cgRoot, cgDriver)
	if err != nil {
		return err
	}
	rc, err := kubeenv.Config(kubeconfig)
	if err != nil {
		return err
	}
	if sysNamespace == "" {
		sysNamespace = kubeenv.PodNamespace()
	}
	log := newLogger(cfg.Debug)
	return runAgent(ctx, cfg, log, metricsAddr, func(rt *noderuntime.Node) (noderuntime.Agent, error) {
		a, err := kubeagent.New(kubeagent.Options{
			Config: rc, Node: node, SystemNamespace: sysNamespace, Applier: rt.Applier, Cgroups: res,
			Mode: rt.Mode, Reason: rt.Reason, Version: version, Kernel: schedext.KernelRelease(),
			Interval: time.Duration(cfg.API.Interval) * time.Second, SchedulerState: rt.SchedulerState, Carriers: rt.Carriers, Log: log,
		})
		if err != nil {
			return nil, err
		}
		return a.Run, nil
	})
}
