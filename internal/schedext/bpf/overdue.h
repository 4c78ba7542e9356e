/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Bounded wait, shared by the in-kernel scheduler and the user-space mode's
 * BPF side.
 *
 * Deadlines order a queue only as well as the accounting behind them: a task
 * charged far too little for the time it holds the CPUs, a nice-19 task
 * among hundreds of runnable ones, or a policy in user space that holds a
 * task back, can leave it waiting for many seconds; the kernel ejects a
 * scheduler that leaves a task runnable for 30 s, and a task preempted in an
 * RCU read-side section that long stalls the whole machine first. So every
 * few milliseconds each CPU walks its deadline-ordered queues for tasks that
 * have waited longer than a bound, and runs up to RESCUE_BATCH of each
 * queue's that may run here next, ahead of the deadline order, the
 * longest-waiting first: a first pass finds the longest wait, and the
 * second moves only tasks that have waited at least half of it. Taken in
 * queue order instead, the overdue tasks at the head (earliest deadlines)
 * went first every time, and when the walks could not keep up (hundreds of
 * forks a second, a CPU offline) the overdue ones behind them waited over a
 * second.
 *
 * A task that may not run here (pinned elsewhere, or migration disabled on
 * another CPU) goes to the kernel's global queue instead, which every CPU
 * serves before asking the scheduler, even a CPU on its way offline: the
 * kernel calls no ops.dispatch there, and unplugging waits for the tasks
 * pinned to it to leave.
 *
 * The includer keeps a struct overdue_state per CPU in map memory, and
 * defines task_enq_at(): when a task became runnable, 0 while it runs or if
 * unknown.
 */
#ifndef SWIFTLANE_OVERDUE_H
#define SWIFTLANE_OVERDUE_H

/* Least time between two walks by one CPU. */
#define RESCUE_SCAN_INTERVAL (4 * 1000 * 1000ULL)
/* Queued tasks looked at per walk. */
#define MAX_RESCUE_SCAN 512
/*
 * Overdue tasks one walk puts on this CPU's local queue, from each queue:
 * with one batch for all, the first queue walked took it every time while
 * its tasks were overdue (a deep queue of CPU hogs under a 100 ms bound),
 * and the queues after it (kernel threads, the user-space scheduler's own)
 * waited: a task waited 2.4 s in the user-space torture.
 */
#define RESCUE_BATCH 8

/*
 * One CPU's walks. In map memory, which the verifier does not track by
 * value: counters on the stack make it go through the loop once per value
 * (loading took 40 s under TCG).
 */
struct overdue_state {
	u64 walked_at;  /* when this CPU last walked */
	u64 oldest_at;  /* earliest enq_at the first pass saw */
	u32 seen;       /* tasks looked at in the current queue */
	u32 moved;      /* tasks moved this walk, to this CPU or the global queue */
	u32 here;       /* of which to this CPU */
	u32 queue_here; /* of which from the current queue */
};

static u64 task_enq_at(struct task_struct *p);

/* Start a walk if this CPU's last one is RESCUE_SCAN_INTERVAL old. */
static bool overdue_walk_due(struct overdue_state *st, u64 now)
{
	if (now - st->walked_at < RESCUE_SCAN_INTERVAL)
		return false;
	st->walked_at = now;
	st->moved = st->here = 0;
	return true;
}

/* Move the tasks of dsq queued longer than bound_ns (see above); counts in st. */
static void rescue_overdue(u64 dsq, s32 cpu, u64 now, u64 bound_ns, struct overdue_state *st)
{
	struct task_struct *p;
	u64 enq_at;
	s32 pcpu;
	bool mine;

	st->queue_here = 0;
	st->seen = 0;
	st->oldest_at = now;
	bpf_for_each(scx_dsq, p, dsq, 0) {
		if (++st->seen > MAX_RESCUE_SCAN)
			break;
		enq_at = task_enq_at(p);
		if (enq_at && enq_at < st->oldest_at)
			st->oldest_at = enq_at;
	}
	if (now - st->oldest_at < bound_ns)
		return;
	/* Moved from here on: waited at least half the longest wait. */
	if ((now - st->oldest_at) / 2 > bound_ns)
		bound_ns = (now - st->oldest_at) / 2;

	st->seen = 0;
	bpf_for_each(scx_dsq, p, dsq, 0) {
		if (++st->seen > MAX_RESCUE_SCAN || st->queue_here >= RESCUE_BATCH)
			break;
		enq_at = task_enq_at(p);
		if (!enq_at || now - enq_at < bound_ns)
			continue;
		pcpu = scx_bpf_task_cpu(p);
		mine = bpf_cpumask_test_cpu(cpu, p->cpus_ptr) && (!p->migration_disabled || pcpu == cpu);
		/* ___it: bpf_for_each()'s iterator (libbpf's bpf_helpers.h). */
		if (!swl_dsq_move(&___it, p, mine ? SCX_DSQ_LOCAL : SCX_DSQ_GLOBAL, 0))
			continue;
		st->moved++;
		if (mine) {
			st->here++;
			st->queue_here++;
		} else {
			swl_kick_cpu(pcpu, SCX_KICK_PREEMPT);
		}
	}
}

/* rescue_overdue() over each of a scheduler's queues, in the order given. */
static __always_inline void rescue_overdue_queues(const u64 *dsqs, int nr, s32 cpu, u64 now, u64 bound_ns,
						  struct overdue_state *st)
{
	int i;

	for (i = 0; i < nr; i++)
		rescue_overdue(dsqs[i], cpu, now, bound_ns, st);
}

/* Queued tasks looked at per queue when a CPU goes offline. */
#define MAX_EVACUATE_SCAN 4096

/*
 * A CPU going offline (ops.cpu_offline): the unplug waits until no task is
 * left on that CPU's run queue, and from here on the kernel calls no
 * ops.dispatch there. Its tasks queued with us would leave only as the
 * other CPUs reach them in deadline order: under the torture one unplug took
 * 20 s, holding the hotplug lock that every cgroup move takes meanwhile.
 * Move them all to the kernel's global queue, which every CPU serves before
 * its own: the others take those they may run, the dying CPU runs the ones
 * pinned to it and the kernel pushes them away. Called with no run queue
 * locked, where the move kfunc is allowed.
 */
static void evacuate_cpu(u64 dsq, s32 cpu, struct overdue_state *st)
{
	struct task_struct *p;

	st->seen = 0;
	bpf_for_each(scx_dsq, p, dsq, 0) {
		if (++st->seen > MAX_EVACUATE_SCAN)
			break;
		if (scx_bpf_task_cpu(p) == cpu)
			swl_dsq_move(&___it, p, SCX_DSQ_GLOBAL, 0);
	}
}

#endif /* SWIFTLANE_OVERDUE_H */
