/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * What both BPF schedulers have in common, as internal/schedext is on the
 * Go side: the state that package reads and writes (strategy maps, process
 * events, exit record) and what both do with it, so they treat strategies
 * and processes alike; and the per-task and per-CPU state, the critical
 * class's preemption and the idle-CPU pick they share.
 *
 * The includer has included common.h and critical.h, and defines first:
 *  - struct task_ctx, its own layout with at least the members enq_at,
 *    class, run_class, strat_gen, strat_slice, crit_budget and budget_at;
 *  - struct cpu_state, with at least class (of the task running there),
 *    busy and overdue (overdue.h's walk state);
 *  - nr_cpus, the number of possible CPUs;
 *  - STAT_INC(field), counting into its per-CPU stats, which have the
 *    fields events_dropped, critical_demoted and preempt_kicks.
 * Its ops.exit calls record_exit() and then emits SWL_EV_SCHED_EXIT.
 */
#ifndef SWIFTLANE_SCHEDEXT_H
#define SWIFTLANE_SCHEDEXT_H

/* cgroup ancestors checked against cgroup strategies (pod slice → pod → container is ~6 levels). */
#define MAX_CGROUP_DEPTH 16
/* Most CPUs one scan looks at (for a CPU to preempt, an idle cache sibling); bigger machines are not scanned whole. */
#define MAX_CPU_SCAN 512

/* Per-task state, created in ops.init_task. */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct task_ctx);
} task_ctxs SEC(".maps");

static struct task_ctx *lookup_task_ctx(struct task_struct *p)
{
	return bpf_task_storage_get(&task_ctxs, p, 0, 0);
}

/* When p became runnable, 0 while it runs or if unknown (for overdue.h). */
static u64 task_enq_at(struct task_struct *p)
{
	struct task_ctx *tctx = lookup_task_ctx(p);

	return tctx ? tctx->enq_at : 0;
}

/*
 * From ops.init_task: p's state, with what is shared here set up (a full
 * critical budget, the normal class until resolve_strategy()); NULL if it
 * cannot be allocated.
 */
static struct task_ctx *create_task_ctx(struct task_struct *p)
{
	struct task_ctx *tctx;

	tctx = bpf_task_storage_get(&task_ctxs, p, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!tctx)
		return NULL;
	tctx->crit_budget = critical_burst_ns;
	tctx->budget_at = bpf_ktime_get_ns();
	tctx->class = SWL_CLASS_NORMAL;
	tctx->run_class = SWL_CLASS_NORMAL;
	return tctx;
}

/* What each CPU runs now, to find a CPU a critical task may preempt. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1); /* resized to the number of possible CPUs by the loader */
	__type(key, u32);
	__type(value, struct cpu_state);
} cpu_states SEC(".maps");

/*
 * An idle CPU for p, claimed: its previous CPU (warm cache), else a CPU
 * whose SMT siblings are idle too; -1 if neither. Each scheduler goes on
 * from there its own way.
 */
static s32 pick_idle_prev_or_core(struct task_struct *p, s32 prev_cpu)
{
	if (prev_cpu >= 0 && bpf_cpumask_test_cpu(prev_cpu, p->cpus_ptr) &&
	    scx_bpf_test_and_clear_cpu_idle(prev_cpu))
		return prev_cpu;
	return scx_bpf_pick_idle_cpu(p->cpus_ptr, SCX_PICK_IDLE_CORE);
}

/*
 * Strategies (schedext.StrategyMaps). User space maps thread-group ids and
 * cgroup ids to a class and an optional slice, and bumps strategy_gen after
 * changing a map, which invalidates the class every task has cached.
 */
u64 strategy_gen;
u32 nr_cgroup_strategies; /* entries in cgroup_strategy: 0 skips the cgroup walk */

/* Strategies by thread-group id; written by user space, and here on fork for inherited ones. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, u32);
	__type(value, struct swl_strategy);
} tgid_strategy SEC(".maps");

/* Strategies by cgroup id (the cgroup directory's inode number); matched against every ancestor. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, u64);
	__type(value, struct swl_strategy);
} cgroup_strategy SEC(".maps");

/* Strategy of the nearest ancestor cgroup that has one. */
static struct swl_strategy *lookup_cgroup_strategy(struct task_struct *p)
{
	struct cgroup *cgrp = BPF_CORE_READ(p, cgroups, dfl_cgrp);
	int i;

	for (i = 0; i < MAX_CGROUP_DEPTH && cgrp; i++) {
		u64 id = BPF_CORE_READ(cgrp, kn, id);
		struct swl_strategy *s = bpf_map_lookup_elem(&cgroup_strategy, &id);

		if (s)
			return s;
		/* cgroup.self is the first member, so the parent css is the parent cgroup. */
		cgrp = (struct cgroup *)BPF_CORE_READ(cgrp, self.parent);
	}
	return NULL;
}

/*
 * Resolve the task's class and slice from the strategy maps, once per
 * strategy change. Looked up for every thread, so threads created after a
 * strategy was set are covered without user space knowing them.
 */
static void resolve_strategy(struct task_struct *p, struct task_ctx *tctx)
{
	u64 gen = strategy_gen + 1;
	struct swl_strategy *s;
	u32 tgid = p->tgid;

	if (tctx->strat_gen == gen)
		return;

	s = bpf_map_lookup_elem(&tgid_strategy, &tgid);
	if (!s && nr_cgroup_strategies)
		s = lookup_cgroup_strategy(p);

	if (s) {
		tctx->class = s->class < SWL_NR_CLASSES ? s->class : SWL_CLASS_NORMAL;
		tctx->strat_slice = s->slice_ns;
	} else {
		tctx->class = SWL_CLASS_NORMAL;
		tctx->strat_slice = 0;
	}
	tctx->strat_gen = gen;
}

/*
 * The class a task runs with now: a critical task goes ahead of others only
 * within its budget and the pool's (critical.h); over it, it runs as a
 * normal task (in user-space mode, it goes to user space like any other).
 */
static u32 effective_class(struct task_ctx *tctx, u64 now)
{
	if (tctx->class != SWL_CLASS_CRITICAL)
		return tctx->class;

	if (!crit_may_run(&tctx->crit_budget, &tctx->budget_at, now)) {
		STAT_INC(critical_demoted);
		return SWL_CLASS_NORMAL;
	}
	return SWL_CLASS_CRITICAL;
}

/*
 * Was p preempted inside an RCU read-side critical section? Every RCU grace
 * period on the machine then waits until it runs again and leaves it: each
 * synchronize_rcu(), so each CPU unplug and each cgroup move. Kernels built
 * with RCU priority boosting lift such a reader to a real-time priority
 * after half a second; Debian's are built without (CONFIG_RCU_BOOST unset),
 * so only the scheduler can. The one ejection of kernel mode outside the
 * torture was such a reader: khugepaged (nice 19), preempted in its
 * section under CPU hogs, messaging and critical preemptions, had not left
 * it 21 s later, and the kernel ejected the scheduler for an RCU stall
 * (docs/gtp.md; scx_bpfland the same way in another boot). The bounded
 * wait (overdue.h) runs such a task every starvation_ns, but only for a
 * slice that anything may cut short.
 *
 * RCU's own mark, set by rcu_note_context_switch() at the start of the
 * switch, not rcu_read_lock_nesting: for the task being switched out
 * (current) that also counts the RCU read lock this BPF program runs
 * under, and every preempted task read as a reader.
 */
static bool rcu_reader(const struct task_struct *p)
{
	return bpf_core_field_exists(p->rcu_read_unlock_special) && BPF_CORE_READ(p, rcu_read_unlock_special.b.blocked);
}

/* A critical task may preempt a CPU it may use that runs non-critical work. */
static bool can_preempt(const struct task_struct *p, u32 cpu)
{
	struct cpu_state *cs = bpf_map_lookup_elem(&cpu_states, &cpu);

	return cs && cs->busy && cs->class != SWL_CLASS_CRITICAL &&
	       bpf_cpumask_test_cpu(cpu, p->cpus_ptr);
}

/*
 * Preempt, for critical p, the first CPU it can (can_preempt()), scanning
 * from prev + first on; false if none among MAX_CPU_SCAN.
 */
static bool preempt_for_critical(struct task_struct *p, s32 prev, u32 first)
{
	u32 i, cpu;

	bpf_for(i, first, nr_cpus) {
		if (i >= MAX_CPU_SCAN)
			break;
		cpu = ((u32)prev + i) % nr_cpus;
		if (can_preempt(p, cpu)) {
			swl_kick_cpu(cpu, SCX_KICK_PREEMPT);
			STAT_INC(preempt_kicks);
			return true;
		}
	}
	return false;
}

/*
 * Process lifecycle events (schedext.Links): user space matches new
 * processes against strategies without rescanning /proc.
 */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} events SEC(".maps");

/* Unused: makes the compiler emit struct swl_event's BTF, which schedext.CheckLayout checks. */
struct swl_event _swl_event_btf;

static void emit_event(u32 type, u32 pid, u32 tgid, u32 ppid)
{
	struct swl_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);

	if (!e) {
		STAT_INC(events_dropped);
		return;
	}
	e->type = type;
	e->pid = pid;
	e->tgid = tgid;
	e->ppid = ppid;
	/*
	 * No wakeup: the reader polls (schedext.Links.ReadEvent). A wakeup is
	 * an irq_work on this CPU, and freeing the ring waits for the last one
	 * to have run (irq_work_sync spins). Under the torture suite a CPU
	 * that went offline and came back stopped running its irq_work: the
	 * kworker freeing the previous scheduler's ring then spun on the CPU
	 * being unplugged, and the unplug waited for it forever.
	 */
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(swl_on_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	emit_event(SWL_EV_EXEC, p->pid, p->tgid, 0);
	return 0;
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(swl_on_fork, struct task_struct *parent, struct task_struct *child)
{
	struct swl_strategy *s, inherited;
	u32 ptgid = parent->tgid, tgid = child->tgid;

	/* A new thread is covered by its thread group's entry already. */
	if (child->pid != child->tgid)
		return 0;

	s = bpf_map_lookup_elem(&tgid_strategy, &ptgid);
	if (s && (s->flags & SWL_STRAT_INHERIT)) {
		inherited = *s;
		inherited.flags |= SWL_STRAT_INHERITED;
		bpf_map_update_elem(&tgid_strategy, &tgid, &inherited, BPF_NOEXIST);
	}
	emit_event(SWL_EV_FORK, child->pid, tgid, ptgid);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(swl_on_exit, struct task_struct *p)
{
	u32 tgid = p->tgid;

	/* Only when the last thread of the group exits (signal->live already dropped). */
	if (BPF_CORE_READ(p, signal, live.counter) != 0)
		return 0;
	/* Drop it here so a recycled PID never inherits a dead process's strategy. */
	bpf_map_delete_elem(&tgid_strategy, &tgid);
	emit_event(SWL_EV_EXIT, p->pid, tgid, 0);
	return 0;
}

/* Why the kernel disabled the scheduler (schedext.ReadExit). */
struct swl_exit_info exit_info;

/*
 * From ops.exit: copy the kernel's exit record, which user space cannot
 * read otherwise. The caller then emits SWL_EV_SCHED_EXIT to wake it.
 */
static void record_exit(struct scx_exit_info *ei)
{
	exit_info.kind = BPF_CORE_READ(ei, kind);
	if (bpf_core_field_exists(ei->exit_code))
		exit_info.exit_code = BPF_CORE_READ(ei, exit_code);
	bpf_probe_read_kernel_str(exit_info.reason, sizeof(exit_info.reason), BPF_CORE_READ(ei, reason));
	bpf_probe_read_kernel_str(exit_info.msg, sizeof(exit_info.msg), BPF_CORE_READ(ei, msg));
	/* Written before ops.exit runs, on error exits only. */
	if (bpf_core_field_exists(ei->dump))
		bpf_probe_read_kernel_str(exit_info.dump, sizeof(exit_info.dump), BPF_CORE_READ(ei, dump));
	exit_info.valid = 1;
}

#endif /* SWIFTLANE_SCHEDEXT_H */
