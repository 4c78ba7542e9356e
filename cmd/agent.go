// SPDX-License-Identifier: Apache-2.0

package cmd

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/swiftlane/swiftlane/internal/agent"
	"github.com/swiftlane/swiftlane/internal/auth"
	"github.com/swiftlane/swiftlane/internal/config"
	"github.com/swiftlane/swiftlane/internal/noderuntime"
	"github.com/swiftlane/swiftlane/internal/schedext"
)

func newAgentCmd() *cobra.Command {
	var cfgPath, node, tokenFile, caFile, dataDir, stateFile string
	var source, kubeconfig, sysNamespace, kubeletCgroupRoot, kubeletCgroupDriver, metricsAddr string
	var labels, servers []string
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Node agent: the scheduler plus the control plane's strategies, pushed",
		Long: `Registers this node with the control plane, receives strategy changes by push
(a watch stream resumed from the last revision), applies them to the scheduler
and heartbeats its counters and resolved processes every api.interval seconds.
The scheduler runs as with 'swiftlane run': in the config's scheduler.mode
(kernel or userspace), with automatic mode if automatic.enabled, loaded again
when the kernel asks for a restart.
If the kernel has no sched_ext it runs in observe mode: it resolves and reports
strategies but schedules nothing. With the server down it keeps applying the
last strategies it knew (also across restarts, from --state-file).

With --source kubernetes (the Helm chart's DaemonSet) Kubernetes is the
control plane instead: the agent watches SchedulingStrategies and the pods
bound to this node, gives the pods' cgroups to the scheduler, and writes
what it applied to each strategy's status and to its SchedulingNode.

On the server's machine, --data-dir mints the agent's own token with the
server's key and trusts its generated certificate; elsewhere pass --token-file
(from 'swiftlane token create --role agent --node NAME') and --ca-file.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cmdKind := config.Agent
			if source == "kubernetes" {
				cmdKind = config.KubeAgent
			}
			cfg, err := loadConfig(cfgPath, cmdKind)
			if err != nil {
				return err
			}
			if !cmd.Flags().Changed("server") {
				servers = []string{cfg.API.URL}
			}
			lbl, err := agent.ParseLabels(labels)
			if err != nil {
				return err
			}
			if node == "" {
				node = os.Getenv("NODE_NAME") // the chart sets it from spec.nodeName
			}
			if node == "" {
				h, _ := os.Hostname()
				node = strings.ToLower(h)
			}
			switch source {
			case "api":
			case "kubernetes":
				return runKubeAgent(cmd.Context(), cfg, node, kubeconfig, sysNamespace, kubeletCgroupRoot, kubeletCgroupDriver, metricsAddr)
			default:
				return fmt.Errorf("--source %q is unknown: use api (the swiftlane API server) or kubernetes (SchedulingStrategy objects)", source)
			}
			if !auth.ValidNodeName(node) {
				return fmt.Errorf("--node %q is not a node name: use lower-case letters, digits, '.', '_' or '-'", node)
			}
			log := newLogger(cfg.Debug)
			client, failover, renewer, err := agent.Connect(agent.Servers{URLs: servers, Node: node, TokenFile: tokenFile, DataDir: dataDir, CAFile: caFile, Log: log})
			if err != nil {
				return err
			}
			if stateFile != "" {
				if err := os.MkdirAll(filepath.Dir(stateFile), 0o700); err != nil {
					return fmt.Errorf("--state-file: %w", err)
				}
			}
			return runAgent(cmd.Context(), cfg, log, metricsAddr, func(rt *noderuntime.Node) (noderuntime.Agent, error) {
				a, err := agent.New(agent.Options{
					Client: client, Failover: failover, Node: node, Labels: lbl, Version: version,
					Kernel: schedext.KernelRelease(), Interval: time.Duration(cfg.API.Interval) * time.Second, StateFile: stateFile,
					Log: log, Applier: rt.Applier, Mode: rt.Mode, Reason: rt.Reason, Stats: rt.Stats, SchedulerState: rt.SchedulerState,
					Carriers: rt.Carriers,
				}) // applies the state file's strategies before attach
				if err != nil {
					return nil, err
				}
				return func(ctx context.Context) error {
					go renewer.Run(ctx)
					return a.Run(ctx)
				}, nil
			})
		},
	}
	f := cmd.Flags()
	f.StringVarP(&cfgPath, "config", "c", "", "config file (scheduler tunables and mode, automatic mode, api.url, api.interval)")
	f.StringSliceVar(&servers, "server", []string{config.DefaultAPIURL}, "control-plane URL (default: api.url from --config if given); several, comma-separated, are API replicas on one Kubernetes store: the agent moves to the next when one fails")
	f.StringVar(&node, "node", "", "node name (default: the host name)")
	f.StringSliceVar(&labels, "labels", nil, "node labels, k=v,... (strategies' node_selector matches them)")
	f.StringVar(&tokenFile, "token-file", "", "file holding this node's agent token (re-read when it changes: rotate by replacing it)")
	f.StringVar(&caFile, "ca-file", "", "PEM certificate(s) to trust for the server (its generated tls.crt)")
	f.StringVar(&dataDir, "data-dir", "", "the server's data directory, when on the same machine (mints the token, trusts tls.crt)")
	f.StringVar(&stateFile, "state-file", "/var/lib/swiftlane-agent/state.json", "last known strategies (empty: memory only)")
	f.StringVar(&metricsAddr, "metrics-addr", "127.0.0.1:9461", "serve /metrics, /healthz and /readyz on this address (empty: off)")
	f.StringVar(&source, "source", "api", "where strategies come from: api (--server) or kubernetes (SchedulingStrategy objects)")
	f.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig for --source kubernetes (default: the pod's service account, else $KUBECONFIG)")
	f.StringVar(&sysNamespace, "system-namespace", "", "namespace whose strategies may select pods of other namespaces (default: the pod's namespace, else swiftlane-system)")
	f.StringVar(&kubeletCgroupRoot, "kubelet-cgroup-root", "/", "the kubelet's --cgroup-root")
	f.StringVar(&kubeletCgroupDriver, "kubelet-cgroup-driver", "", "the kubelet's --cgroup-driver: systemd or cgroupfs (default: try both)")
	cmd.AddCommand(newAgentCleanupCmd())
	return cmd
}

// runAgent runs an agent on the node runtime: beside the scheduler in the
// configured mode, or observing where the kernel cannot run it.
func runAgent(ctx context.Context, cfg config.Config, log *slog.Logger, metricsAddr string, build noderuntime.Build) error {
	return nodeExit(noderuntime.Run(ctx, noderuntime.Options{Config: cfg, MetricsAddr: metricsAddr, Degrade: true, Log: log}, build))
}
