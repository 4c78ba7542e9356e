// SPDX-License-Identifier: Apache-2.0

// Package noderuntime runs swiftlane's scheduler on a node, for `swiftlane
// run` and for the node agents (`swiftlane agent`, with the API server or
// Kubernetes as control plane). It loads and attaches the scheduler in
// kernel or user-space mode (scheduler.mode), applies strategies through one
// applier.Applier, runs automatic mode (GTP-U carriers made critical),
// loads the scheduler again when the kernel asks for it, and serves
// /metrics, /healthz and /readyz. Where the kernel cannot run the scheduler,
// an agent observes instead: it resolves and reports strategies, and
// schedules nothing.
package noderuntime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/swiftlane/swiftlane/internal/apitypes"
	"github.com/swiftlane/swiftlane/internal/applier"
	"github.com/swiftlane/swiftlane/internal/config"
	"github.com/swiftlane/swiftlane/internal/operator"
	"github.com/swiftlane/swiftlane/internal/podcgroup"
	"github.com/swiftlane/swiftlane/internal/schedext"
	"github.com/swiftlane/swiftlane/internal/strategy"
)

// ErrStopped is returned when the kernel stopped the scheduler without
// asking for a restart; Run has printed the kernel's reason.
var ErrStopped = errors.New("the kernel stopped the scheduler")

// The node's modes, with the values the agents report (their ModeSchedule
// and ModeObserve).
const (
	Schedule = "schedule" // the scheduler is attached and strategies steer it
	Observe  = "observe"  // no scheduler: strategies are resolved and reported
)

// Options configure a node's runtime.
type Options struct {
	// Config gives the tunables, scheduler.mode and scheduler.policy (run's
	// flags already applied), and automatic mode.
	Config config.Config
	// Strategies are applied before the scheduler first attaches (run's;
	// an agent sets its own through Node.Applier).
	Strategies []strategy.Strategy
	// MetricsAddr is where /metrics, /healthz and /readyz are served ("": off).
	MetricsAddr string
	// Profiling serves Go's profiles (/debug/pprof/) on MetricsAddr too:
	// where this process's own CPU time goes. Off by default: a profile
	// shows internals and takes CPU while it is taken.
	Profiling bool
	// Degrade keeps a node agent up with less rather than exiting: observe
	// mode where the kernel cannot run the scheduler, no automatic mode
	// where the GTP-U functions cannot be traced (both said in the log).
	Degrade bool
	Log     *slog.Logger
	// Out receives the status lines people and tests read ("swiftlane:
	// attached ..."); default os.Stderr.
	Out io.Writer
}

// Node is what an agent gets from the runtime. It stays valid across
// scheduler reloads; its functions are safe for concurrent use.
type Node struct {
	// Applier drives the scheduler's strategy maps (in observe mode, a
	// recorder's).
	Applier *applier.Applier
	// Mode is Schedule or Observe; Reason says why observe.
	Mode, Reason string
	// Stats reads the attached scheduler's counters (nil in observe mode).
	Stats func() (*apitypes.Counters, error)
	// SchedulerState reports sched_ext's state and the attached scheduler.
	SchedulerState func() string
	// Carriers lists the processes automatic mode prioritises (nil when
	// automatic mode is off in the config; empty until it has started).
	Carriers func() []apitypes.Carrier
}

// Agent runs beside the scheduler until ctx ends.
type Agent func(ctx context.Context) error

// Build makes the agent from the node before the scheduler first attaches,
// so the agent can hand over strategies it already knows (a state file).
type Build func(*Node) (Agent, error)

// Run runs the node until ctx ends (nil, after detaching) or the kernel
// stops the scheduler without asking for a restart (ErrStopped). build may
// be nil (swiftlane run); otherwise its agent runs from the first attach
// on, across reloads. Where the kernel cannot run the scheduler the error
// is a *schedext.UnsupportedError, unless Options.Degrade.
func Run(ctx context.Context, o Options, build Build) error {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Out == nil {
		o.Out = os.Stderr
	}
	if err := checkMode(o.Config.Scheduler); err != nil {
		return err
	}
	var set *strategy.Set
	if o.Strategies != nil {
		var err error
		if set, err = strategy.Compile(o.Strategies); err != nil {
			return fmt.Errorf("config: %w", err)
		}
		// Said before the scheduler loads, so even a start that fails
		// shows it; the Applier logs it and /metrics exports it as well.
		for _, u := range set.Unmatchable() {
			fmt.Fprintf(o.Out, "swiftlane: strategy %s matches no process here (%s): %s\n", u.Strategy, u.Reason, u.Fix)
		}
	}
	ep := &endpoint{}
	if o.MetricsAddr != "" {
		srv, err := ep.serve(o.MetricsAddr, o.Profiling, o.Out)
		if err != nil {
			return err
		}
		defer srv.Close()
	}
	if o.Degrade {
		var ue *schedext.UnsupportedError
		if err := schedext.Check(); errors.As(err, &ue) {
			return observe(ctx, o, set, ep, build, ue)
		} else if err != nil {
			return err
		}
	}
	if o.Config.Scheduler.Mode == config.ModeUserspace {
		return newRunner(o, set, ep, build, userMode(o.Config, o.Log)).run(ctx)
	}
	return newRunner(o, set, ep, build, kernelMode(o.Config, o.Log)).run(ctx)
}

// observe runs the agent with strategies resolved into a recorder.
func observe(ctx context.Context, o Options, set *strategy.Set, ep *endpoint, build Build, ue *schedext.UnsupportedError) error {
	fmt.Fprintln(o.Out, "swiftlane: observe mode (strategies are resolved and reported, nothing is scheduled):", ue)
	n := &Node{
		Mode: Observe, Reason: ue.Error(), SchedulerState: schedulerState,
		Applier: applier.New(applier.NewRecorder(), "/proc", cgroupV2Root(), o.Log),
	}
	ep.applier.Store(n.Applier)
	if o.Config.Automatic.Enabled {
		o.Log.Warn("automatic mode needs the scheduler: off in observe mode")
	}
	if set != nil {
		if err := n.Applier.SetStrategies(set); err != nil {
			o.Log.Warn("some strategies could not be resolved", "err", err)
		}
	}
	agent := Agent(func(ctx context.Context) error { <-ctx.Done(); return nil })
	if build != nil {
		var err error
		if agent, err = build(n); err != nil {
			return err
		}
	}
	ep.ready.Store(true)
	return agent(ctx)
}

// runner loads, attaches and serves the scheduler of one mode, again and
// again while the kernel asks for it.
type runner[S scheduler, T any] struct {
	o     Options
	set   *strategy.Set
	ep    *endpoint
	build Build
	m     mode[S, T]
	node  Node

	// mu guards the scheduler an agent's Stats reads.
	mu     sync.Mutex
	cur    S
	loaded bool

	// From the first attach to the end of Run.
	started   bool
	agent     Agent
	auto      atomic.Pointer[operator.Automatic] // read by heartbeats and scrapes
	cancel    context.CancelFunc
	agentDone chan struct{}
}

// maxEnableRetries bounds the loads again after a transient failure to
// enable (1+2+4+8+16 s of waiting).
const maxEnableRetries = 5

var errNotAttached = errors.New("the scheduler is not attached (it is being loaded again)")

func newRunner[S scheduler, T any](o Options, set *strategy.Set, ep *endpoint, build Build, m mode[S, T]) *runner[S, T] {
	r := &runner[S, T]{o: o, set: set, ep: ep, build: build, m: m}
	r.node = Node{Mode: Schedule, SchedulerState: schedulerState, Stats: r.counters}
	if o.Config.Automatic.Enabled {
		r.node.Carriers = func() []apitypes.Carrier {
			cs, _ := r.carriers(true) // on an error, without packets (logged)
			return cs
		}
	}
	return r
}

func (r *runner[S, T]) run(ctx context.Context) error {
	defer r.stop()
	enableRetries := 0
	for {
		exit, err := r.once(ctx)
		if err != nil {
			return err
		}
		if exit == nil { // stopped by ctx
			return nil
		}
		reportExit(r.o.Out, exit)
		if exit.WantsRestart() && ctx.Err() == nil {
			fmt.Fprintln(r.o.Out, "swiftlane: the kernel asked for a restart; reloading")
			continue
		}
		busy := exit.BusyAtEnable()
		if busy {
			tasks, _ := schedext.DeadlineTasks("/proc")
			fmt.Fprintln(r.o.Out, "swiftlane:", schedext.DeadlineHint(tasks))
		}
		// Both wait on other tasks (the allocator's caches refilled, a
		// SCHED_DEADLINE task's reservation released): a few tries, each
		// waiting twice as long, before giving up.
		if (exit.OutOfMemoryAtEnable() || busy) && enableRetries < maxEnableRetries && ctx.Err() == nil {
			wait := time.Second << enableRetries
			enableRetries++
			fmt.Fprintf(r.o.Out, "swiftlane: retrying in %v (attempt %d of %d)\n", wait, enableRetries, maxEnableRetries)
			select {
			case <-ctx.Done():
			case <-time.After(wait):
			}
			continue
		}
		return ErrStopped
	}
}

// reportExit says why the kernel stopped the scheduler, with the kernel's
// state dump when it made one (error exits): where each runnable task
// waited and for how long, which is what explains a stall after the fact.
func reportExit(w io.Writer, exit *schedext.ExitInfo) {
	fmt.Fprintln(w, "swiftlane: the kernel stopped the scheduler:", exit)
	if exit.Dump != "" {
		fmt.Fprintf(w, "swiftlane: the kernel's state at the error:\n%s\nswiftlane: end of the kernel's state\n", exit.Dump)
	}
}

// once loads, attaches and serves until ctx ends (nil exit) or the kernel
// disables the scheduler (its exit record).
func (r *runner[S, T]) once(ctx context.Context) (*schedext.ExitInfo, error) {
	s, err := r.m.load()
	if err != nil {
		return nil, err
	}
	defer func() {
		var none S
		r.setCurrent(none, false)
		s.Close()
	}()
	if err := r.fill(s); err != nil {
		return nil, err
	}
	if err := s.Attach(); err != nil {
		return nil, err
	}
	// 7.x kernels report a failure late in enabling through the exit
	// record, not the attach: the state says whether it took. Detaching
	// waits for the kernel's disable path, so the record is then complete.
	state, ops, _ := schedext.State()
	if state != "enabled" {
		if err := s.Detach(); err != nil {
			return nil, fmt.Errorf("detach after a failed enable: %w", err)
		}
		exit, err := s.Exit()
		if err == nil && exit == nil {
			err = fmt.Errorf("sched_ext state %q after attaching, and no exit record", state)
		}
		return exit, err
	}
	r.setCurrent(s, true)
	a := r.node.Applier
	what := ""
	if r.m.name != "" {
		what = ", " + r.m.name
	}
	fmt.Fprintf(r.o.Out, "swiftlane: attached (sched_ext state %s, ops %s%s); %d strategies, %d processes matched\n",
		state, ops, what, a.Strategies(), len(a.Applied()))
	r.ep.slot.set(r.m.collector(s, a))
	r.ep.ready.Store(true)
	defer func() { r.ep.ready.Store(false); r.ep.slot.set(nil) }()
	if err := r.start(ctx); err != nil {
		return nil, err
	}

	exit, err := r.m.serve(ctx, s, a)
	if ctx.Err() != nil {
		// Detaching runs the kernel's disable path, which calls our exit op
		// synchronously, so the exit record is ready when Detach returns.
		if derr := s.Detach(); derr != nil {
			return nil, fmt.Errorf("detach: %w", derr)
		}
		if why, _ := s.Exit(); why != nil {
			fmt.Fprintln(r.o.Out, "swiftlane: detached:", why)
		} else {
			fmt.Fprintln(r.o.Out, "swiftlane: detached")
		}
		return nil, nil
	}
	// The maps go with s: changes until the next load wait in a recorder.
	if rerr := a.Retarget(applier.NewRecorder()); rerr != nil {
		r.o.Log.Debug("strategies between loads", "err", rerr)
	}
	if err != nil {
		return nil, err
	}
	return exit, nil
}

// fill gives a loaded scheduler its strategies before it attaches, so
// matched tasks are fast from the start: the first time Options' and the
// agent's (built now, with the Applier), after a reload all the Applier
// holds.
func (r *runner[S, T]) fill(s S) error {
	if r.node.Applier != nil {
		if err := r.node.Applier.Retarget(s); err != nil {
			r.o.Log.Warn("some strategies could not be applied", "err", err)
		}
		return nil
	}
	r.node.Applier = applier.New(s, "/proc", cgroupV2Root(), r.o.Log)
	r.ep.applier.Store(r.node.Applier)
	if r.set != nil {
		if err := r.node.Applier.SetStrategies(r.set); err != nil {
			r.o.Log.Warn("some strategies could not be applied", "err", err)
		}
	}
	if r.build != nil {
		var err error
		if r.agent, err = r.build(&r.node); err != nil {
			return err
		}
	}
	return nil
}

// start runs automatic mode and the agent from the first attach on: both
// outlive reloads (the Applier keeps their entries for the next scheduler).
func (r *runner[S, T]) start(ctx context.Context) error {
	if r.started {
		return nil
	}
	r.started = true
	if r.o.Config.Automatic.Enabled {
		a, err := operator.StartAutomatic(r.o.Config.Automatic, r.node.Applier, r.o.Log)
		switch {
		case err == nil:
			r.auto.Store(a)
			r.ep.auto.set(carrierCollector{func() ([]apitypes.Carrier, error) { return r.carriers(false) }})
		case r.o.Degrade:
			r.o.Log.Warn("automatic mode is off on this node", "err", err)
		default:
			return err
		}
	}
	if r.agent != nil {
		actx, cancel := context.WithCancel(ctx)
		r.cancel, r.agentDone = cancel, make(chan struct{})
		go func() {
			defer close(r.agentDone)
			if err := r.agent(actx); err != nil && actx.Err() == nil {
				r.o.Log.Error("agent stopped", "err", err)
			}
		}()
		fmt.Fprintln(r.o.Out, "swiftlane: scheduler attached; agent running")
	}
	return nil
}

// stop ends what start started.
func (r *runner[S, T]) stop() {
	if r.cancel != nil {
		r.cancel()
		<-r.agentDone
	}
	if a := r.auto.Swap(nil); a != nil {
		r.ep.auto.set(nil) // returns once no scrape reads the tracer's maps
		a.Stop()
	}
}

func (r *runner[S, T]) setCurrent(s S, loaded bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cur, r.loaded = s, loaded
}

// counters reads the attached scheduler's counters, holding mu so that the
// scheduler is not closed meanwhile.
func (r *runner[S, T]) counters() (*apitypes.Counters, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.loaded {
		return nil, errNotAttached
	}
	return r.m.readCounters(r.cur)
}

// carriers lists what automatic mode prioritises, for the agents (with
// rates) and /metrics (without): nil before it has started, where it could
// not, and after it stopped. On an error reading the packet counts, the
// carriers without packets, and the error (logged here for both readers).
func (r *runner[S, T]) carriers(rates bool) ([]apitypes.Carrier, error) {
	a := r.auto.Load()
	if a == nil {
		return nil, nil
	}
	var cs []operator.Carrier
	var err error
	if rates {
		cs, err = a.Carriers()
	} else {
		cs, err = a.Packets()
	}
	if err != nil {
		r.o.Log.Debug("GTP-U packet counts", "err", err)
	}
	class := a.Operator.Class().String()
	out := make([]apitypes.Carrier, 0, len(cs))
	for _, c := range cs {
		out = append(out, apitypes.Carrier{
			PID: int(c.TGID), Command: c.Comm, Class: class, Function: c.Function,
			Since: c.Since, LastPacket: c.LastSeen, Packets: c.Packets, PacketsPerSecond: c.PacketsPerSecond,
		})
	}
	return out, err
}

// schedulerState is sched_ext's state and, when one is attached, its name.
func schedulerState() string {
	state, ops, err := schedext.State()
	if err != nil {
		return "unavailable"
	}
	if ops != "" {
		return state + " (" + ops + ")"
	}
	return state
}

// cgroupV2Root is the cgroup2 mount: /sys/fs/cgroup, or its unified
// subdirectory on hybrid hosts; "" on cgroup v1 hosts (no BPF cgroup matching).
func cgroupV2Root() string {
	l, err := podcgroup.DetectLayout(podcgroup.DefaultMountinfo, podcgroup.DefaultRoot)
	if err != nil {
		return podcgroup.DefaultRoot
	}
	return l.Unified
}
