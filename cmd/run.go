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
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"github.com/swiftlane/swiftlane/internal/config"
	"github.com/swiftlane/swiftlane/internal/operator"
	"github.com/swiftlane/swiftlane/internal/sched"
	"github.com/swiftlane/swiftlane/internal/strategy"
	"github.com/swiftlane/swiftlane/usersched"
)

func newRunCmd() *cobra.Command {
	var cfgPath, metricsAddr, mode, policy string
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Attach the scheduler and apply strategies until SIGINT/SIGTERM",
		Long: `Loads swiftlane's sched_ext scheduler, makes it the kernel's scheduler,
applies the strategies from the config file, and detaches cleanly on SIGINT or
SIGTERM. If the kernel ejects the scheduler, prints the kernel's reason.

--mode userspace runs the scheduling policy in this process instead (package
usersched, docs/userspace.md): the BPF side hands every runnable task to a Go
loop and applies its decisions; critical strategies are still served in BPF.
--policy picks the built-in policy: vruntime (the in-kernel ordering, in Go)
or fifo.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg := config.Default()
			if cfgPath != "" {
				var err error
				if cfg, err = config.Load(cfgPath); err != nil {
					return err
				}
			}
			log := newLogger(cfg.Debug)
			switch mode {
			case "kernel":
				if cmd.Flags().Changed("policy") {
					return fmt.Errorf("--policy %s: policies are for --mode userspace; the kernel mode's policy is built in", policy)
				}
				return runScheduler(cmd.Context(), cfg, metricsAddr, log, kernelMode(cfg, log))
			case "userspace":
				if !slices.Contains(usersched.PolicyNames(), policy) {
					return fmt.Errorf("--policy %q: use one of %s", policy, strings.Join(usersched.PolicyNames(), ", "))
				}
				if cfg.EarlyProcessing || cfg.BuiltinIdle {
					log.Warn("early_processing and builtin_idle apply to --mode kernel only; ignored")
				}
				return runScheduler(cmd.Context(), cfg, metricsAddr, log, userMode(cfg, policy, log))
			}
			return fmt.Errorf("--mode %q: use kernel or userspace", mode)
		},
	}
	cmd.Flags().StringVarP(&cfgPath, "config", "c", "", "config file (YAML); defaults apply without one")
	cmd.Flags().StringVar(&metricsAddr, "metrics-addr", "127.0.0.1:9461", "serve /metrics, /healthz and /readyz on this address (empty: off)")
	cmd.Flags().StringVar(&mode, "mode", "kernel", "kernel: the policy runs in BPF; userspace: in this process, in Go")
	cmd.Flags().StringVar(&policy, "policy", "vruntime", "user-space policy: vruntime or fifo (--mode userspace)")
	return cmd
}

func newLogger(debug bool) *slog.Logger {
	if debug {
		return newLoggerFormat("debug", "text")
	}
	return newLoggerFormat("info", "text")
}

// newLoggerFormat logs to stderr at level (debug, info, warn, error) as
// text or JSON (one object a line, for log shippers).
func newLoggerFormat(level, format string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level)) // validated by the config
	o := &slog.HandlerOptions{Level: l}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, o))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, o))
}

// loadedScheduler is what both modes' schedulers (sched.Scheduler,
// usersched.Scheduler) offer: strategy maps, attach, detach, exit record.
type loadedScheduler interface {
	strategy.Target
	Attach() error
	Detach() error
	Exit() (*sched.ExitInfo, error)
	Close() error
}

// schedMode is what differs between --mode kernel and --mode userspace.
type schedMode[S loadedScheduler] struct {
	name      string // for the attached line
	load      func() (S, error)
	collector func(S, *strategy.Applier) prometheus.Collector
	// serve runs while attached: until ctx ends (it returns ctx's error)
	// or the kernel disables the scheduler (it returns the exit record).
	serve func(ctx context.Context, s S, a *strategy.Applier) (*sched.ExitInfo, error)
}

func kernelMode(cfg config.Config, log *slog.Logger) schedMode[*sched.Scheduler] {
	opts := sched.Options{
		SliceNs:         cfg.Scheduler.SliceNsDefault,
		SliceMinNs:      cfg.Scheduler.SliceNsMin,
		EarlyProcessing: cfg.EarlyProcessing,
		BuiltinIdle:     cfg.BuiltinIdle,
		Log:             log,
	}
	return schedMode[*sched.Scheduler]{
		load: func() (*sched.Scheduler, error) { return sched.Load(opts) },
		collector: func(s *sched.Scheduler, a *strategy.Applier) prometheus.Collector {
			return sched.Collector{S: s, A: a}
		},
		serve: func(ctx context.Context, s *sched.Scheduler, a *strategy.Applier) (*sched.ExitInfo, error) {
			return s.RunEvents(ctx, a)
		},
	}
}

func userMode(cfg config.Config, policy string, log *slog.Logger) schedMode[*usersched.Scheduler] {
	var p usersched.Policy
	return schedMode[*usersched.Scheduler]{
		name: "user-space policy " + policy,
		load: func() (*usersched.Scheduler, error) {
			// A fresh policy for every load (tasks it held belong to the
			// scheduler the kernel dropped), made before Open locks memory
			// so its preallocated queue is faulted in with the rest.
			var err error
			if p, err = usersched.NewPolicy(policy, cfg.Scheduler.SliceNsDefault, cfg.Scheduler.SliceNsMin); err != nil {
				return nil, err
			}
			return usersched.Open(usersched.Options{SliceNs: cfg.Scheduler.SliceNsDefault, Log: log})
		},
		collector: func(s *usersched.Scheduler, a *strategy.Applier) prometheus.Collector {
			return userCollector{s: s, a: a}
		},
		serve: func(ctx context.Context, s *usersched.Scheduler, a *strategy.Applier) (*sched.ExitInfo, error) {
			// Process events feed the applier on their own goroutine; the
			// dispatch loop runs on this one.
			events := make(chan struct{})
			if err := a.TrackProcesses(); err != nil { // events keep the index from here on
				log.Warn("process index: strategy changes re-read /proc", "err", err)
			}
			go func() {
				defer close(events)
				for {
					ev, err := s.ReadProcessEvent()
					if errors.Is(err, os.ErrClosed) {
						return // CloseEvents, below
					}
					if err != nil {
						// One bad record must not end strategy matching for
						// the rest of the run, silently.
						log.Warn("process event", "err", err)
						continue
					}
					if err := applyEvent(a, ev); err != nil {
						log.Warn("apply strategy", "pid", ev.TGID, "err", err)
					}
				}
			}()
			defer func() { s.CloseEvents(); <-events }()
			return s.Run(ctx, p)
		},
	}
}

// applyEvent is sched.Scheduler.RunEvents's dispatch, for user-space mode,
// whose loop (Run) reports the scheduler's exit itself.
func applyEvent(a *strategy.Applier, ev sched.Event) error {
	switch ev.Type {
	case sched.EventExec:
		return a.HandleExec(ev.TGID)
	case sched.EventFork:
		return a.HandleFork(ev.TGID, ev.PPID)
	case sched.EventExit:
		a.HandleExit(ev.TGID)
	}
	return nil
}

// runScheduler serves metrics, then loads, attaches and serves the scheduler
// until a signal, reloading it when the kernel asks for a restart.
func runScheduler[S loadedScheduler](ctx context.Context, cfg config.Config, metricsAddr string, log *slog.Logger, m schedMode[S]) error {
	set, err := strategy.Compile(cfg.Strategies)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	var slot collectorSlot
	var ready atomic.Bool
	if metricsAddr != "" {
		srv, err := serveHTTP(metricsAddr, &slot, &ready)
		if err != nil {
			return err
		}
		defer srv.Close()
	}
	enableRetries := 0
	for {
		exit, err := runOnce(ctx, cfg, set, log, m, &slot, &ready)
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
		if exit.OutOfMemoryAtEnable() && enableRetries < 3 && ctx.Err() == nil {
			enableRetries++
			fmt.Fprintf(os.Stderr, "swiftlane: retrying in 1 s (attempt %d of 3)\n", enableRetries)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		return exitError{code: 1}
	}
}

// runOnce loads, attaches and serves until a signal (nil exit) or until the
// kernel ejects the scheduler (its exit record).
func runOnce[S loadedScheduler](ctx context.Context, cfg config.Config, set *strategy.Set, log *slog.Logger, m schedMode[S], slot *collectorSlot, ready *atomic.Bool) (*sched.ExitInfo, error) {
	s, err := m.load()
	if err != nil {
		return nil, err
	}
	defer s.Close()

	applier := strategy.NewApplier(s, "/proc", cgroupV2Root(), log)
	// Strategies go in before attach so matched tasks are fast from the start.
	if err := applier.SetStrategies(set); err != nil {
		log.Warn("some strategies could not be applied", "err", err)
	}
	if err := s.Attach(); err != nil {
		return nil, err
	}
	state, ops, _ := sched.State()
	what := ""
	if m.name != "" {
		what = ", " + m.name
	}
	fmt.Fprintf(os.Stderr, "swiftlane: attached (sched_ext state %s, ops %s%s); %d strategies, %d processes matched\n",
		state, ops, what, set.Len(), len(applier.Applied()))
	slot.set(m.collector(s, applier))
	ready.Store(true)
	defer func() { ready.Store(false); slot.set(nil) }()

	if cfg.Automatic.Enabled {
		a, err := operator.StartAutomatic(cfg.Automatic, applier, log)
		if err != nil {
			return nil, err
		}
		defer a.Stop()
	}

	exit, err := m.serve(ctx, s, applier)
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

// serveHTTP serves, for `swiftlane run` and `swiftlane agent`, the metrics
// of whichever scheduler slot holds, /healthz (the process answers) and
// /readyz (ready: the scheduler is attached, or the agent's observe mode
// runs). It prints the address it listens on, also in the server's Addr
// (useful with port 0).
func serveHTTP(addr string, slot *collectorSlot, ready *atomic.Bool) (*http.Server, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(slot)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr %s: %w (pick another address, or pass --metrics-addr='' to turn it off)", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready.Load() {
			http.Error(w, "scheduler not attached", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	srv := &http.Server{Addr: ln.Addr().String(), Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	fmt.Fprintf(os.Stderr, "swiftlane: metrics on http://%s/metrics\n", srv.Addr)
	return srv, nil
}

// Metrics of --mode userspace: the BPF side's paths and the Go loop's work.
var (
	descUserDispatch  = prometheus.NewDesc("swiftlane_dispatch_total", "Tasks handed to a CPU, by path: user (a user-space decision), fallback (ring to user space full), rescued (user space stalled, or a task waited over 250 ms), critical, kthread, scheduler (the user-space scheduler's own threads).", []string{"path"}, nil)
	descUserSent      = prometheus.NewDesc("swiftlane_user_queued_total", "Runnable tasks handed to the user-space policy.", nil, nil)
	descUserDecisions = prometheus.NewDesc("swiftlane_user_decisions_total", "Decisions from user space, by result: applied, stale (the task was queued again or left since), bounced (a CPU the task may not use; sent to any CPU).", []string{"result"}, nil)
	descUserRTT       = prometheus.NewDesc("swiftlane_user_round_trip_seconds_total", "Time from a task queued to user space to its decision applied, summed.", nil, nil)
	descUserRTTs      = prometheus.NewDesc("swiftlane_user_round_trips_total", "Decisions whose round trip is in swiftlane_user_round_trip_seconds_total.", nil, nil)
	descUserRTTMax    = prometheus.NewDesc("swiftlane_user_round_trip_max_seconds", "Longest round trip through user space so far.", nil, nil)
	descUserLoop      = prometheus.NewDesc("swiftlane_user_loop_iterations_total", "Passes of the Go dispatch loop.", nil, nil)
	descUserBeats     = prometheus.NewDesc("swiftlane_user_heartbeats_total", "Heartbeats that gave the scheduler's own threads a turn.", nil, nil)
)

type userCollector struct {
	s *usersched.Scheduler
	a *strategy.Applier
}

func (c userCollector) Describe(chan<- *prometheus.Desc) {} // behind collectorSlot, unchecked

func (c userCollector) Collect(ch chan<- prometheus.Metric) {
	st, err := c.s.Stats()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(descUserDispatch, err)
		return
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	counter(descUserDispatch, float64(st.Applied), "user")
	counter(descUserDispatch, float64(st.Fallback), "fallback")
	counter(descUserDispatch, float64(st.Rescued), "rescued")
	counter(descUserDispatch, float64(st.Critical), "critical")
	counter(descUserDispatch, float64(st.Kthread), "kthread")
	counter(descUserDispatch, float64(st.SchedThread), "scheduler")
	counter(descUserSent, float64(st.Sent))
	counter(descUserDecisions, float64(st.Applied), "applied")
	counter(descUserDecisions, float64(st.Stale), "stale")
	counter(descUserDecisions, float64(st.Bounced), "bounced")
	counter(descUserRTT, float64(st.RoundTripSumNs)/1e9)
	counter(descUserRTTs, float64(st.RoundTrips))
	ch <- prometheus.MustNewConstMetric(descUserRTTMax, prometheus.GaugeValue, float64(st.RoundTripMaxNs)/1e9)
	ch <- prometheus.MustNewConstMetric(sched.DescWaitMax, prometheus.GaugeValue, float64(st.WaitMaxNs)/1e9)
	counter(descUserLoop, float64(st.Loop.Iterations))
	counter(descUserBeats, float64(st.Heartbeats))
	counter(descPreemptUser, float64(st.PreemptKicks))
	counter(descDemotedUser, float64(st.CriticalDemoted))
	counter(descDroppedUser, float64(st.EventsDropped))
	var per [sched.NrClasses]int
	for _, ap := range c.a.Applied() {
		if int(ap.Class) < sched.NrClasses {
			per[ap.Class]++
		}
	}
	for i := range sched.NrClasses {
		ch <- prometheus.MustNewConstMetric(descProcessesUser, prometheus.GaugeValue, float64(per[i]), strategy.Class(i).String())
	}
}

// Same names as the kernel mode's (internal/sched/stats.go), for one dashboard.
var (
	descPreemptUser   = prometheus.NewDesc("swiftlane_preempt_kicks_total", "CPUs preempted to run a critical task.", nil, nil)
	descDemotedUser   = prometheus.NewDesc("swiftlane_critical_demoted_total", "Critical tasks queued as normal because they used up their CPU budget.", nil, nil)
	descDroppedUser   = prometheus.NewDesc("swiftlane_events_dropped_total", "Process events lost because the ring buffer was full.", nil, nil)
	descProcessesUser = prometheus.NewDesc("swiftlane_strategy_processes", "Processes a strategy currently applies to, by class.", []string{"class"}, nil)
)
