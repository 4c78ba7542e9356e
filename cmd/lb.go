// SPDX-License-Identifier: Apache-2.0

package cmd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
	"k8s.io/client-go/kubernetes"

	"github.com/swiftlane/swiftlane/internal/lb/balancer"
	lbbpf "github.com/swiftlane/swiftlane/internal/lb/bpf"
	"github.com/swiftlane/swiftlane/internal/lb/kubesource"
	"github.com/swiftlane/swiftlane/internal/lb/metrics"
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
			switch source {
			case "file":
				if check {
					fmt.Fprintf(cmd.OutOrStdout(), "%s: %d services OK\n", configPath, len(cfg.Services))
					return nil
				}
				return runLB(cmd.Context(), log, cfg, balancer.Options{Log: log, PinDir: pinDir}, metricsAddr, interval, fileFeed(configPath, len(cfg.Services), interval, log))
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
			rc, err := kubeConfig(kubeconfig)
			if err != nil {
				return err
			}
			rc.UserAgent = "swiftlane-lb"
			cs, err := kubernetes.NewForConfig(rc)
			if err != nil {
				return fmt.Errorf("--kubeconfig: %w", err)
			}
			if node != "" {
				addrs, err := kubesource.NodeAddresses(cmd.Context(), cs, node, cfg.IPv6)
				if err != nil {
					return err
				}
				cfg.NodeAddresses = kubesource.AppendUnique(cfg.NodeAddresses, addrs...)
				cfg.NodeName = node // endpoints on this node are local (traffic policies)
				log.Info("node addresses", "node", node, "addresses", cfg.NodeAddresses)
			} else if len(cfg.NodeAddresses) == 0 {
				log.Warn("no node addresses (--node or nodeAddresses in --config): NodePorts are not served")
			}
			src, err := kubesource.New(cs, kubesource.Options{Node: cfg, ProxyName: proxyName, Debounce: debounce, Log: log})
			if err != nil {
				return err
			}
			// Deferred: pinned services keep serving until the caches are synced.
			opts := balancer.Options{Log: log, PinDir: pinDir, Deferred: true}
			return runLB(cmd.Context(), log, cfg, opts, metricsAddr, interval, func(ctx context.Context, b *balancer.Balancer) error {
				return src.Run(ctx, func(next *services.Config) error {
					ch, err := b.Apply(next)
					if err != nil {
						return err
					}
					if ch != (balancer.Changes{}) {
						log.Info("applied", "services", len(next.Services), "changes", ch.String())
					}
					return nil
				})
			})
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
	f.StringVar(&pinDir, "pin-dir", defaultPinDir, "bpffs directory that keeps sessions, services and attachments across restarts (empty: no pinning; stopping detaches and drops the sessions)")
	f.BoolVar(&cleanup, "cleanup", false, "detach the program and remove everything pinned under --pin-dir, then exit")
	f.BoolVar(&check, "check", false, "validate --config and exit")
	f.BoolVar(&debug, "debug", false, "also log why Services are skipped when that is expected (headless, ExternalName)")
	return c
}

// defaultPinDir is under the usual bpffs mount point.
const defaultPinDir = "/sys/fs/bpf/swiftlane/lb"

// lbFeed keeps the balancer's services current until ctx ends.
type lbFeed func(ctx context.Context, b *balancer.Balancer) error

// runLB loads the datapath with cfg's node settings and services, attaches
// it, and runs feed next to the periodic attach and session sweep.
func runLB(ctx context.Context, log *slog.Logger, cfg *services.Config, opts balancer.Options, metricsAddr string, interval time.Duration, feed lbFeed) error {
	b, err := balancer.Open(cfg, opts)
	if err != nil {
		return err
	}
	defer func() {
		b.Close()
		if opts.PinDir != "" {
			log.Info("stopped; the program stays attached with its pinned state (the next start takes over; --cleanup removes it)", "pin_dir", opts.PinDir)
		}
	}()
	if n, err := b.AttachInterfaces(); err != nil {
		return err
	} else if n == 0 {
		log.Warn("no interface matches yet; will keep looking", "interfaces", cfg.Interfaces)
	}
	if err := b.PinnedMapsCurrent(); err != nil {
		log.Warn("remove maps pinned by an older build", "err", err)
	}

	if metricsAddr != "" {
		reg := prometheus.NewRegistry()
		reg.MustRegister(metrics.NewCollector(b))
		ln, err := net.Listen("tcp", metricsAddr)
		if err != nil {
			return fmt.Errorf("--metrics-addr %s: %w", metricsAddr, err)
		}
		srv := &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}
		go srv.Serve(ln)
		defer srv.Close()
		log.Info("metrics", "addr", ln.Addr().String())
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	fed := make(chan error, 1)
	go func() { fed <- feed(ctx, b) }()

	housekept := make(chan struct{})
	go func() {
		defer close(housekept)
		housekeep(ctx, log, b, interval)
	}()
	log.Info("started", "interfaces", b.Attached())
	select {
	case <-ctx.Done():
		<-fed
		err = nil
	case err = <-fed:
	}
	cancel()
	<-housekept
	return err
}

// housekeep attaches to new interfaces and sweeps idle sessions every
// interval until ctx ends, on an OS thread of its own at the lowest CPU
// priority (nice 19). The sweep reads the whole session map: at 9,000 new
// connections/s, ~270,000 entries every 5 s. At normal priority it took
// its share of the CPU that also carries the node's packets and backends,
// and bench-lb's open-loop latency showed a stall of tens of ms at every
// sweep. At nice 19 it runs in the time they leave; expiry is not urgent
// (a full map evicts its least recently used entries).
func housekeep(ctx context.Context, log *slog.Logger, b *balancer.Balancer, interval time.Duration) {
	// Never unlocked: the thread exits with this goroutine, so its
	// priority never reaches another goroutine.
	runtime.LockOSThread()
	if err := lowerThreadPriority(); err != nil {
		log.Warn("housekeeping stays at normal CPU priority", "err", err)
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := b.AttachInterfaces(); err != nil {
				log.Warn("attach", "err", err)
			}
			if err := b.Sweep(); err != nil {
				log.Warn("sweep", "err", err)
			}
		}
	}
}

// lowerThreadPriority sets the calling thread (not the process: on Linux
// PRIO_PROCESS with a thread ID is that thread) to nice 19. New threads the
// Go runtime starts while a goroutine is locked to this one are cloned from
// its template thread, so they do not inherit it.
func lowerThreadPriority() error {
	return unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), 19)
}

// fileFeed re-reads the services file on SIGHUP and when its modification
// time changes; a bad file is rejected and the running services stay.
func fileFeed(path string, count int, interval time.Duration, log *slog.Logger) lbFeed {
	return func(ctx context.Context, b *balancer.Balancer) error {
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		reload := func(why string) {
			next, err := services.Load(path)
			if err != nil {
				log.Error("reload rejected; keeping the current services", "why", why, "err", err)
				return
			}
			ch, err := b.Apply(next)
			if err != nil {
				log.Error("apply", "err", err)
				return
			}
			log.Info("reloaded", "why", why, "changes", ch.String())
		}
		modTime := func() time.Time {
			st, err := os.Stat(path)
			if err != nil {
				return time.Time{}
			}
			return st.ModTime()
		}
		last := modTime()
		log.Info("serving", "file", path, "services", count)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-hup:
				reload("SIGHUP")
			case <-t.C:
				if m := modTime(); !m.Equal(last) {
					last = m
					reload("file changed")
				}
			}
		}
	}
}
