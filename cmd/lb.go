// SPDX-License-Identifier: Apache-2.0

package cmd

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"

	"github.com/swiftlane/swiftlane/internal/kubeenv"
	"github.com/swiftlane/swiftlane/internal/lb/balancer"
	lbbpf "github.com/swiftlane/swiftlane/internal/lb/bpf"
	"github.com/swiftlane/swiftlane/internal/lb/kubesource"
	"github.com/swiftlane/swiftlane/internal/lb/serve"
	"github.com/swiftlane/swiftlane/internal/lb/services"
)

// newLBCmd is the service load balancer (issue: conntrack-free service LB).
func newLBCmd() *cobra.Command {
	var (
		configPath, source string
		kubeconfig, node   string
		proxyName          string
		metricsAddr        string
		pinDir             string
		hostCgroup         string
		interval, debounce time.Duration
		check, debug       bool
		cleanup            bool
	)
	c := &cobra.Command{
		Use:   "lb --config FILE [--source kubernetes]",
		Short: "Conntrack-free service load balancer (eBPF DNAT/SNAT at tc)",
		Long: `Serves ClusterIP and NodePort services with a tc BPF program that keeps its
own session map instead of nf_conntrack.

--source file (default): the services come from the --config YAML, re-read
on SIGHUP and whenever it changes.

--source kubernetes: the services come from the cluster's Services and
EndpointSlices (watched with informers); --config holds only the node
settings (interfaces, ports, hairpin address, sessions), and --node adds the
Node's addresses for NodePorts. Run it in place of kube-proxy's Service NAT.

Either way only services whose entries changed are rewritten. Node settings
(ports, hairpin address, session capacity) need a restart.

The node's own connections (host-network pods, node daemons) are balanced at
the socket by cgroup programs attached to --host-cgroup (default: the root of
the cgroup v2 hierarchy; in a pod, mount the node's and name it), only in the
network namespace this command runs in; --host-cgroup= turns that off.

With --pin-dir (the default) the maps and attachments are pinned in bpffs: a
restart or upgrade takes over every open connection, and stopping the
command leaves the program serving; --cleanup removes it. See docs/lb.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if cleanup {
				if pinDir == "" {
					return errors.New("--cleanup: needs --pin-dir (the directory the load balancer pinned into)")
				}
				if err := lbbpf.Cleanup(pinDir); err != nil {
					return fmt.Errorf("--cleanup: %w", err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "detached and unpinned %s\n", pinDir)
				return nil
			}
			if configPath == "" {
				return errors.New("--config: required (the services YAML, or the node settings with --source kubernetes; see docs/lb.md)")
			}
			cfg, err := services.Load(configPath)
			if err != nil {
				return err
			}
			log := newLogger(debug)
			opts := serve.Options{Log: log, Balancer: balancer.Options{Log: log, PinDir: pinDir}, MetricsAddr: metricsAddr, Interval: interval, HostCgroup: hostCgroup}
			switch source {
			case "file":
				if check {
					fmt.Fprintf(cmd.OutOrStdout(), "%s: %d services OK\n", configPath, len(cfg.Services))
					return nil
				}
				return serve.Run(cmd.Context(), cfg, opts, serve.FileFeed(configPath, len(cfg.Services), interval, log))
			case "kubernetes":
			default:
				return fmt.Errorf("--source %q is unknown: use file (services from --config) or kubernetes (Services and EndpointSlices)", source)
			}
			if len(cfg.Services) > 0 {
				return fmt.Errorf("%s: services: not used with --source kubernetes (they come from the cluster); keep only the node settings", configPath)
			}
			if check {
				fmt.Fprintf(cmd.OutOrStdout(), "%s: node settings OK\n", configPath)
				return nil
			}
			if node == "" {
				node = os.Getenv("NODE_NAME") // a DaemonSet sets it from spec.nodeName
			}
			rc, err := kubeenv.Config(kubeconfig)
			if err != nil {
				return err
			}
			rc.UserAgent = "swiftlane-lb"
			cs, err := kubernetes.NewForConfig(rc)
			if err != nil {
				return fmt.Errorf("--kubeconfig: %w", err)
			}
			feed, err := serve.KubeFeed(cmd.Context(), cs, cfg, serve.KubeOptions{Node: node, ProxyName: proxyName, Debounce: debounce, Log: log})
			if err != nil {
				return err
			}
			// Deferred: pinned services keep serving until the caches are synced.
			opts.Balancer.Deferred = true
			return serve.Run(cmd.Context(), cfg, opts, feed)
		},
	}
	f := c.Flags()
	f.StringVar(&configPath, "config", "", "services YAML (--source file) or node settings YAML (--source kubernetes)")
	f.StringVar(&source, "source", "file", "where services come from: file (--config) or kubernetes (Services and EndpointSlices)")
	f.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig for --source kubernetes (default: the pod's service account, else $KUBECONFIG or ~/.kube/config)")
	f.StringVar(&node, "node", "", "with --source kubernetes: this Node's InternalIP/ExternalIP addresses answer NodePorts (default: $NODE_NAME)")
	f.StringVar(&proxyName, "service-proxy-name", "", "with --source kubernetes: serve only Services labelled service.kubernetes.io/service-proxy-name=NAME (default: those without the label, as kube-proxy)")
	f.DurationVar(&debounce, "debounce", kubesource.DefaultDebounce, "with --source kubernetes: collect changes this long after the first before applying them")
	f.StringVar(&metricsAddr, "metrics-addr", "127.0.0.1:9465", "Prometheus /metrics listen address (empty: off)")
	f.DurationVar(&interval, "sweep-interval", 5*time.Second, "how often to expire idle sessions, attach to new interfaces and (--source file) re-read the file")
	f.StringVar(&pinDir, "pin-dir", serve.DefaultPinDir, "bpffs directory that keeps sessions, services and attachments across restarts (empty: no pinning; stopping detaches and drops the sessions)")
	f.StringVar(&hostCgroup, "host-cgroup", serve.HostCgroupAuto, "balance the node's own connections (host-network pods, node daemons) made by processes in this cgroup v2 directory and below, at the socket; auto: the cgroup v2 root; empty: off")
	f.BoolVar(&cleanup, "cleanup", false, "detach the program and remove everything pinned under --pin-dir, then exit")
	f.BoolVar(&check, "check", false, "validate --config and exit")
	f.BoolVar(&debug, "debug", false, "also log why Services are skipped when that is expected (headless, ExternalName)")
	return c
}
