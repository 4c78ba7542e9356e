// SPDX-License-Identifier: Apache-2.0

// Package serve runs the load balancer as `swiftlane lb` does: it opens the
// balancer, attaches it, serves its /metrics and the Services' health check
// node ports, and keeps them current next to a housekeeping thread that
// attaches to new interfaces and sweeps idle sessions. The services come
// from a Feed: the file (re-read on change and on SIGHUP) or the cluster's
// Services and EndpointSlices.
package serve

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sys/unix"

	"github.com/swiftlane/swiftlane/internal/lb/balancer"
	"github.com/swiftlane/swiftlane/internal/lb/bpf"
	"github.com/swiftlane/swiftlane/internal/lb/healthcheck"
	"github.com/swiftlane/swiftlane/internal/lb/metrics"
	"github.com/swiftlane/swiftlane/internal/lb/services"
)

// DefaultPinDir is under the usual bpffs mount point.
const DefaultPinDir = "/sys/fs/bpf/swiftlane/lb"

// Feed keeps the services current until ctx ends, handing each new Config
// to a.
type Feed func(ctx context.Context, a Applier) error

// Applier takes a new Config: Run's programs the balancer with it, then the
// health check node ports.
type Applier interface {
	Apply(*services.Config) (balancer.Changes, error)
}

// applier is Run's Applier. The health checks follow every apply: a Config
// the balancer refused leaves them answering 503 (see
// healthcheck.Server.SetProxyHealthy) until one is taken.
type applier struct {
	b   *balancer.Balancer
	hc  *healthcheck.Server
	log *slog.Logger
}

func (a applier) Apply(cfg *services.Config) (balancer.Changes, error) {
	ch, err := a.b.Apply(cfg)
	a.hc.SetProxyHealthy(err == nil)
	if err != nil {
		return ch, err
	}
	a.syncHealth(cfg)
	return ch, nil
}

func (a applier) syncHealth(cfg *services.Config) {
	if err := a.hc.Sync(cfg); err != nil {
		a.log.Error("health check node ports", "err", err)
	}
}

// Options are what Run needs besides the node settings and the feed.
type Options struct {
	Log      *slog.Logger
	Balancer balancer.Options
	// MetricsAddr is the Prometheus /metrics listen address; empty: off.
	MetricsAddr string
	// Interval is how often housekeeping attaches to new interfaces and
	// sweeps idle sessions.
	Interval time.Duration
	// HostCgroup balances the connections of this cgroup v2 directory's
	// processes (and its descendants') made in the node's network
	// namespace, at the socket: HostCgroupAuto for the whole hierarchy,
	// empty for none (the node's own connections then reach no Service).
	HostCgroup string
	// HealthHost is the address health check node ports listen on; empty:
	// every address of the node.
	HealthHost string
}

// HostCgroupAuto names the root of the cgroup v2 hierarchy, wherever it is
// mounted.
const HostCgroupAuto = "auto"

// Run loads the datapath with cfg's node settings and services, attaches
// it, and runs feed next to the periodic attach and session sweep until
// ctx ends or feed fails.
func Run(ctx context.Context, cfg *services.Config, o Options, feed Feed) error {
	log := o.Log
	b, err := balancer.Open(cfg, o.Balancer)
	if err != nil {
		return err
	}
	defer func() {
		b.Close()
		if o.Balancer.PinDir != "" {
			log.Info("stopped; the program stays attached with its pinned state (the next start takes over; --cleanup removes it)", "pin_dir", o.Balancer.PinDir)
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
	host, err := attachHost(log, b, o)
	if err != nil {
		return err
	}
	if host != nil {
		defer host.Close()
	}
	hc := healthcheck.New(healthcheck.Options{Host: o.HealthHost, Log: log})
	defer hc.Close()
	a := applier{b: b, hc: hc, log: log}
	if !o.Balancer.Deferred {
		// Open applied cfg; a deferred one is first applied by the feed.
		hc.SetProxyHealthy(true)
		a.syncHealth(cfg)
	}

	if o.MetricsAddr != "" {
		reg := prometheus.NewRegistry()
		reg.MustRegister(metrics.NewCollector(b))
		ln, err := net.Listen("tcp", o.MetricsAddr)
		if err != nil {
			return fmt.Errorf("--metrics-addr %s: %w", o.MetricsAddr, err)
		}
		srv := &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}
		go srv.Serve(ln)
		defer srv.Close()
		log.Info("metrics", "addr", ln.Addr().String())
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	fed := make(chan error, 1)
	go func() { fed <- feed(ctx, a) }()

	housekept := make(chan struct{})
	go func() {
		defer close(housekept)
		housekeep(ctx, log, b, o.Interval)
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

// attachHost attaches the socket programs for the node's own connections
// to o.HostCgroup, in this thread's network namespace (the node's), or
// with host traffic off detaches what a previous process pinned.
func attachHost(log *slog.Logger, b *balancer.Balancer, o Options) (*bpf.CgroupAttachment, error) {
	cg := o.HostCgroup
	if cg == "" {
		if o.Balancer.PinDir != "" {
			if err := bpf.DetachCgroup(o.Balancer.PinDir); err != nil {
				log.Warn("detach the pinned socket programs (host traffic is off)", "err", err)
			}
		}
		log.Info("host traffic not balanced (--host-cgroup is empty): the node's own connections reach no Service")
		return nil, nil
	}
	if cg == HostCgroupAuto {
		var err error
		if cg, err = bpf.CgroupRoot(); err != nil {
			return nil, fmt.Errorf("--host-cgroup auto: %w; name the cgroup v2 directory, or set --host-cgroup= to leave the node's own connections untranslated", err)
		}
	}
	a, err := b.Datapath().AttachCgroup(cg, o.Balancer.PinDir)
	if err != nil {
		return nil, fmt.Errorf("--host-cgroup %s: %w (set --host-cgroup= to leave the node's own connections untranslated)", cg, err)
	}
	log.Info("host traffic balanced at the socket", "cgroup", cg)
	return a, nil
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
