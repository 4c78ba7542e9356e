/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Types shared by the BPF scheduler and its Go loader. bpf2go generates the
 * Go side from these definitions (-type), so keep them plain: fixed-width
 * fields, explicit padding, no pointers.
 */
#ifndef SWIFTLANE_INTF_H
#define SWIFTLANE_INTF_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

/* Scheduling classes, most urgent first. Their values index the stats arrays. */
enum swl_class {
	SWL_CLASS_CRITICAL = 0,
	SWL_CLASS_HIGH = 1,
	SWL_CLASS_NORMAL = 2,
	SWL_CLASS_BACKGROUND = 3,
	SWL_NR_CLASSES = 4,
};

/* Run-queue wait histogram: bucket i counts waits in [2^(i-1), 2^i) µs, bucket 0 is < 1 µs. */
enum { SWL_HIST_BUCKETS = 28 };

enum swl_strategy_flags {
	SWL_STRAT_INHERIT = 1 << 0,   /* children forked later get the same strategy */
	SWL_STRAT_INHERITED = 1 << 1, /* entry was created in BPF at fork time */
};

/* Value of the tgid_strategy and cgroup_strategy maps. */
struct swl_strategy {
	__u32 class;    /* enum swl_class */
	__u32 flags;    /* enum swl_strategy_flags */
	__u64 slice_ns; /* 0: the scheduler's own slice */
	__u32 id;       /* index of the strategy in user space, for reporting */
	__u32 _pad;
};

/* Per-CPU counters; user space sums them over CPUs. */
struct swl_stats {
	__u64 enqueued[SWL_NR_CLASSES];
	__u64 direct_dispatch;    /* wakeup placed straight onto an idle CPU */
	__u64 shared_dispatch;    /* taken from the shared deadline queue */
	__u64 critical_dispatch;  /* taken from the critical queue */
	__u64 kthread_dispatch;   /* per-CPU kthread put on its CPU's local queue */
	__u64 overdue_dispatch;   /* waited over starvation_ns, run ahead of the deadline order */
	__u64 handoff_dispatch;   /* critical wakee queued behind its critical waker on the waker's CPU */
	__u64 preempt_kicks;      /* CPUs kicked to make room for a critical task */
	__u64 wakeup_preempts;    /* woken task preempted a later-deadline task on its CPU */
	__u64 critical_demoted;   /* critical task over its CPU budget, queued as normal */
	__u64 starvation_rescues; /* shared queue served ahead of critical work */
	__u64 events_dropped;     /* process events lost because the ring was full */
	__u64 cpu_hotplug;        /* CPU online/offline transitions seen */
	__u64 wait_count[SWL_NR_CLASSES];
	__u64 wait_sum_ns[SWL_NR_CLASSES];
	__u64 wait_hist[SWL_NR_CLASSES][SWL_HIST_BUCKETS];
	__u64 wait_max_ns;        /* longest run-queue wait seen on this CPU */
};

enum swl_event_type {
	SWL_EV_EXEC = 1,       /* a process called exec */
	SWL_EV_FORK = 2,       /* a new process (not a thread) was created */
	SWL_EV_EXIT = 3,       /* a process (thread group) exited */
	SWL_EV_SCHED_EXIT = 4, /* the kernel is disabling this scheduler; see exit_info */
};

struct swl_event {
	__u32 type; /* enum swl_event_type */
	__u32 pid;
	__u32 tgid;
	__u32 ppid; /* parent tgid, for SWL_EV_FORK */
};

/* Why the scheduler stopped, copied from the kernel's scx_exit_info. */
struct swl_exit_info {
	__s64 exit_code;
	__u32 kind;
	__u32 valid;
	char reason[128];
	char msg[1024];
};

#endif /* SWIFTLANE_INTF_H */
