// SPDX-License-Identifier: Apache-2.0

// Package usersched runs a Linux sched_ext scheduling policy written in Go,
// in this process, with no cgo.
//
// A small BPF scheduler (bpf/usersched.bpf.c, loaded by Open) hands every
// runnable task to this process through a ring buffer. Your Policy decides
// the order, the CPU and the slice; its decisions go back through a BPF user
// ring buffer (written here directly over shared memory) and the BPF side
// applies them. Scheduler.Run is the loop in between:
//
//	s, err := usersched.Open(usersched.Options{})  // load, lock memory
//	...
//	defer s.Close()
//	err = s.Attach()                               // now every task waits for Run
//	...
//	exit, err := s.Run(ctx, policy)                // until ctx ends or the kernel stops it
//
// # Writing a policy
//
// A Policy has two methods, called from one goroutine (no locking needed):
//
//   - Enqueue(t) receives a task that became runnable. t is only valid
//     during the call: keep a copy (a Task is a plain value). Task carries
//     the pid, thread-group id, command name, the CPU it last ran on, its
//     weight and affinity size, its strategy class, its virtual runtime
//     (CPU time scaled by weight, kept by the BPF side) and the CPU time it
//     used since it last slept.
//   - Dispatch(d) sends decisions with d.Dispatch(task, cpu, slice,
//     deadline), most urgent first. cpu is a CPU number or AnyCPU (an idle
//     CPU the task may use, else the first CPU to free up, in deadline
//     order). d.PickIdleCPU and d.IdleCPUs help place tasks yourself.
//     Dispatch returns false when the ring to the kernel is full: keep the
//     task and offer it again on the next call.
//
// Every task handed to Enqueue must be dispatched eventually. Keep the hot
// path free of allocations (preallocate, reuse), so the garbage collector
// has nothing to do: the built-in policies and the loop allocate nothing per
// task (tested with testing.AllocsPerRun).
//
// Built-in policies: Vruntime (the in-kernel scheduler's ordering: deadline
// = virtual runtime + bounded runtime since the last sleep, bounded sleep
// credit) and FIFO. examples/reservecpu gives one process a CPU of its own
// and moves everything else off it, in under 100 lines.
//
// # What does not wait for user space
//
// The BPF side schedules some tasks itself: tasks of a critical strategy
// (SetProcess, SetCgroup; Scheduler is a strategy target like the in-kernel
// scheduler), kernel threads (RCU and sched_ext's own watchdog run on them:
// they must not wait for user space), tasks that find the ring full (counted in
// Stats.Fallback), and, when the loop has had work pending for
// Options.StallNs without answering, the tasks waiting for it
// (Stats.Rescued): nothing waits for a stalled user space for long. Nor for
// a policy: a task user space holds, or that waits in a queue, longer than
// 250 ms is dispatched by the BPF side ahead of the rest (also counted in
// Stats.Rescued; internal/schedext/bpf/overdue.h). A
// decision for a task that was queued again, dequeued or has gone since is
// recognized by its sequence number and dropped (Stats.Stale).
//
// # The Go runtime
//
// This process's own threads are scheduled by the BPF side, never through
// user space: the loop's thread runs only while it has work pending (plus a
// heartbeat), and parks when it yields with nothing to do; the other threads
// (garbage collector, sysmon) go ahead of user decisions within a CPU
// budget. Open sets GOMAXPROCS to 2 and locks all memory (mlockall) before
// anything waits for this process; Options say why and how to change that.
// A storm of forced garbage collections under full load is part of the
// tests.
//
// Requirements: root, Linux >= 6.12 built with CONFIG_SCHED_CLASS_EXT
// (tested on 6.18 and 7.3). docs/userspace.md in the swiftlane repository
// describes the design, the built-in policies and the limits.
package usersched
