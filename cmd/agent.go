// SPDX-License-Identifier: Apache-2.0

package cmd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/swiftlane/swiftlane/internal/agent"
	"github.com/swiftlane/swiftlane/internal/apiclient"
	"github.com/swiftlane/swiftlane/internal/auth"
	"github.com/swiftlane/swiftlane/internal/config"
	"github.com/swiftlane/swiftlane/internal/kubeagent"
	"github.com/swiftlane/swiftlane/internal/noderuntime"
	"github.com/swiftlane/swiftlane/internal/podcgroup"
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
			lbl, err := parseLabels(labels)
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
			token, err := agentToken(dataDir, tokenFile, node)
			if err != nil {
				return err
			}
			if err := checkServers(servers); err != nil {
				return err
			}
			if caFile == "" && dataDir != "" && strings.HasPrefix(servers[0], "https:") {
				caFile = filepath.Join(dataDir, auth.CertFile)
			}
			tlsCfg, err := auth.ClientTLS(caFile)
			if err != nil {
				return err
			}
			if stateFile != "" {
				if err := os.MkdirAll(filepath.Dir(stateFile), 0o700); err != nil {
					return fmt.Errorf("--state-file: %w", err)
				}
			}
			log := newLogger(cfg.Debug)
			return runAgent(cmd.Context(), cfg, log, metricsAddr, func(rt *noderuntime.Node) (noderuntime.Agent, error) {
				client := apiclient.NewClient(servers[0], token, tlsCfg)
				src := func() (string, error) { return token, nil }
				if tokenFile != "" {
					// Re-read when it changes: a rotated token is used
					// from the next request on, without a restart.
					src = apiclient.TokenFile(tokenFile)
				}
				// Renewed before it expires, so short-lived tokens need
				// no restart.
				renewer := apiclient.NewRenewer(client, src, tokenFile, log)
				client = client.WithTokenSource(renewer.Token)
				var failover []*apiclient.Client
				for _, s := range servers[1:] {
					failover = append(failover, apiclient.NewClient(s, token, tlsCfg).WithTokenSource(renewer.Token))
				}
				a, err := agent.New(agent.Options{
					Client: client, Failover: failover, Node: node, Labels: lbl, Version: version,
					Kernel: kernelRelease(), Interval: time.Duration(cfg.API.Interval) * time.Second, StateFile: stateFile,
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
			rc, err := kubeConfig(kubeconfig)
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
	switch cgDriver {
	case "", string(podcgroup.Systemd), string(podcgroup.Cgroupfs):
	default:
		return fmt.Errorf("--kubelet-cgroup-driver %q is unknown: use systemd or cgroupfs (as the kubelet's --cgroup-driver)", cgDriver)
	}
	rc, err := kubeConfig(kubeconfig)
	if err != nil {
		return err
	}
	if sysNamespace == "" {
		sysNamespace = podNamespace()
	}
	layout, err := podcgroup.DetectLayout(podcgroup.DefaultMountinfo, podcgroup.DefaultRoot)
	if err != nil {
		return fmt.Errorf("cgroup layout: %w", err)
	}
	res, err := podcgroup.NewResolver(layout, cgRoot, podcgroup.Driver(cgDriver))
	if err != nil {
		return fmt.Errorf("--kubelet-cgroup-root/--kubelet-cgroup-driver: %w", err)
	}
	log := newLogger(cfg.Debug)
	return runAgent(ctx, cfg, log, metricsAddr, func(rt *noderuntime.Node) (noderuntime.Agent, error) {
		a, err := kubeagent.New(kubeagent.Options{
			Config: rc, Node: node, SystemNamespace: sysNamespace, Applier: rt.Applier, Cgroups: kubeagent.Resolver{Resolver: res},
			Mode: rt.Mode, Reason: rt.Reason, Version: version, Kernel: kernelRelease(),
			Interval: time.Duration(cfg.API.Interval) * time.Second, SchedulerState: rt.SchedulerState, Carriers: rt.Carriers, Log: log,
		})
		if err != nil {
			return nil, err
		}
		return a.Run, nil
	})
}

// podNamespace is the namespace of the pod we run in, else swiftlane-system.
func podNamespace() string {
	if b, err := os.ReadFile(podNamespaceFile); err == nil && strings.TrimSpace(string(b)) != "" {
		return strings.TrimSpace(string(b))
	}
	return defaultNamespace
}

func parseLabels(kvs []string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--labels %q: use key=value", kv)
		}
		out[k] = v
	}
	return out, nil
}

// checkServers refuses a --server list the agent could not fail over along.
func checkServers(servers []string) error {
	if len(servers) == 0 {
		return errors.New("--server is empty: give the API server's URL, e.g. https://127.0.0.1:8443")
	}
	for _, s := range servers {
		if u, err := url.Parse(s); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("--server %q is not an http(s) URL: give each replica's URL, comma-separated, e.g. https://10.0.0.1:8443,https://10.0.0.2:8443", s)
		}
	}
	return nil
}

func agentToken(dataDir, tokenFile, node string) (string, error) {
	if tokenFile != "" {
		b, err := os.ReadFile(tokenFile)
		if err != nil {
			return "", fmt.Errorf("--token-file: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	if dataDir != "" {
		a, err := auth.LoadSigner(dataDir)
		if err != nil {
			return "", err
		}
		tok, _, err := a.Issue("agent:"+node, auth.Agent, node, auth.DefaultAgentTTL)
		return tok, err
	}
	if t := os.Getenv("SWIFTLANE_TOKEN"); t != "" {
		return t, nil
	}
	return "", errors.New("no token: pass --token-file (swiftlane token create --role agent --node NAME), or --data-dir on the server's machine")
}

func kernelRelease() string {
	var uts unix.Utsname
	_ = unix.Uname(&uts)
	return unix.ByteSliceToString(uts.Release[:])
}

// runAgent runs an agent on the node runtime: beside the scheduler in the
// configured mode, or observing where the kernel cannot run it.
func runAgent(ctx context.Context, cfg config.Config, log *slog.Logger, metricsAddr string, build noderuntime.Build) error {
	return nodeExit(noderuntime.Run(ctx, noderuntime.Options{Config: cfg, MetricsAddr: metricsAddr, Degrade: true, Log: log}, build))
}
