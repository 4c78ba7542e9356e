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
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"github.com/swiftlane/swiftlane/internal/config"
	"github.com/swiftlane/swiftlane/internal/operator"
	"github.com/swiftlane/swiftlane/internal/sched"
	"github.com/swiftlane/swiftlane/internal/strategy"
)

func newRunCmd() *cobra.Command {
	var cfgPath, metricsAddr string
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Attach the scheduler and apply strategies until SIGINT/SIGTERM",
		Long: `Loads swiftlane's sched_ext scheduler, makes it the kernel's scheduler,
applies the strategies from the config file, and detaches cleanly on SIGINT or
SIGTERM. If the kernel ejects the scheduler, prints the kernel's reason.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg := config.Default()
			if cfgPath != "" {
				var err error
				if cfg, err = config.Load(cfgPath); err != nil {
					return err
				}
			}
			return runScheduler(cmd.Context(), cfg, metricsAddr)
		},
	}
	cmd.Flags().StringVarP(&cfgPath, "config", "c", "", "config file (YAML); defaults apply without one")
	cmd.Flags().StringVar(&metricsAddr, "metrics-addr", "127.0.0.1:9461", "serve Prometheus metrics on this address (empty: off)")
	return cmd
}

func newLogger(debug bool) *slog.Logger {
	level := slog.LevelInfo
	if debug {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

func runScheduler(ctx context.Context, cfg config.Config, metricsAddr string) error {
	log := newLogger(cfg.Debug)
	set, err := strategy.Compile(cfg.Strategies)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	opts := sched.Options{
		SliceNs:         cfg.Scheduler.SliceNsDefault,
		SliceMinNs:      cfg.Scheduler.SliceNsMin,
		EarlyProcessing: cfg.EarlyProcessing,
		BuiltinIdle:     cfg.BuiltinIdle,
		Log:             log,
	}

	var current collectorSlot
	if metricsAddr != "" {
		srv, err := serveMetrics(metricsAddr, &current)
		if err != nil {
			return err
		}
		defer srv.Close()
	}

	for {
		exit, err := runOnce(ctx, opts, set, cfg.Strategies, cfg.Automatic, log, &current)
		if err != nil {
			var ue *sched.UnsupportedError
			if errors.As(err, &ue) {
				fmt.Fprintln(os.Stderr, "swiftlane: cannot run here:", ue)
				return exitError{code: 2}
			}
			return err
		}
		if exit == nil { // stopped by signal
			return nil
		}
		fmt.Fprintln(os.Stderr, "swiftlane: the kernel stopped the scheduler:", exit)
		if exit.WantsRestart() && ctx.Err() == nil {
			fmt.Fprintln(os.Stderr, "swiftlane: the kernel asked for a restart; reloading")
			continue
		}
		return exitError{code: 1}
	}
}

// runOnce loads, attaches and serves until a signal (nil exit) or until the
// kernel ejects the scheduler (its exit record).
func runOnce(ctx context.Context, opts sched.Options, set *strategy.Set, base []strategy.Strategy, auto config.Automatic, log *slog.Logger, slot *collectorSlot) (*sched.ExitInfo, error) {
	s, err := sched.Load(opts)
	if err != nil {
		return nil, err
	}
	defer s.Close()

	applier := strategy.NewApplier(s, "/proc", "/sys/fs/cgroup", log)
	// Strategies go in before attach so matched tasks are fast from the start.
	if err := applier.SetStrategies(set); err != nil {
		log.Warn("some strategies could not be applied", "err", err)
	}
	if err := s.Attach(); err != nil {
		return nil, err
	}
	state, ops, _ := sched.State()
	fmt.Fprintf(os.Stderr, "swiftlane: attached (sched_ext state %s, ops %s); %d strategies, %d processes matched\n",
		state, ops, set.Len(), len(applier.Applied()))
	slot.set(sched.Collector{S: s, A: applier})
	defer slot.set(nil)

	if auto.Enabled {
		a, err := operator.StartAutomatic(auto, applier, base, log)
		if err != nil {
			return nil, err
		}
		defer a.Stop()
	}

	exit, err := s.RunEvents(ctx, applier)
	if ctx.Err() != nil {
		// Detaching runs the kernel's disable path, which calls our exit op
		// synchronously, so the exit record is ready when Detach returns.
		if derr := s.Detach(); derr != nil {
			return nil, fmt.Errorf("detach: %w", derr)
		}
		why, _ := s.Exit()
		if why != nil {
			fmt.Fprintln(os.Stderr, "swiftlane: detached:", why)
		} else {
			fmt.Fprintln(os.Stderr, "swiftlane: detached")
		}
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return exit, nil
}

// collectorSlot lets the metrics endpoint outlive scheduler restarts: it
// serves whichever scheduler is loaded now, or nothing between loads.
type collectorSlot struct {
	mu sync.Mutex
	c  prometheus.Collector
}

func (s *collectorSlot) set(c prometheus.Collector) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.c = c
}

func (s *collectorSlot) get() prometheus.Collector {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.c
}

func (s *collectorSlot) Describe(chan<- *prometheus.Desc) {} // unchecked collector

func (s *collectorSlot) Collect(ch chan<- prometheus.Metric) {
	if c := s.get(); c != nil {
		c.Collect(ch)
	}
}

func serveMetrics(addr string, slot *collectorSlot) (*http.Server, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(slot)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr %s: %w (pick another address, or pass --metrics-addr='' to turn metrics off)", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	fmt.Fprintf(os.Stderr, "swiftlane: metrics on http://%s/metrics\n", ln.Addr())
	return srv, nil
}
