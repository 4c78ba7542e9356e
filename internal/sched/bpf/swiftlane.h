/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The kernel-mode scheduler's own types shared with its Go loader
 * (internal/sched); what both schedulers share is in intf.h
 * (internal/schedext/bpf). bpf2go generates the Go side (-type): fixed-width
 * fields, explicit padding, no pointers.
 */
#ifndef SWIFTLANE_H
#define SWIFTLANE_H

#include "intf.h"

/* Run-queue wait histogram: bucket i counts waits in [2^(i-1), 2^i) µs, bucket 0 is < 1 µs. */
enum { SWL_HIST_BUCKETS = 28 };

/* Per-CPU counters; user space sums them over CPUs. */
struct swl_stats {
	__u64 enqueued[SWL_NR_CLASSES];
	__u64 direct_dispatch;    /* wakeup placed straight onto an idle CPU */
	__u64 shared_dispatch;    /* taken from the shared deadline queue */
	__u64 critical_dispatch;  /* taken from the critical queue */
	__u64 kthread_dispatch;   /* per-CPU kthread put on its CPU's local queue */
	__u64 overdue_dispatch;   /* waited over starvation_ns, run ahead of the deadline order */
	__u64 handoff_dispatch;   /* critical wakee queued behind its critical waker on the waker's CPU */
	__u64 rcu_reader_dispatch; /* task preempted inside an RCU read-side section, queued first */
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

#endif /* SWIFTLANE_H */
