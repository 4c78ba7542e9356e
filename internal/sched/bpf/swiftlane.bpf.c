// SPDX-License-Identifier: GPL-2.0-only
//go:build ignore

/*
 * swiftlane: a sched_ext scheduler with a fast lane for latency-critical
 * network functions.
 *
 * Ordering. Every task has a virtual runtime (task_ctx.vruntime) that advances
 * with the CPU time it uses, scaled down by its weight and class. It is queued
 * by deadline = vruntime + CPU time used since it last slept, so tasks that
 * sleep often (packet loops, request handlers) are served before CPU hogs.
 * Sleeping earns credit only up to a bound (slice_lag), so a task that slept
 * for a minute does not monopolise the CPUs when it wakes.
 *
 * Queues. A wakeup that finds an idle CPU goes straight onto that CPU's local
 * queue. Everything else waits in one of two shared queues ordered by
 * deadline: the critical queue, always served first, and the shared queue.
 * Whatever the accounting says, no task waits in the shared queue much
 * longer than starvation_ns: see overdue.h.
 * Per-CPU kthreads (ksoftirqd, per-CPU workers) go to their CPU's local queue
 * directly so softirq and network work is never stuck behind user tasks.
 *
 * Strategies. User space maps thread-group ids and cgroup ids to a class and
 * an optional slice, and learns of new processes from tracepoints, the same
 * way in both modes (schedext.h). A critical task may preempt a non-critical
 * one, but only within a CPU budget (critical.h).
 *
 * Cgroup weights. The weight a task's vruntime is scaled by follows the cpu
 * cgroup hierarchy's cpu.weight the way the kernel's fair class divides CPU
 * time: see cgroup_weight.h.
 *
 * The headers both modes share are in internal/schedext/bpf (its README
 * lists them); this directory has only this scheduler's own.
 */
#include "common.h" /* kernel types, libbpf, intf.h, compat.h */
#include "swiftlane.h"

/* Limits */
/* Longest runtime-since-sleep that counts towards a deadline, so one long burst cannot push a task back forever. */
#define EXEC_RUNTIME_MAX (100 * NSEC_PER_MSEC)
/* Farthest a task's deadline may lie ahead of the current vtime (virtual ns): bounds every wait. */
#define DEADLINE_AHEAD_MAX (100 * NSEC_PER_MSEC)
/* Farthest its vruntime may: the most debt a task carries (see task_deadline()). */
#define VRUNTIME_AHEAD_MAX (10 * DEADLINE_AHEAD_MAX)
/*
 * Most a burst may push a deadline past the vruntime (virtual ns). Well under
 * DEADLINE_AHEAD_MAX, so CPU hogs, whose bursts all reach it, stay ordered by
 * vruntime (that is, by weight) instead of all meeting the same bound.
 */
#define BURST_AHEAD_MAX (50 * NSEC_PER_MSEC)

/* Renumbered between kernels, like ENQ_WAKEUP (common.h). */
#define ENQ_PREEMPT bpf_core_enum_value(enum scx_enq_flags, SCX_ENQ_PREEMPT)

/* Our dispatch queues (ids below the kernel's built-in range). */
#define DSQ_CRITICAL 1
#define DSQ_SHARED 2

/* Every queue a task can wait in, for the overdue walk and a CPU going offline. */
static const u64 swl_queues[] = {DSQ_CRITICAL, DSQ_SHARED};

/*
 * Tunables, set by the loader before the object is loaded (see
 * internal/sched/options.go for the defaults and the config keys).
 */
const volatile u64 slice_ns = 2 * NSEC_PER_MSEC;        /* scheduler.slice_ns_default */
const volatile u64 slice_min_ns = 500 * NSEC_PER_USEC;  /* scheduler.slice_ns_min */
const volatile u64 slice_lag_ns = 20 * NSEC_PER_MSEC;   /* most sleep credit a task keeps */
const volatile u64 starvation_ns = 100 * NSEC_PER_MSEC; /* longest the shared queue, or a task in it, waits */
const volatile bool early_processing = false;           /* per-CPU kthreads preempt the running task */
const volatile bool builtin_idle = false;               /* use the kernel's idle-CPU selection */
const volatile u32 nr_cpus = 1;                         /* possible CPUs */

#include "critical.h" /* the critical class's CPU budget, and its tunables */
#include "overdue.h"

/* Queue depths as last seen by a dispatching CPU, for monitoring. */
u64 queued_critical, queued_shared;

static u64 vtime_now;         /* vruntime of the most recently started task */
static u64 last_shared_serve; /* when a CPU last took from (or found empty) the shared queue */

/* Statistics, one copy per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct swl_stats);
} stats SEC(".maps");

static struct swl_stats *lookup_stats(void)
{
	u32 zero = 0;

	return bpf_map_lookup_elem(&stats, &zero);
}

#define STAT_ADD(field, n)                            \
	do {                                          \
		struct swl_stats *__s = lookup_stats(); \
		if (__s)                              \
			__s->field += (n);            \
	} while (0)
#define STAT_INC(field) STAT_ADD(field, 1)

/* Last-level-cache id of each CPU, filled by user space from sysfs before attach. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1); /* resized to the number of possible CPUs by the loader */
	__type(key, u32);
	__type(value, u32);
} cpu_llc SEC(".maps");

/* What each CPU runs now, to find a CPU a critical task may preempt. */
struct cpu_state {
	u64 deadline;   /* deadline of the running task */
	u64 started_at; /* when it got the CPU */
	u32 class;    /* class of the running task */
	u32 busy;     /* 0 once the CPU went idle */
	struct overdue_state overdue;
};

/*
 * Per-task scheduling state. The vruntime lives here, not in
 * p->scx.dsq_vtime: the kernel sets that to the key a task is queued with,
 * its deadline, which would fold every burst into the vruntime.
 */
struct task_ctx {
	u64 vruntime;     /* virtual runtime (see "Ordering") */
	u64 enq_at;       /* when it became runnable; 0 while it runs */
	u64 started_at;   /* when it last got a CPU */
	u64 exec_runtime; /* CPU time since it last slept */
	u64 last_burst;   /* CPU time between its last two sleeps */
	s64 crit_budget;  /* critical-class CPU time it may still use, ns */
	u64 budget_at;    /* last budget refill */
	u64 strat_gen;    /* strategy_gen + 1 when class and slice were resolved */
	u64 strat_slice;  /* slice from its strategy, 0 for the default */
	u64 deadline;     /* deadline it was queued with */
	u64 vweight;      /* weight its vruntime is scaled by (task_vweight()) */
	u64 cg_id;        /* cpu cgroup its weight was added to while runnable */
	u32 cg_weight;    /* weight added there, 0 while not runnable */
	u32 cg_level;     /* that cgroup's level, 0 for the root */
	u32 class;        /* class from its strategy */
	u32 run_class;    /* class it was queued with this time */
	u32 yielded;      /* it called sched_yield() in this run */
	u32 sync_wake;    /* this wakeup came from a task about to sleep */
	u32 rcu_reader;   /* queued preempted inside an RCU read-side section (rcu_reader()) */
};

#include "schedext.h"      /* task and CPU state, strategies, critical class, process events, exit record */
#include "overdue_cpu.h"
#include "cgroup_weight.h" /* task_vweight() and the cgroup ops */

static bool time_before(u64 a, u64 b)
{
	return (s64)(a - b) < 0;
}

static bool is_percpu_kthread(const struct task_struct *p)
{
	return (p->flags & PF_KTHREAD) && p->nr_cpus_allowed == 1;
}

/* Weight multiplier of a class, in 1/8ths. */
static u64 class_weight8(u32 class)
{
	switch (class) {
	case SWL_CLASS_CRITICAL:
	case SWL_CLASS_HIGH:
		return 32; /* 4x */
	case SWL_CLASS_BACKGROUND:
		return 1; /* 1/8 */
	default:
		return 8;
	}
}

/* Scale CPU time to virtual time: heavier tasks and better classes age slower. */
static u64 scale_inverse(u64 delta, u64 vweight, u32 class)
{
	u64 w = vweight * class_weight8(class);

	return delta * VWEIGHT_DFL * 8 / (w ? w : 1);
}

/* Number of waiting tasks per CPU, to shrink the slice when the queues grow. */
static u64 task_slice(struct task_ctx *tctx)
{
	u64 waiting, s;

	if (tctx->strat_slice)
		return tctx->strat_slice;

	waiting = scx_bpf_dsq_nr_queued(DSQ_SHARED) + scx_bpf_dsq_nr_queued(DSQ_CRITICAL);
	s = slice_ns / (waiting / (nr_cpus ? nr_cpus : 1) + 1);
	return s < slice_min_ns ? slice_min_ns : s;
}

static u64 task_deadline(struct task_struct *p, struct task_ctx *tctx, u32 class)
{
	u64 lag = scale_inverse(slice_lag_ns, VWEIGHT_DFL, class);
	u64 vmin = vtime_now - lag, vmax = vtime_now + DEADLINE_AHEAD_MAX;
	u64 burst, dl;

	/*
	 * Bounded credit. The bound is the same virtual time for every weight
	 * (only the class scales it), which is the same part of what each task
	 * is entitled to. It holds for every queueing, not only wakeups: a task
	 * that never sleeps but is charged little for the CPU it holds (one
	 * that yields or changes its affinity in a loop spends its time in the
	 * scheduler and in the migration thread, not in its own runs) would
	 * otherwise fall ever further behind, and everything that wakes up
	 * would queue behind it for seconds: the kernel's watchdog ejected the
	 * scheduler under stress-ng's yield, affinity and fork stressors.
	 */
	if (time_before(tctx->vruntime, vmin))
		tctx->vruntime = vmin;
	/*
	 * Bounded debt. A low-weight task that ran a lot (khugepaged at nice 19
	 * ages ~75x faster than a default task) would otherwise queue behind
	 * every CPU hog for seconds; preempted inside an RCU read-side section,
	 * that stalls RCU for the whole machine. So no deadline lies more than
	 * DEADLINE_AHEAD_MAX ahead: every wait is bounded. The debt itself stays
	 * in the vruntime (up to VRUNTIME_AHEAD_MAX, which forgives what a task
	 * ran alone), so a task that overran, or was charged for a stalled vCPU,
	 * pays it back by running at that horizon until the others catch up,
	 * instead of having it forgiven.
	 */
	if (time_before(vtime_now + VRUNTIME_AHEAD_MAX, tctx->vruntime))
		tctx->vruntime = vtime_now + VRUNTIME_AHEAD_MAX;

	burst = scale_inverse(tctx->exec_runtime, tctx->vweight, class);
	dl = tctx->vruntime + (burst < BURST_AHEAD_MAX ? burst : BURST_AHEAD_MAX);
	return time_before(vmax, dl) ? vmax : dl;
}

/* An idle cache sibling of prev_cpu, scanning at most MAX_CPU_SCAN CPUs. */
static s32 pick_idle_llc_sibling(const struct task_struct *p, s32 prev_cpu)
{
	u32 prev = prev_cpu, *llc, *l;
	u32 i, cpu;

	llc = bpf_map_lookup_elem(&cpu_llc, &prev);
	if (!llc)
		return -1;

	bpf_for(i, 1, nr_cpus) {
		if (i >= MAX_CPU_SCAN)
			break;
		cpu = (prev + i) % nr_cpus;
		l = bpf_map_lookup_elem(&cpu_llc, &cpu);
		if (!l || *l != *llc)
			continue;
		if (bpf_cpumask_test_cpu(cpu, p->cpus_ptr) && scx_bpf_test_and_clear_cpu_idle(cpu))
			return cpu;
	}
	return -1;
}

/*
 * Idle CPU for a task, claiming it: the previous CPU (warm cache), then a
 * CPU whose SMT siblings are idle too, then a cache sibling, then any.
 */
static s32 pick_idle_cpu(struct task_struct *p, s32 prev_cpu)
{
	s32 cpu = pick_idle_prev_or_core(p, prev_cpu);

	if (cpu >= 0)
		return cpu;

	if (prev_cpu >= 0) {
		cpu = pick_idle_llc_sibling(p, prev_cpu);
		if (cpu >= 0)
			return cpu;
	}

	return scx_bpf_pick_idle_cpu(p->cpus_ptr, 0);
}

/*
 * A woken normal task preempts only non-critical work with a later deadline
 * by a slice or more, and only once that work has run a full default slice.
 * Without the latter, tasks that wake each other (senders and receivers over
 * sockets) preempt each other at every message: perf bench sched messaging
 * ran 8x slower than under EEVDF, which likewise lets the running task reach
 * its slice first.
 *
 * Except a periodic task: woken by a timer or an interrupt, not by a task
 * about to sleep (a sync wakeup), and running less than a minimal slice
 * between sleeps. It would otherwise wait for the tick to end the running
 * task's slice (4 ms at HZ=250): a 1 ms cyclictest thread beside CPU hogs ran
 * a quarter of its periods. Preempting it in costs the hog a context switch
 * per period, as under EEVDF.
 */
static bool should_preempt(const struct task_struct *p, const struct task_ctx *tctx, u32 cpu, u64 deadline)
{
	struct cpu_state *cs = bpf_map_lookup_elem(&cpu_states, &cpu);
	bool periodic = !tctx->sync_wake && tctx->last_burst < slice_min_ns;

	return cs && cs->busy && cs->class > SWL_CLASS_HIGH &&
	       time_before(deadline + slice_ns, cs->deadline) &&
	       (periodic || bpf_ktime_get_ns() - cs->started_at >= slice_ns) &&
	       bpf_cpumask_test_cpu(cpu, p->cpus_ptr);
}

/*
 * Make a CPU available to a queued critical task: wake an idle one, or
 * preempt a CPU running non-critical work, its previous CPU first.
 */
static void kick_for_critical(struct task_struct *p)
{
	s32 prev = scx_bpf_task_cpu(p);
	s32 idle;

	idle = pick_idle_cpu(p, prev);
	if (idle >= 0) {
		swl_kick_cpu(idle, SCX_KICK_IDLE);
		return;
	}

	if (prev >= 0 && can_preempt(p, prev)) {
		swl_kick_cpu(prev, SCX_KICK_PREEMPT);
		STAT_INC(preempt_kicks);
		return;
	}
	preempt_for_critical(p, prev, 1);
}

static void record_wait(u32 class, u64 wait_ns)
{
	struct swl_stats *s = lookup_stats();
	u64 us = wait_ns / NSEC_PER_USEC;
	u32 b = 0;

	if (!s || class >= SWL_NR_CLASSES)
		return;

	/* log2 bucket, branch-light. */
	if (us >= (1ULL << 16)) { b += 16; us >>= 16; }
	if (us >= (1ULL << 8))  { b += 8;  us >>= 8; }
	if (us >= (1ULL << 4))  { b += 4;  us >>= 4; }
	if (us >= (1ULL << 2))  { b += 2;  us >>= 2; }
	if (us >= (1ULL << 1))  { b += 1;  us >>= 1; }
	b += us; /* 0 if < 1 µs, else floor(log2)+1 */
	if (b >= SWL_HIST_BUCKETS)
		b = SWL_HIST_BUCKETS - 1;

	s->wait_count[class]++;
	s->wait_sum_ns[class] += wait_ns;
	if (wait_ns > s->wait_max_ns)
		s->wait_max_ns = wait_ns;
	s->wait_hist[class][b]++;
}

/*
 * Critical hand-off. A critical task woken by a critical task about to sleep
 * (a sync wakeup: a request handed to its handler, a reply to its client)
 * waits on the waker's CPU and runs the moment the waker sleeps: warm cache,
 * no IPI, no other CPU preempted. Sent to the critical queue instead, it
 * found the waker's CPU busy with the waker (critical, so not preemptible),
 * preempted another CPU, and each message of a request/response pair paid a
 * cross-CPU hop: the pair shared a CPU 4-15 % of the time instead of 98-99 %
 * and the critical probe was no faster than the same probe unprioritised.
 * Only for a waker that runs briefly between sleeps and a CPU with nothing
 * else queued, so the wakee waits at most that brief run. What a waker did
 * before does not bind it now: one that goes on running after this wakeup
 * would hold the wakee for the rest of its slice (a strategy's slice, up to
 * a second), so the hand-off also cuts the waker's slice to a minimal one.
 */
static bool critical_handoff(struct task_struct *p, struct task_ctx *tctx, u64 wake_flags)
{
	struct task_struct *waker = bpf_get_current_task_btf();
	s32 cpu = bpf_get_smp_processor_id();
	struct task_ctx *wctx;
	u64 now;

	if (!(wake_flags & SCX_WAKE_SYNC) || !bpf_cpumask_test_cpu(cpu, p->cpus_ptr) ||
	    scx_bpf_dsq_nr_queued(SCX_DSQ_LOCAL))
		return false;
	wctx = lookup_task_ctx(waker);
	if (!wctx || wctx->run_class != SWL_CLASS_CRITICAL || wctx->last_burst >= slice_min_ns)
		return false;

	now = bpf_ktime_get_ns();
	if (!local_insert_ok(cpu, swl_queues, ARRAY_SIZE(swl_queues), now, starvation_ns))
		return false;
	resolve_strategy(p, tctx);
	if (tctx->class != SWL_CLASS_CRITICAL)
		return false;
	tctx->run_class = effective_class(tctx, now);
	if (tctx->run_class != SWL_CLASS_CRITICAL)
		return false; /* over its budget: the shared queue, like any normal task */
	tctx->deadline = task_deadline(p, tctx, SWL_CLASS_CRITICAL);
	if (!tctx->enq_at)
		tctx->enq_at = now;
	STAT_INC(handoff_dispatch);
	STAT_INC(enqueued[SWL_CLASS_CRITICAL]);
	swl_insert(p, SCX_DSQ_LOCAL, task_slice(tctx), 0);
	if (waker->scx.slice > slice_min_ns)
		waker->scx.slice = slice_min_ns;
	return true;
}

s32 BPF_STRUCT_OPS(swl_select_cpu, struct task_struct *p, s32 prev_cpu, u64 wake_flags)
{
	struct task_ctx *tctx = lookup_task_ctx(p);
	bool is_idle = false;
	u64 now;
	s32 cpu;

	if (!tctx)
		return prev_cpu;
	tctx->sync_wake = !!(wake_flags & SCX_WAKE_SYNC);
	if (critical_handoff(p, tctx, wake_flags))
		return bpf_get_smp_processor_id();

	if (builtin_idle && bpf_ksym_exists(scx_bpf_select_cpu_dfl)) {
		cpu = scx_bpf_select_cpu_dfl(p, prev_cpu, wake_flags, &is_idle);
	} else {
		cpu = pick_idle_cpu(p, prev_cpu);
		is_idle = cpu >= 0;
		if (!is_idle)
			cpu = prev_cpu;
	}

	if (is_idle) {
		now = bpf_ktime_get_ns();
		if (!local_insert_ok(cpu, swl_queues, ARRAY_SIZE(swl_queues), now, starvation_ns))
			return cpu;
		resolve_strategy(p, tctx);
		tctx->run_class = effective_class(tctx, now);
		tctx->deadline = task_deadline(p, tctx, tctx->run_class);
		if (!tctx->enq_at)
			tctx->enq_at = now;
		STAT_INC(direct_dispatch);
		STAT_INC(enqueued[tctx->run_class & (SWL_NR_CLASSES - 1)]);
		swl_insert(p, SCX_DSQ_LOCAL, task_slice(tctx), 0);
	}
	return cpu;
}

void BPF_STRUCT_OPS(swl_enqueue, struct task_struct *p, u64 enq_flags)
{
	struct task_ctx *tctx = lookup_task_ctx(p);
	u64 now = bpf_ktime_get_ns();
	u32 class;
	s32 cpu, prev;

	if (!tctx) {
		swl_insert(p, DSQ_SHARED, slice_ns, enq_flags);
		return;
	}
	if (!tctx->enq_at)
		tctx->enq_at = now;

	/*
	 * Per-CPU kthreads can only run on their CPU anyway; queue them there
	 * directly so ksoftirqd and friends never wait behind user tasks. With
	 * early_processing they also preempt whatever runs there now, which helps
	 * network work and costs the running task its slice.
	 */
	if (is_percpu_kthread(p)) {
		tctx->run_class = SWL_CLASS_HIGH;
		tctx->deadline = vtime_now; /* not queued by deadline: must not move the vtime */
		STAT_INC(kthread_dispatch);
		swl_insert(p, SCX_DSQ_LOCAL, slice_ns, enq_flags | (early_processing ? ENQ_PREEMPT : 0));
		return;
	}

	resolve_strategy(p, tctx);
	class = effective_class(tctx, now);
	tctx->run_class = class;
	STAT_INC(enqueued[class & (SWL_NR_CLASSES - 1)]);

	/*
	 * A preempted RCU reader (rcu_reader()) goes to the head of the
	 * critical queue for a minimal slice, and no critical wakeup preempts
	 * it (swl_running): it runs until it leaves its section, as on a
	 * kernel without preemption. Read-side sections are short by design,
	 * so this costs critical work at most a slice or two; its vruntime is
	 * charged as usual, so it gains no share.
	 */
	tctx->rcu_reader = rcu_reader(p);
	if (tctx->rcu_reader) {
		tctx->deadline = vtime_now - VRUNTIME_AHEAD_MAX; /* ahead of every critical deadline */
		STAT_INC(rcu_reader_dispatch);
		swl_insert_vtime(p, DSQ_CRITICAL, slice_min_ns, tctx->deadline, enq_flags);
		cpu = pick_idle_cpu(p, scx_bpf_task_cpu(p));
		if (cpu >= 0)
			swl_kick_cpu(cpu, SCX_KICK_IDLE);
		return;
	}

	tctx->deadline = task_deadline(p, tctx, class);
	prev = scx_bpf_task_cpu(p);
	if (class == SWL_CLASS_CRITICAL) {
		swl_insert_vtime(p, DSQ_CRITICAL, task_slice(tctx), tctx->deadline, enq_flags);
		/*
		 * Only a wakeup preempts. A critical task re-queued because its
		 * slice ended or it yielded (runtimes' spinning threads call
		 * sched_yield in loops) waits at the head of the critical queue
		 * instead of bouncing other CPUs' tasks off them.
		 */
		if (enq_flags & ENQ_WAKEUP) {
			kick_for_critical(p);
		} else {
			cpu = pick_idle_cpu(p, prev);
			if (cpu >= 0)
				swl_kick_cpu(cpu, SCX_KICK_IDLE);
		}
		return;
	}

	swl_insert_vtime(p, DSQ_SHARED, task_slice(tctx), tctx->deadline, enq_flags);

	/* Wake an idle CPU for it (pinned tasks and re-queues skip select_cpu). */
	cpu = pick_idle_cpu(p, prev);
	if (cpu >= 0) {
		swl_kick_cpu(cpu, SCX_KICK_IDLE);
		return;
	}

	/*
	 * Wakeup preemption: a task that slept and whose deadline is well ahead
	 * of the task running on its previous CPU takes that CPU now rather than
	 * waiting out a CPU hog's slice (what EEVDF does for woken tasks).
	 */
	if ((enq_flags & ENQ_WAKEUP) && prev >= 0 && should_preempt(p, tctx, prev, tctx->deadline)) {
		swl_kick_cpu(prev, SCX_KICK_PREEMPT);
		STAT_INC(wakeup_preempts);
	}
}

void BPF_STRUCT_OPS(swl_dispatch, s32 cpu, struct task_struct *prev)
{
	u64 now = bpf_ktime_get_ns();
	struct task_ctx *tctx;
	struct cpu_state *cs;

	/*
	 * Starvation guard: critical work is served first, but if the shared
	 * queue has waited longer than starvation_ns, serve it once now.
	 */
	queued_critical = scx_bpf_dsq_nr_queued(DSQ_CRITICAL);
	queued_shared = scx_bpf_dsq_nr_queued(DSQ_SHARED);
	/*
	 * Bounded wait (overdue.h): tasks queued over starvation_ns go first.
	 * The critical queue too: a critical task pinned to a CPU going
	 * offline would otherwise hold up the unplug.
	 */
	cs = bpf_map_lookup_elem(&cpu_states, (u32 *)&cpu);
	if ((queued_shared || queued_critical) && cs && overdue_walk_due(&cs->overdue, now)) {
		rescue_overdue_queues(swl_queues, ARRAY_SIZE(swl_queues), cpu, now, starvation_ns, &cs->overdue);
		if (cs->overdue.moved)
			STAT_ADD(overdue_dispatch, cs->overdue.moved);
		if (cs->overdue.here)
			return;
	}
	if (!queued_shared) {
		last_shared_serve = now;
	} else if (now - last_shared_serve > starvation_ns && swl_move_to_local(DSQ_SHARED)) {
		last_shared_serve = now;
		STAT_INC(starvation_rescues);
		return;
	}

	if (swl_move_to_local(DSQ_CRITICAL)) {
		STAT_INC(critical_dispatch);
		return;
	}

	if (swl_move_to_local(DSQ_SHARED)) {
		last_shared_serve = now;
		STAT_INC(shared_dispatch);
		return;
	}

	/* Nothing else wants this CPU: let prev run on rather than switch to idle. */
	if (prev && (prev->scx.flags & SCX_TASK_QUEUED)) {
		tctx = lookup_task_ctx(prev);
		prev->scx.slice = tctx ? task_slice(tctx) : slice_ns;
	}
}

bool BPF_STRUCT_OPS(swl_yield, struct task_struct *from, struct task_struct *to)
{
	struct task_ctx *tctx;

	if (to)
		return false; /* directed yields (yield_to()) are not honoured */
	/* sched_yield(): give up the slice, and be charged for it in stopping. */
	tctx = lookup_task_ctx(from);
	if (tctx)
		tctx->yielded = 1;
	from->scx.slice = 0;
	return false;
}

void BPF_STRUCT_OPS(swl_runnable, struct task_struct *p, u64 enq_flags)
{
	struct task_ctx *tctx = lookup_task_ctx(p);

	if (!tctx)
		return;
	/* It slept: its burst is over. */
	tctx->last_burst = tctx->exec_runtime;
	tctx->exec_runtime = 0;
	tctx->enq_at = bpf_ktime_get_ns();
	cgroup_runnable(p, tctx);
}

void BPF_STRUCT_OPS(swl_quiescent, struct task_struct *p, u64 deq_flags)
{
	struct task_ctx *tctx = lookup_task_ctx(p);

	if (tctx)
		cgroup_quiescent(p, tctx);
}

void BPF_STRUCT_OPS(swl_running, struct task_struct *p)
{
	struct task_ctx *tctx = lookup_task_ctx(p);
	u32 cpu = scx_bpf_task_cpu(p);
	struct cpu_state *cs;
	u64 now, start;

	if (!tctx)
		return;

	now = bpf_ktime_get_ns();
	tctx->started_at = now;
	tctx->sync_wake = 0; /* a pinned task's next wakeup skips select_cpu */
	if (tctx->enq_at) {
		record_wait(tctx->run_class, now - tctx->enq_at);
		tctx->enq_at = 0;
	}

	/*
	 * The current vtime follows the vruntime of the tasks that start, except
	 * debtors' (queued at the horizon, before their vruntime): a nice-19
	 * kthread that ran would otherwise move everyone's reference by the
	 * whole horizon each time it runs, leaving every task that did not
	 * sleep meanwhile that much behind the ones that wake.
	 */
	start = tctx->vruntime;
	if (!time_before(tctx->deadline, start) && time_before(vtime_now, start))
		vtime_now = start;
	/* Weighed now, with this run's competition, for its charge and its next deadline. */
	tctx->vweight = task_vweight(p, tctx, tctx->run_class);

	cs = bpf_map_lookup_elem(&cpu_states, &cpu);
	if (cs) {
		/* A preempted RCU reader is not preempted again for a critical task. */
		cs->class = tctx->rcu_reader ? SWL_CLASS_CRITICAL : tctx->run_class;
		cs->deadline = tctx->deadline;
		cs->started_at = now;
		cs->busy = 1;
	}
}

void BPF_STRUCT_OPS(swl_stopping, struct task_struct *p, bool runnable)
{
	struct task_ctx *tctx = lookup_task_ctx(p);
	u32 cpu = scx_bpf_task_cpu(p);
	struct cpu_state *cs;
	u64 delta;

	if (!tctx)
		return;

	delta = bpf_ktime_get_ns() - tctx->started_at;
	tctx->rcu_reader = 0; /* its next queueing says again */
	if (tctx->run_class == SWL_CLASS_CRITICAL)
		crit_charge(&tctx->crit_budget, delta);
	/*
	 * A yield gives up the rest of the slice: charge it as a minimal slice
	 * used (EEVDF likewise moves a yielder's deadline a slice on). Charged
	 * only for the microseconds it ran, a task yielding in a loop keeps the
	 * best deadline and hands the CPU back and forth through the scheduler.
	 */
	if (tctx->yielded) {
		tctx->yielded = 0;
		if (delta < slice_min_ns)
			delta = slice_min_ns;
	}
	tctx->exec_runtime += delta;
	if (tctx->exec_runtime > EXEC_RUNTIME_MAX)
		tctx->exec_runtime = EXEC_RUNTIME_MAX;
	tctx->vruntime += scale_inverse(delta, tctx->vweight, tctx->run_class);

	cs = bpf_map_lookup_elem(&cpu_states, &cpu);
	if (cs)
		cs->busy = 0;
}

void BPF_STRUCT_OPS(swl_enable, struct task_struct *p)
{
	struct task_ctx *tctx = lookup_task_ctx(p);

	if (tctx)
		tctx->vruntime = vtime_now;
}

/*
 * Sleepable, so the task storage below is allocated with GFP_KERNEL: from a
 * non-sleepable program it is an atomic allocation, which failed (-ENOMEM,
 * and the kernel refused the whole attach) right after a fork storm.
 */
s32 BPF_STRUCT_OPS_SLEEPABLE(swl_init_task, struct task_struct *p, struct scx_init_task_args *args)
{
	struct task_ctx *tctx = create_task_ctx(p);

	if (!tctx)
		return -ENOMEM;
	tctx->vweight = (u64)p->scx.weight << 10; /* until it first runs */
	return 0;
}

s32 BPF_STRUCT_OPS_SLEEPABLE(swl_cgroup_init, struct cgroup *cgrp, struct scx_cgroup_init_args *args)
{
	cgroup_weight_init(cgrp, args);
	return 0; /* never refuse a cgroup: see cgroup_weight_init() */
}

void BPF_STRUCT_OPS(swl_cgroup_set_weight, struct cgroup *cgrp, u32 weight)
{
	cgroup_weight_set(cgrp, weight);
}

/*
 * Implementing the hotplug callbacks tells the kernel we cope with CPUs
 * coming and going (otherwise it restarts the scheduler on every change).
 * Nothing to move: our queues are shared, the kernel re-homes tasks queued
 * on an offline CPU's local queue, and a task pinned to a CPU on its way
 * offline reaches it through the global queue once overdue (overdue.h).
 * Online, active CPUs size the critical pool (critical.h).
 */
void BPF_STRUCT_OPS(swl_cpu_online, s32 cpu)
{
	crit_cpu_member(cpu, true);
	STAT_INC(cpu_hotplug);
}

void BPF_STRUCT_OPS(swl_cpu_offline, s32 cpu)
{
	cpu_going_offline(cpu, swl_queues, ARRAY_SIZE(swl_queues));
	STAT_INC(cpu_hotplug);
}

s32 BPF_STRUCT_OPS_SLEEPABLE(swl_init)
{
	s32 err;

	last_shared_serve = bpf_ktime_get_ns();
	crit_init(last_shared_serve);
	err = scx_bpf_create_dsq(DSQ_CRITICAL, -1);
	if (err)
		return err;
	return scx_bpf_create_dsq(DSQ_SHARED, -1);
}

void BPF_STRUCT_OPS(swl_exit, struct scx_exit_info *ei)
{
	record_exit(ei);
	emit_event(SWL_EV_SCHED_EXIT, 0, 0, 0);
}

SEC(".struct_ops.link")
struct sched_ext_ops swiftlane_ops = {
	.select_cpu = (void *)swl_select_cpu,
	.enqueue = (void *)swl_enqueue,
	.dispatch = (void *)swl_dispatch,
	.runnable = (void *)swl_runnable,
	.running = (void *)swl_running,
	.stopping = (void *)swl_stopping,
	.quiescent = (void *)swl_quiescent,
	.yield = (void *)swl_yield,
	.enable = (void *)swl_enable,
	.init_task = (void *)swl_init_task,
	/*
	 * No ops flag is needed for cgroup weights: SCX_OPS_HAS_CGROUP_WEIGHT
	 * only silenced a warning up to 6.14, is a no-op that warns from 6.15
	 * and is rejected from 7.1, where it was removed.
	 */
	.cgroup_init = (void *)swl_cgroup_init,
	.cgroup_set_weight = (void *)swl_cgroup_set_weight,
	.cpu_online = (void *)swl_cpu_online,
	.cpu_offline = (void *)swl_cpu_offline,
	.init = (void *)swl_init,
	.exit = (void *)swl_exit,
	.name = "swiftlane",
};
