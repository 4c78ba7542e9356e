// SPDX-License-Identifier: Apache-2.0

// Package sched is the kernel-mode scheduler: it loads swiftlane's BPF
// scheduler (bpf/swiftlane.bpf.c), attaches it as the kernel's sched_ext
// scheduler, and exposes its maps: strategies in, process events and
// statistics out. What it shares with the user-space mode (usersched) is in
// internal/schedext: the kernel check, the object's API level, the strategy
// maps, the event ring and the exit record.
package sched

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"

	"github.com/swiftlane/swiftlane/internal/applier"
	"github.com/swiftlane/swiftlane/internal/schedext"
)

// Options are the scheduler's tunables, in the units the BPF side uses.
type Options struct {
	SliceNs         uint64 // scheduler.slice_ns_default
	SliceMinNs      uint64 // scheduler.slice_ns_min
	EarlyProcessing bool
	BuiltinIdle     bool
	QueuedWakeup    bool // queued_wakeup: SCX_OPS_ALLOW_QUEUED_WAKEUP where the kernel has it
	Log             *slog.Logger
}

// Scheduler is a loaded swiftlane scheduler. Methods are safe for concurrent
// use, except that Attach and Close must not race each other.
type Scheduler struct {
	objs  swiftlaneObjects
	log   *slog.Logger
	links schedext.Links // process events, struct_ops
	// The applier.Target: strategies go straight into BPF maps.
	*schedext.StrategyMaps
}

// Load checks the kernel, loads and verifies the BPF object with the given
// tunables and attaches the process-event tracepoints. The scheduler is not
// active until Attach.
func Load(opts Options) (*Scheduler, error) {
	if err := schedext.Check(); err != nil {
		return nil, err
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	spec, err := schedext.OpenSpec(schedext.Objects{loadSwiftlane, loadSwiftlaneV2, loadSwiftlaneV3})
	if err != nil {
		return nil, err
	}
	log.Debug("loading scheduler", "kfunc_api", spec.Level)
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, fmt.Errorf("possible CPUs: %w", err)
	}
	if err := spec.SetConstants(map[string]any{
		"slice_ns":         opts.SliceNs,
		"slice_min_ns":     opts.SliceMinNs,
		"early_processing": opts.EarlyProcessing,
		"builtin_idle":     opts.BuiltinIdle,
		"nr_cpus":          uint32(ncpu),
	}); err != nil {
		return nil, err
	}
	if opts.QueuedWakeup {
		set, err := spec.SetOpsFlags("SCX_OPS_ALLOW_QUEUED_WAKEUP")
		if err != nil {
			return nil, err
		}
		log.Debug("ops flags", "set", set)
	}
	spec.Maps["cpu_llc"].MaxEntries = uint32(ncpu)
	spec.Maps["cpu_states"].MaxEntries = uint32(ncpu)

	s := &Scheduler{log: log}
	if err := spec.Load(&s.objs, "the scheduler"); err != nil {
		return nil, err
	}
	s.StrategyMaps = schedext.NewStrategyMaps(s.objs.TgidStrategy, s.objs.CgroupStrategy, s.objs.NrCgroupStrategies, s.objs.StrategyGen)
	if err := s.fillLLC(ncpu); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.links.OpenEvents(s.objs.Events, s.objs.SwlOnExec, s.objs.SwlOnFork, s.objs.SwlOnExit,
		s.objs.SwlOnCpuhpEnter, s.objs.SwlOnCpuhpExit); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// fillLLC tells BPF which CPUs share a last-level cache.
func (s *Scheduler) fillLLC(ncpu int) error {
	for cpu := 0; cpu < ncpu; cpu++ {
		id := uint32(0)
		for _, idx := range []string{"index3", "index2"} {
			b, err := os.ReadFile(fmt.Sprintf("/sys/devices/system/cpu/cpu%d/cache/%s/id", cpu, idx))
			if err == nil {
				if v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32); err == nil {
					id = uint32(v)
					break
				}
			}
		}
		if err := s.objs.CpuLlc.Put(uint32(cpu), id); err != nil {
			return fmt.Errorf("cpu_llc[%d]: %w", cpu, err)
		}
	}
	return nil
}

// Attach makes swiftlane the kernel's scheduler.
func (s *Scheduler) Attach() error { return s.links.Attach(s.objs.SwiftlaneOps) }

// Detach hands scheduling back to the kernel's default scheduler. The kernel
// then reports the exit (kind "unregistered") through Events.
func (s *Scheduler) Detach() error { return s.links.Detach() }

// Close detaches and releases everything.
func (s *Scheduler) Close() error {
	return errors.Join(s.links.Close(), s.objs.Close())
}

// ReadEvent blocks until the next process event. It returns an error once
// the scheduler is closed.
func (s *Scheduler) ReadEvent() (schedext.Event, error) { return s.links.ReadEvent() }

// RunEvents feeds process events to the applier (schedext.PumpEvents)
// until the scheduler exits (it returns the kernel's exit record) or ctx
// ends (it returns ctx's error).
func (s *Scheduler) RunEvents(ctx context.Context, a *applier.Applier) (*schedext.ExitInfo, error) {
	stop := context.AfterFunc(ctx, func() { s.links.CloseEvents() })
	defer stop()
	exited, err := schedext.PumpEvents(s.ReadEvent, a, s.log)
	switch {
	case exited:
		return s.Exit()
	case ctx.Err() != nil:
		return nil, ctx.Err()
	}
	return nil, err
}

// Exit returns the exit record the BPF side kept, or nil if it has none yet.
func (s *Scheduler) Exit() (*schedext.ExitInfo, error) { return schedext.ReadExit(s.objs.ExitInfo) }
