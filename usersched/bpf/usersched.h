/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Messages and shared state between usersched.bpf.c and the Go package
 * usersched. bpf2go generates the Go side from these definitions (-type):
 * fixed-width fields, explicit padding, no pointers.
 */
#ifndef USERSCHED_H
#define USERSCHED_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

/* A decision's CPU meaning "an idle CPU the task may use, else the first to free up". */
#define USR_CPU_ANY (-1)
/* Most CPUs the shared idle mask covers. */
#define USR_MAX_CPUS 1024
/* Round-trip histogram buckets: up to 2^31 µs. */
#define USR_RTT_BUCKETS 32

/* A runnable task handed to user space (ring "queued", BPF -> Go). */
struct usr_task {
	__u64 seq;              /* this request's number; the decision must carry it back */
	__u64 vtime;            /* virtual runtime: CPU time scaled by weight and class */
	__u64 exec_runtime;     /* CPU time since it last slept, ns */
	__u64 sum_exec_runtime; /* CPU time over its life, ns */
	__u64 enqueued_at;      /* when it was queued (bpf_ktime_get_ns) */
	__u64 enq_flags;        /* SCX_ENQ_* the kernel passed */
	__u32 pid;
	__u32 tgid;
	__s32 cpu;              /* CPU it ran on last */
	__u32 weight;           /* 1..10000, 100 is nice 0 */
	__u32 nr_cpus_allowed;
	__u32 class;            /* enum swl_class from its strategy */
	char comm[16];
};

/* A decision from user space (user ring "dispatched", Go -> BPF). */
struct usr_decision {
	__u64 seq;      /* usr_task.seq it answers; stale if the task was queued again since */
	__u64 vtime;    /* the task's virtual runtime from now on */
	__u64 deadline; /* order among tasks sent to USR_CPU_ANY, smallest first */
	__u64 slice_ns; /* 0: the default slice */
	__u32 pid;
	__s32 cpu;      /* a CPU, or USR_CPU_ANY */
};

/* Memory-mapped by user space: live state both sides read without a syscall. */
struct usr_shared {
	__u64 idle[USR_MAX_CPUS / 64]; /* BPF: bit set while the CPU is idle */
	__u32 exited;                  /* BPF: set when the kernel disables the scheduler */
	__u32 loop_tid;                /* user space: the thread running the dispatch loop now */
	__u32 held;                    /* user space: tasks it has read and not dispatched yet */
	__u32 _pad;
};

/* Per-CPU counters; user space sums them. */
struct usr_stats {
	__u64 sent;            /* tasks queued to user space */
	__u64 applied;         /* decisions applied */
	__u64 stale;           /* decisions dropped: task queued again, dequeued or gone since */
	__u64 bounced;         /* decisions for a CPU the task may not use, sent to any CPU */
	__u64 fallback;        /* ring to user space full: dispatched here instead */
	__u64 rescued;         /* waiting for a stalled user space: dispatched here instead */
	__u64 critical;        /* critical tasks dispatched here, never seen by user space */
	__u64 critical_direct; /* ... of which woke straight onto an idle CPU */
	__u64 kthread;         /* kernel threads, dispatched here */
	__u64 rcu_reader;      /* tasks preempted inside an RCU read-side section, queued first here */
	__u64 sched_thread;    /* the user-space scheduler's own threads dispatched */
	__u64 heartbeats;      /* timer ticks that gave the scheduler's threads a turn */
	__u64 idle_kicks;      /* heartbeat kicks of CPUs not running ours, tasks on their local queue */
	__u64 preempt_kicks;   /* CPUs preempted for a critical task */
	__u64 critical_demoted;/* critical tasks over their CPU budget, sent to user space */
	__u64 events_dropped;  /* process events lost, event ring full */
	__u64 rtt_count;       /* decisions applied whose round trip was timed */
	__u64 rtt_sum_ns;      /* sum of (decision applied - task queued) */
	__u64 rtt_max_ns;      /* longest round trip on this CPU */
	__u64 rtt_hist[USR_RTT_BUCKETS]; /* bucket i: round trips in [2^(i-1), 2^i) µs; 0: < 1 µs */
	__u64 wait_max_ns;     /* longest runnable -> running wait on this CPU */
	__u64 request_walks;   /* walks over the outstanding requests (only when one may be overdue, or user space stalled) */
};

#endif /* USERSCHED_H */
