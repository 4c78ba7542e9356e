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
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"github.com/swiftlane/swiftlane/internal/lb/balancer"
	"github.com/swiftlane/swiftlane/internal/lb/metrics"
	"github.com/swiftlane/swiftlane/internal/lb/services"
)

// newLBCmd is the service load balancer (issue: conntrack-free service LB).
func newLBCmd() *cobra.Command {
	var (
		configPath  string
		metricsAddr string
		interval    time.Duration
		check       bool
	)
	c := &cobra.Command{
		Use:   "lb --config services.yaml",
		Short: "Conntrack-free service load balancer (eBPF DNAT/SNAT at tc)",
		Long: `Serves ClusterIP and NodePort services from a static YAML file with a tc BPF
program that keeps its own session map instead of nf_conntrack.

The file is re-read on SIGHUP and whenever it changes; only services whose
endpoints changed are rewritten. Node settings (ports, hairpin address,
session capacity) need a restart. See docs/lb.md.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if configPath == "" {
				return errors.New("--config: required (path to the services YAML, see docs/lb.md)")
			}
			cfg, err := services.Load(configPath)
			if err != nil {
				return err
			}
			if check {
				fmt.Fprintf(cmd.OutOrStdout(), "%s: %d services OK\n", configPath, len(cfg.Services))
				return nil
			}
			return runLB(cmd.Context(), configPath, cfg, metricsAddr, interval)
		},
	}
	c.Flags().StringVar(&configPath, "config", "", "services YAML file")
	c.Flags().StringVar(&metricsAddr, "metrics-addr", "127.0.0.1:9465", "Prometheus /metrics listen address (empty: off)")
	c.Flags().DurationVar(&interval, "sweep-interval", 5*time.Second, "how often to expire idle sessions, attach to new interfaces and re-read the file")
	c.Flags().BoolVar(&check, "check", false, "validate the file and exit")
	return c
}

func runLB(ctx context.Context, path string, cfg *services.Config, metricsAddr string, interval time.Duration) error {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	b, err := balancer.New(cfg, log)
	if err != nil {
		return err
	}
	defer b.Close()
	if n, err := b.AttachInterfaces(); err != nil {
		return err
	} else if n == 0 {
		log.Warn("no interface matches yet; will keep looking", "interfaces", cfg.Interfaces)
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

	t := time.NewTicker(interval)
	defer t.Stop()
	log.Info("serving", "services", len(cfg.Services), "interfaces", b.Attached())
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
			if _, err := b.AttachInterfaces(); err != nil {
				log.Warn("attach", "err", err)
			}
			if err := b.Sweep(); err != nil {
				log.Warn("sweep", "err", err)
			}
		}
	}
}
