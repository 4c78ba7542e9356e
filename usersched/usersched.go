// SPDX-License-Identifier: Apache-2.0

package usersched

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"os"
	"runtime"
	"runtime/debug"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/swiftlane/swiftlane/internal/applier"
	"github.com/swiftlane/swiftlane/internal/percpu"
	"github.com/swiftlane/swiftlane/internal/schedext"
	"github.com/swiftlane/swiftlane/internal/strategy"
	"github.com/swiftlane/swiftlane/internal/userringbuf"
)

// Class is a scheduling class from a strategy.
type Class = strategy.Class

// The classes, most urgent first.
const (
	// Critical tasks are scheduled in BPF, never waiting for user space:
	// onto an idle CPU, or ahead of everything, preempting non-critical
	// work, within a CPU budget (50 % of a CPU, 50 ms banked).
	ClassCritical = strategy.Critical
	ClassHigh     = strategy.High
	// ClassNormal is every task without a strategy.
	ClassNormal     = strategy.Normal
	ClassBackground = strategy.Background
)

// Strategy is what a process or cgroup is given: Class, SliceNs (0: the
// scheduler's), Inherit (children forked later get it too) and ID (for
// reporting).
type Strategy = applier.Entry

// ExitInfo is why the kernel disabled the scheduler: Kind, ExitCode,
// Reason and Message from the kernel's scx_exit_info. Its IsError says the
// kernel ejected the scheduler for misbehaving, WantsRestart that the
// kernel asks for it to be loaded again.
type ExitInfo = schedext.ExitInfo

// UnsupportedError is why Open or Attach cannot run the scheduler here: Err
// is one of ErrNoSchedExt, ErrBusy and ErrPrivilege (errors.Is matches
// them), What the details and Hint what to do about it.
type UnsupportedError = schedext.UnsupportedError

// The reasons in an UnsupportedError.
var (
	ErrNoSchedExt = schedext.ErrNoSchedExt // the kernel has no sched_ext
	ErrBusy       = schedext.ErrBusy       // another sched_ext scheduler is attached
	ErrPrivilege  = schedext.ErrPrivilege  // not root
)

// ProcessEvent is a process exec, fork or exit, for matching processes
// against strategies as they appear.
type ProcessEvent = schedext.Event

// EventType is what a ProcessEvent reports.
type EventType = schedext.EventType

// The process events.
const (
	EventExec      = schedext.EventExec
	EventFork      = schedext.EventFork
	EventExit      = schedext.EventExit
	EventSchedExit = schedext.EventSchedExit // the kernel is disabling the scheduler
)

// Options configure the scheduler. The zero value is usable.
type Options struct {
	// SliceNs is the slice of decisions that leave it 0 (default 2 ms).
	SliceNs uint64
	// HeartbeatNs is how often the loop runs when no work is pending, to
	// notice it should stop (default 100 ms).
	HeartbeatNs uint64
	// StallNs: when the loop has had work pending for this long without
	// answering, the BPF side dispatches the tasks waiting for it itself,
	// and new ones skip user space until it answers again (default 500 ms;
	// Stats.Rescued counts them). The kernel ejects a scheduler that leaves
	// a task waiting 30 s.
	StallNs uint64
	// QueueSize is how many runnable tasks the ring to user space holds
	// (default 4096). When it is full, tasks are dispatched in BPF directly
	// (Stats.Fallback).
	QueueSize int
	// DecisionSize is how many decisions the ring back holds (default 4096).
	DecisionSize int
	// GOMAXPROCS for the process from Open to Close: 0 means 2 (one P for
	// the loop, one for the rest of the process, including the garbage
	// collector's background worker), fewer if the machine has fewer CPUs;
	// negative leaves it alone. More Ps only add threads that compete with
	// the tasks being scheduled.
	GOMAXPROCS int
	// NoMemoryLock skips mlockall. By default Open locks all of the
	// process's memory, current and future, until Close, so the dispatch
	// path never waits for a page fault.
	NoMemoryLock bool
	// Log receives diagnostics (default: discarded).
	Log *slog.Logger
}

const (
	defaultSliceNs     = 2_000_000
	defaultHeartbeatNs = 100_000_000
	defaultStallNs     = 500_000_000
	defaultQueueSize   = 4096
)

// Scheduler is the BPF side, loaded, with the rings mapped. Methods other
// than Run are safe for concurrent use, except that Attach, Detach and Close
// must not race each other.
type Scheduler struct {
	opts   Options
	objs   userschedObjects
	ncpu   int
	links  schedext.Links // process events, struct_ops
	maps   []*userringbuf.Mapping
	shared []byte // the mmap'ed struct usr_shared
	loop   loop
	active atomic.Bool // Run is running
	undo   []func()    // process-wide settings to restore on Close

	strategies *schedext.StrategyMaps
}

func pow2Bytes(records, recordSize int) int {
	n := records * (recordSize + userringbuf.HeaderSize)
	if n < os.Getpagesize() {
		n = os.Getpagesize()
	}
	return 1 << bits.Len(uint(n-1))
}

// Open checks the kernel, then loads and verifies the BPF side and maps its
// rings. The scheduler is not active until Attach. Where the kernel cannot
// run it, the error is an *UnsupportedError.
func Open(opts Options) (*Scheduler, error) {
	if err := schedext.Check(); err != nil {
		return nil, err
	}
	if opts.SliceNs == 0 {
		opts.SliceNs = defaultSliceNs
	}
	if opts.HeartbeatNs == 0 {
		opts.HeartbeatNs = defaultHeartbeatNs
	}
	if opts.StallNs == 0 {
		opts.StallNs = defaultStallNs
	}
	if opts.QueueSize <= 0 {
		opts.QueueSize = defaultQueueSize
	}
	if opts.DecisionSize <= 0 {
		opts.DecisionSize = defaultQueueSize
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	start := time.Now()
	spec, err := schedext.OpenSpec(schedext.Objects{loadUsersched, loadUserschedV2, loadUserschedV3})
	if err != nil {
		return nil, err
	}
	opts.Log.Debug("loading user-space scheduler", "kfunc_api", spec.Level)
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, fmt.Errorf("possible CPUs: %w", err)
	}
	if ncpu > MaxCPUs {
		return nil, fmt.Errorf("%d possible CPUs: user-space mode supports up to %d", ncpu, MaxCPUs)
	}
	if err := spec.SetConstants(map[string]any{
		"slice_ns":     opts.SliceNs,
		"heartbeat_ns": opts.HeartbeatNs,
		"stall_ns":     opts.StallNs,
		"nr_cpus":      uint32(ncpu),
		"sched_tgid":   uint32(os.Getpid()),
	}); err != nil {
		return nil, err
	}
	queueBytes := pow2Bytes(opts.QueueSize, int(unsafe.Sizeof(userschedUsrTask{})))
	decisionBytes := pow2Bytes(opts.DecisionSize, int(unsafe.Sizeof(userschedUsrDecision{})))
	spec.Maps["queued"].MaxEntries = uint32(queueBytes)
	spec.Maps["dispatched"].MaxEntries = uint32(decisionBytes)
	spec.Maps["cpu_states"].MaxEntries = uint32(ncpu)

	s := &Scheduler{opts: opts, ncpu: ncpu}
	if err := spec.Load(&s.objs, "the user-space scheduler"); err != nil {
		return nil, err
	}
	s.strategies = schedext.NewStrategyMaps(s.objs.TgidStrategy, s.objs.CgroupStrategy, s.objs.NrCgroupStrategies, s.objs.StrategyGen)
	opts.Log.Debug("user-space scheduler loaded", "took", time.Since(start))
	if err := s.setup(queueBytes, decisionBytes); err != nil {
		s.Close()
		return nil, err
	}
	start = time.Now()
	if err := s.prepareProcess(); err != nil {
		s.Close()
		return nil, err
	}
	opts.Log.Debug("process prepared", "gomaxprocs", runtime.GOMAXPROCS(0), "memory_locked", !opts.NoMemoryLock, "took", time.Since(start))
	return s, nil
}

// prepareProcess sets GOMAXPROCS and locks memory. Both before Attach: once
// attached, every task on the machine waits for this process, and changing
// GOMAXPROCS stops the world while mlockall faults in every mapped page
// (the whole binary), which can take seconds.
func (s *Scheduler) prepareProcess() error {
	if n := s.opts.GOMAXPROCS; n >= 0 {
		if n == 0 {
			n = min(2, runtime.NumCPU())
		}
		old := runtime.GOMAXPROCS(n)
		s.undo = append(s.undo, func() { runtime.GOMAXPROCS(old) })
	}
	if !s.opts.NoMemoryLock {
		// Loading parsed the kernel's BTF: tens of MB of garbage that the
		// lock would otherwise fault in and pin (locked pages cannot be
		// returned to the kernel). Collect and return it first.
		debug.FreeOSMemory()
		if err := unix.Mlockall(unix.MCL_CURRENT | unix.MCL_FUTURE); err != nil {
			return fmt.Errorf("mlockall: %w (needs CAP_IPC_LOCK or a large RLIMIT_MEMLOCK; Options.NoMemoryLock skips it)", err)
		}
		s.undo = append(s.undo, func() { unix.Munlockall() })
	}
	return nil
}

func (s *Scheduler) setup(queueBytes, decisionBytes int) error {
	if err := s.links.OpenEvents(s.objs.Events, s.objs.SwlOnExec, s.objs.SwlOnFork, s.objs.SwlOnExit,
		s.objs.SwlOnCpuhpEnter, s.objs.SwlOnCpuhpExit); err != nil {
		return err
	}
	queued, qm, err := userringbuf.MapConsumer(s.objs.Queued.FD(), queueBytes)
	if err != nil {
		return fmt.Errorf("map ring queued: %w", err)
	}
	s.maps = append(s.maps, qm)
	decisions, dm, err := userringbuf.MapProducer(s.objs.Dispatched.FD(), decisionBytes)
	if err != nil {
		return fmt.Errorf("map ring dispatched: %w", err)
	}
	s.maps = append(s.maps, dm)
	if s.shared, err = unix.Mmap(s.objs.Shared.FD(), 0, os.Getpagesize(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
		return fmt.Errorf("map shared page: %w", err)
	}
	sh := (*userschedUsrShared)(unsafe.Pointer(unsafe.SliceData(s.shared)))
	s.loop = loop{queued: queued, d: Dispatcher{ring: decisions, shared: sh, ncpu: s.ncpu}}
	return nil
}

// Attach makes the user-space scheduler the kernel's scheduler. From then
// on, runnable tasks queue for Run: call it right away.
func (s *Scheduler) Attach() error { return s.links.Attach(s.objs.UserschedOps) }

// Detach hands scheduling back to the kernel's default scheduler. The kernel
// runs the scheduler's exit path synchronously: Exit reports it afterwards.
func (s *Scheduler) Detach() error { return s.links.Detach() }

// Close detaches and releases everything. Run must have returned.
func (s *Scheduler) Close() error {
	errs := []error{s.links.Close()}
	for _, m := range s.maps {
		errs = append(errs, m.Close())
	}
	s.maps = nil
	if s.shared != nil {
		errs = append(errs, unix.Munmap(s.shared))
		s.shared = nil
	}
	errs = append(errs, s.objs.Close())
	for _, f := range s.undo {
		f()
	}
	s.undo = nil
	return errors.Join(errs...)
}

// NumCPUs is the number of possible CPUs.
func (s *Scheduler) NumCPUs() int { return s.ncpu }

// Run runs the dispatch loop with the policy until ctx ends (it returns
// ctx's error) or the kernel disables the scheduler (it returns why). It
// allocates nothing per task.
func (s *Scheduler) Run(ctx context.Context, p Policy) (*ExitInfo, error) {
	if !s.active.CompareAndSwap(false, true) {
		return nil, errors.New("usersched: Run is already running")
	}
	defer s.active.Store(false)
	if err := s.loop.run(ctx, p); err != nil {
		return nil, err
	}
	return s.Exit()
}

// Exit returns why the kernel disabled the scheduler, or nil if it has not.
func (s *Scheduler) Exit() (*ExitInfo, error) { return schedext.ReadExit(s.objs.ExitInfo) }

// ReadProcessEvent blocks until the next process event. After Close or
// CloseEvents it returns an error. The scheduler being disabled shows up as
// an event of type EventSchedExit.
func (s *Scheduler) ReadProcessEvent() (ProcessEvent, error) { return s.links.ReadEvent() }

// CloseEvents makes a blocked ReadProcessEvent return.
func (s *Scheduler) CloseEvents() error { return s.links.CloseEvents() }

// Strategies: the same maps, with the same layout, as the in-kernel
// scheduler's, so an applier.Applier drives either (Scheduler is a
// applier.Target). Changes apply to tasks after Commit.

// SetProcess gives every thread of process tgid a strategy.
func (s *Scheduler) SetProcess(tgid uint32, e Strategy) error {
	return s.strategies.SetProcess(tgid, e)
}

// DeleteProcess removes a process's strategy.
func (s *Scheduler) DeleteProcess(tgid uint32) error { return s.strategies.DeleteProcess(tgid) }

// SetCgroup gives every process in cgroup id (its directory's inode number)
// and below a strategy.
func (s *Scheduler) SetCgroup(id uint64, e Strategy) error { return s.strategies.SetCgroup(id, e) }

// DeleteCgroup removes a cgroup's strategy.
func (s *Scheduler) DeleteCgroup(id uint64) error { return s.strategies.DeleteCgroup(id) }

// Commit makes every task look its strategy up again on its next enqueue.
func (s *Scheduler) Commit() error { return s.strategies.Commit() }

var _ applier.Target = (*Scheduler)(nil)

// Stats are the BPF side's counters summed over CPUs, and the Go loop's.
type Stats struct {
	Sent            uint64 // tasks queued to user space
	Applied         uint64 // decisions applied
	Stale           uint64 // decisions dropped: the task was queued again, dequeued or gone since
	Bounced         uint64 // decisions for a CPU the task may not use (sent to any CPU instead)
	Fallback        uint64 // tasks dispatched in BPF because the ring to user space was full
	Rescued         uint64 // tasks dispatched in BPF because user space stalled (Options.StallNs) or held them over 250 ms
	Critical        uint64 // critical tasks dispatched in BPF
	CriticalDirect  uint64 // ... of which woke straight onto an idle CPU
	CriticalDemoted uint64 // critical tasks over their CPU budget, sent to user space
	PreemptKicks    uint64 // CPUs preempted for a critical task
	Kthread         uint64 // kernel threads, dispatched in BPF
	RCUReader       uint64 // tasks preempted inside an RCU read-side section, queued first in BPF
	SchedThread     uint64 // the scheduler's own threads dispatched
	Heartbeats      uint64 // heartbeats that gave the scheduler's threads a turn
	IdleKicks       uint64 // heartbeat kicks of CPUs not running one of ours with tasks on their local queue (only an idle one wakes)
	EventsDropped   uint64 // process events lost (event ring full)
	RequestWalks    uint64 // walks over the requests user space holds, for ones held over 250 ms (only when one may be)
	// Round trips: from a task queued to user space to its decision applied.
	RoundTrips     uint64
	RoundTripSumNs uint64
	RoundTripMaxNs uint64
	WaitMaxNs      uint64 // longest runnable -> running wait of any task so far
	// RoundTripHist[i] counts round trips in [2^(i-1), 2^i) µs (0: < 1 µs).
	RoundTripHist RoundTripHist
	QueuedForUser int // bytes waiting in the ring to user space
	Loop          LoopStats
}

// RoundTripHist is a log2 histogram of round trips through user space.
type RoundTripHist [32]uint64

// Sub returns the round trips counted in h and not in earlier: those of the
// interval between two Stats.
func (h RoundTripHist) Sub(earlier RoundTripHist) RoundTripHist {
	for i := range h {
		h[i] -= earlier[i]
	}
	return h
}

// Quantile returns the upper bound of the bucket holding quantile q (0..1)
// of the round trips, 0 if there are none.
func (h RoundTripHist) Quantile(q float64) time.Duration {
	var total uint64
	for _, n := range h {
		total += n
	}
	if total == 0 {
		return 0
	}
	rank := uint64(q*float64(total-1)) + 1
	for i, n := range h {
		if rank <= n {
			return time.Duration(1<<i) * time.Microsecond
		}
		rank -= n
	}
	return time.Duration(1<<(len(h)-1)) * time.Microsecond
}

// Stats reads the counters.
func (s *Scheduler) Stats() (Stats, error) {
	c, err := percpu.Sum[userschedUsrStats](s.objs.Stats, uint32(0), "RttMaxNs", "WaitMaxNs")
	if err != nil {
		return Stats{}, fmt.Errorf("read stats: %w", err)
	}
	return Stats{
		Sent: c.Sent, Applied: c.Applied, Stale: c.Stale, Bounced: c.Bounced, Fallback: c.Fallback, Rescued: c.Rescued,
		Critical: c.Critical, CriticalDirect: c.CriticalDirect, CriticalDemoted: c.CriticalDemoted, PreemptKicks: c.PreemptKicks,
		Kthread: c.Kthread, RCUReader: c.RcuReader, SchedThread: c.SchedThread, Heartbeats: c.Heartbeats, IdleKicks: c.IdleKicks, EventsDropped: c.EventsDropped,
		RequestWalks: c.RequestWalks,
		RoundTrips:   c.RttCount, RoundTripSumNs: c.RttSumNs, RoundTripMaxNs: c.RttMaxNs, RoundTripHist: c.RttHist, WaitMaxNs: c.WaitMaxNs,
		QueuedForUser: s.loop.queued.Available(),
		Loop:          s.loop.loopStats(),
	}, nil
}
