// SPDX-License-Identifier: Apache-2.0

package usersched

import (
	"context"
	"math"
	"math/bits"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/swiftlane/swiftlane/internal/userringbuf"
)

// AnyCPU in a decision lets the BPF side choose: an idle CPU the task may
// use (the one it ran on first), otherwise the first CPU to free up, in
// deadline order.
const AnyCPU int32 = -1

// MaxCPUs is the most CPUs the idle-CPU view covers.
const MaxCPUs = 1024

// Task is a runnable task waiting for a decision. It is a plain value:
// policies keep copies of it.
type Task struct {
	PID  uint32
	TGID uint32
	// CPU is the CPU it last ran on.
	CPU int32
	// Weight is its scheduling weight, 1..10000; 100 is nice 0.
	Weight uint32
	// NrCPUsAllowed is the size of its affinity mask; 1 means it is pinned
	// to CPU.
	NrCPUsAllowed uint32
	// Class comes from the strategy matching its process (Normal without
	// one). Critical tasks never reach user space unless over their budget.
	Class Class
	// Vtime is its virtual runtime: the BPF side adds the CPU time it uses,
	// scaled by 100/Weight and by class (high ages 4x slower, background 8x
	// faster). A policy may change it (e.g. to bound sleep credit); the value
	// passed to Dispatch is stored and comes back on its next enqueue.
	Vtime uint64
	// ExecRuntime is the CPU time it used since it last slept, in ns
	// (capped at 100 ms).
	ExecRuntime uint64
	// SumExecRuntime is its CPU time over its life, in ns.
	SumExecRuntime uint64
	// EnqueuedAt is when it was queued for user space (CLOCK_MONOTONIC, ns).
	EnqueuedAt uint64
	// EnqFlags are the kernel's SCX_ENQ_* flags of this enqueue.
	EnqFlags uint64
	// Comm is its command name, NUL-padded.
	Comm [16]byte

	seq uint64 // matches the decision to this enqueue (stale detection)
}

// Name returns Comm as a string. It allocates: not for the dispatch path.
func (t *Task) Name() string {
	return unix.ByteSliceToString(t.Comm[:])
}

// Policy decides in which order, where and for how long tasks run. Run calls
// it from one goroutine, so it needs no locking (its own state must not be
// shared with other goroutines without it). Its methods run on the dispatch
// path: every runnable task on the machine waits for them, so they should
// neither block nor allocate per task.
type Policy interface {
	// Enqueue receives a task that became runnable. t is only valid during
	// the call: keep a copy. Every task must be dispatched eventually: a
	// runnable task that never runs makes the kernel eject the scheduler
	// (its watchdog allows 30 s).
	Enqueue(t *Task)
	// Dispatch sends decisions with d.Dispatch, in the order tasks should
	// run, until it has none left or d.Dispatch returns false (the ring to
	// the kernel is full: keep the task, Dispatch is called again soon).
	Dispatch(d *Dispatcher)
}

// CPUSet is a set of CPU numbers below MaxCPUs.
type CPUSet [MaxCPUs / 64]uint64

// Set adds cpu.
func (s *CPUSet) Set(cpu int) { s[cpu/64] |= 1 << (cpu % 64) }

// Clear removes cpu.
func (s *CPUSet) Clear(cpu int) { s[cpu/64] &^= 1 << (cpu % 64) }

// Has reports whether cpu is in the set.
func (s *CPUSet) Has(cpu int) bool {
	return cpu >= 0 && cpu < MaxCPUs && s[cpu/64]&(1<<(cpu%64)) != 0
}

// Len is the number of CPUs in the set.
func (s *CPUSet) Len() int {
	n := 0
	for _, w := range s {
		n += bits.OnesCount64(w)
	}
	return n
}

// Dispatcher sends a policy's decisions to the kernel. It is only valid
// during Policy.Dispatch.
type Dispatcher struct {
	ring     *userringbuf.Producer
	shared   *userschedUsrShared // live idle mask from BPF; nil in tests
	ncpu     int
	idle     CPUSet // idle CPUs at the start of this round, minus those picked
	next     int    // where PickIdleCPU's scan starts, rotating
	deadline uint64 // largest deadline sent, for Dispatch's deadline 0
	sent     uint64 // decisions in this round
	full     bool   // the ring was full this round
}

// NumCPUs is the number of possible CPUs.
func (d *Dispatcher) NumCPUs() int { return d.ncpu }

// IdleCPUs are the CPUs that were idle when this round began, except those
// PickIdleCPU has handed out since.
func (d *Dispatcher) IdleCPUs() CPUSet { return d.idle }

// PickIdleCPU returns an idle CPU for t among allowed (nil: all CPUs), and
// counts it as busy for the rest of the round; the CPU t last ran on is
// preferred (warm cache). It returns AnyCPU if none is idle. The kernel
// checks t's affinity when it applies the decision: a CPU t may not use
// turns the decision into AnyCPU.
func (d *Dispatcher) PickIdleCPU(t *Task, allowed *CPUSet) int32 {
	ok := func(cpu int) bool {
		return cpu >= 0 && cpu < d.ncpu && d.idle.Has(cpu) && (allowed == nil || allowed.Has(cpu))
	}
	cpu := int(t.CPU)
	if !ok(cpu) {
		cpu = -1
		for i := 0; i < d.ncpu; i++ {
			if c := (d.next + i) % d.ncpu; ok(c) {
				cpu = c
				d.next = c + 1
				break
			}
		}
	}
	if cpu < 0 {
		return AnyCPU
	}
	d.idle.Clear(cpu)
	return int32(cpu)
}

// Dispatch sends one decision: run t on cpu (or AnyCPU) for sliceNs (0: the
// scheduler's default slice). deadline orders the tasks sent to AnyCPU,
// smallest first; 0 means after every task sent so far (FIFO). t.Vtime is
// stored as the task's virtual runtime. Dispatch returns false, sending
// nothing, when the ring to the kernel is full: offer t again on the next
// call.
func (d *Dispatcher) Dispatch(t *Task, cpu int32, sliceNs, deadline uint64) bool {
	buf, err := d.ring.Reserve(int(unsafe.Sizeof(userschedUsrDecision{})))
	if err != nil {
		d.full = true
		return false
	}
	if deadline == 0 {
		deadline = d.deadline + 1
	}
	if deadline > d.deadline {
		d.deadline = deadline
	}
	dec := (*userschedUsrDecision)(unsafe.Pointer(unsafe.SliceData(buf)))
	*dec = userschedUsrDecision{Seq: t.seq, Vtime: t.Vtime, Deadline: deadline, SliceNs: sliceNs, Pid: t.PID, Cpu: cpu}
	d.ring.Submit(buf)
	d.sent++
	return true
}

func (d *Dispatcher) newRound() {
	d.sent, d.full = 0, false
	if d.shared == nil {
		return
	}
	for i := range d.idle {
		d.idle[i] = atomic.LoadUint64(&d.shared.Idle[i])
	}
}

// LoopStats count what the Go loop did.
type LoopStats struct {
	Iterations uint64 // passes over the ring (each ends with a yield)
	Tasks      uint64 // tasks handed to Policy.Enqueue
	Decisions  uint64 // decisions sent
	RingFull   uint64 // rounds that found the ring to the kernel full
}

// loop is the dispatch loop's state: preallocated, reused for every task.
type loop struct {
	queued *userringbuf.Consumer
	d      Dispatcher
	task   Task
	// held counts the tasks read and not dispatched yet. The BPF side
	// runs the loop again while it is not 0 (loop_has_work), so a task the
	// policy keeps, or could not send because the ring was full, is
	// offered to Dispatch again soon.
	held  int64
	stats struct{ iterations, tasks, decisions, full atomic.Uint64 }
}

// maxBatch bounds the tasks read before the policy dispatches, so decisions
// keep flowing while the ring refills.
const maxBatch = 1024

// step reads what the kernel queued, gives it to the policy, and lets the
// policy dispatch. It does not allocate.
func (l *loop) step(p Policy) error {
	n := uint64(0)
	for n < maxBatch {
		rec, err := l.queued.Peek()
		if err != nil {
			return err
		}
		if rec == nil {
			break
		}
		if len(rec) >= int(unsafe.Sizeof(userschedUsrTask{})) {
			decodeTask(&l.task, (*userschedUsrTask)(unsafe.Pointer(unsafe.SliceData(rec))))
			l.queued.Advance()
			p.Enqueue(&l.task)
			n++
		} else {
			l.queued.Advance() // not ours to read: only the BPF side writes this ring
		}
	}
	l.d.newRound()
	p.Dispatch(&l.d)
	l.held = max(l.held+int64(n)-int64(l.d.sent), 0) // a policy that sends a task twice must not wrap it
	if l.d.shared != nil {
		atomic.StoreUint32(&l.d.shared.Held, uint32(min(l.held, math.MaxUint32)))
	}
	l.stats.iterations.Add(1)
	l.stats.tasks.Add(n)
	l.stats.decisions.Add(l.d.sent)
	if l.d.full {
		l.stats.full.Add(1)
	}
	return nil
}

func (l *loop) loopStats() LoopStats {
	return LoopStats{
		Iterations: l.stats.iterations.Load(),
		Tasks:      l.stats.tasks.Load(),
		Decisions:  l.stats.decisions.Load(),
		RingFull:   l.stats.full.Load(),
	}
}

func decodeTask(t *Task, r *userschedUsrTask) {
	*t = Task{
		PID:            r.Pid,
		TGID:           r.Tgid,
		CPU:            r.Cpu,
		Weight:         r.Weight,
		NrCPUsAllowed:  r.NrCpusAllowed,
		Class:          Class(r.Class),
		Vtime:          r.Vtime,
		ExecRuntime:    r.ExecRuntime,
		SumExecRuntime: r.SumExecRuntime,
		EnqueuedAt:     r.EnqueuedAt,
		EnqFlags:       r.EnqFlags,
		Comm:           *(*[16]byte)(unsafe.Pointer(&r.Comm)),
		seq:            r.Seq,
	}
}

// yield gives up the CPU. The BPF side runs the loop thread again when work
// is pending (or on its heartbeat), so this is also how the loop waits: no
// wakeup, no timer, no system call beyond this one.
//
// RawSyscall, so the runtime never sees the goroutine in a system call:
// otherwise sysmon hands the loop's P to another thread while it is parked
// (after 20 µs when no P is idle), and on return the goroutine waits in the
// runtime's run queue until some other thread of this process, itself
// waiting for a CPU, picks it up. Instead, the runtime sees a goroutine
// that runs long and preempts it (a signal, then a reschedule on the same
// thread): cheap, as the goroutine is not locked to its thread.
func yield() { unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }

// run is the loop: step, yield, until ctx ends or the kernel disabled the
// scheduler. Each pass tells the BPF side which thread runs it: the
// goroutine is not locked to a thread, as a locked goroutine the runtime
// preempts (it does so to any goroutine parked in a system call for 10 ms)
// needs two other threads to run again, while an unlocked one simply
// carries on. The thread changes rarely, when the runtime moves the
// goroutine.
func (l *loop) run(ctx context.Context, p Policy) error {
	sh := l.d.shared
	defer atomic.StoreUint32(&sh.LoopTid, 0)
	done := ctx.Done()
	for {
		select {
		case <-done:
			return ctx.Err()
		default:
		}
		if atomic.LoadUint32(&sh.Exited) != 0 {
			return nil
		}
		if tid, _, _ := unix.RawSyscall(unix.SYS_GETTID, 0, 0, 0); uint32(tid) != atomic.LoadUint32(&sh.LoopTid) {
			atomic.StoreUint32(&sh.LoopTid, uint32(tid))
		}
		if err := l.step(p); err != nil {
			return err
		}
		yield()
	}
}
