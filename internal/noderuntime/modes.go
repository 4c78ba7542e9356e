// SPDX-License-Identifier: Apache-2.0

package noderuntime

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/swiftlane/swiftlane/internal/apitypes"
	"github.com/swiftlane/swiftlane/internal/applier"
	"github.com/swiftlane/swiftlane/internal/config"
	"github.com/swiftlane/swiftlane/internal/sched"
	"github.com/swiftlane/swiftlane/internal/schedext"
	"github.com/swiftlane/swiftlane/internal/strategy"
	"github.com/swiftlane/swiftlane/usersched"
)

// scheduler is what both modes' schedulers (sched.Scheduler,
// usersched.Scheduler) offer: strategy maps, attach, detach, exit record.
type scheduler interface {
	applier.Target
	Attach() error
	Detach() error
	Exit() (*schedext.ExitInfo, error)
	Close() error
}

// mode is what differs between the kernel and the user-space mode: the
// scheduler S and its counters T.
type mode[S scheduler, T any] struct {
	name  string // for the attached line
	load  func() (S, error)
	stats func(S) (T, error)
	// export gives the counters to /metrics, counters to an agent's heartbeat.
	export   func(chan<- prometheus.Metric, T)
	counters func(T) *apitypes.Counters
	// serve runs while attached: until ctx ends (it returns ctx's error)
	// or the kernel disables the scheduler (it returns the exit record).
	serve func(ctx context.Context, s S, a *applier.Applier) (*schedext.ExitInfo, error)
}

// collector is /metrics for scheduler s.
func (m mode[S, T]) collector(s S, a *applier.Applier) prometheus.Collector {
	return statsCollector[T]{read: func() (T, error) { return m.stats(s) }, export: m.export, a: a}
}

// readCounters is an agent's heartbeat counters of scheduler s.
func (m mode[S, T]) readCounters(s S) (*apitypes.Counters, error) {
	st, err := m.stats(s)
	if err != nil {
		return nil, err
	}
	return m.counters(st), nil
}

// checkMode checks the mode and policy as resolved (config, or run's flags).
func checkMode(s config.Scheduler) error {
	switch s.Mode {
	case config.ModeKernel:
		if s.Policy != "" {
			return &strategy.FieldError{Field: "scheduler.policy", Msg: fmt.Sprintf("%s: policies are for scheduler.mode userspace; the kernel mode's policy is built in", s.Policy)}
		}
	case config.ModeUserspace:
		if s.Policy != "" && !slices.Contains(usersched.PolicyNames(), s.Policy) {
			return &strategy.FieldError{Field: "scheduler.policy", Msg: fmt.Sprintf("%q: use one of %s", s.Policy, strings.Join(usersched.PolicyNames(), ", "))}
		}
	default:
		return &strategy.FieldError{Field: "scheduler.mode", Msg: fmt.Sprintf("%q is not a mode: use %s or %s", s.Mode, config.ModeKernel, config.ModeUserspace)}
	}
	return nil
}

func kernelMode(cfg config.Config, log *slog.Logger) mode[*sched.Scheduler, sched.Stats] {
	opts := sched.Options{
		SliceNs:         cfg.Scheduler.SliceNsDefault,
		SliceMinNs:      cfg.Scheduler.SliceNsMin,
		EarlyProcessing: cfg.EarlyProcessing,
		BuiltinIdle:     cfg.BuiltinIdle,
		QueuedWakeup:    cfg.QueuedWakeup,
		Log:             log,
	}
	return mode[*sched.Scheduler, sched.Stats]{
		load:     func() (*sched.Scheduler, error) { return sched.Load(opts) },
		stats:    (*sched.Scheduler).ReadStats,
		export:   exportKernel,
		counters: kernelCounters,
		serve: func(ctx context.Context, s *sched.Scheduler, a *applier.Applier) (*schedext.ExitInfo, error) {
			prioritiseSelf(a, "/proc", log)
			return s.RunEvents(ctx, a)
		},
	}
}

func userMode(cfg config.Config, log *slog.Logger) mode[*usersched.Scheduler, usersched.Stats] {
	policy := cfg.Scheduler.Policy
	if policy == "" {
		policy = "vruntime" // scheduler.policy's documented default
	}
	if cfg.EarlyProcessing || cfg.BuiltinIdle || cfg.QueuedWakeup {
		log.Warn("early_processing, builtin_idle and queued_wakeup apply to kernel mode only; ignored")
	}
	var p usersched.Policy
	return mode[*usersched.Scheduler, usersched.Stats]{
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
		stats:    (*usersched.Scheduler).Stats,
		export:   exportUser,
		counters: userCounters,
		serve: func(ctx context.Context, s *usersched.Scheduler, a *applier.Applier) (*schedext.ExitInfo, error) {
			// Process events feed the applier on their own goroutine; the
			// dispatch loop runs on this one, and reports the exit itself.
			events := make(chan struct{})
			go func() {
				defer close(events)
				schedext.PumpEvents(s.ReadProcessEvent, a, log)
			}()
			defer func() { s.CloseEvents(); <-events }()
			return s.Run(ctx, p)
		},
	}
}
