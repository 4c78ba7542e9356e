/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * overdue.h's walks on the CPUs of schedext.h's cpu_states: included after
 * both.
 */
#ifndef SWIFTLANE_OVERDUE_CPU_H
#define SWIFTLANE_OVERDUE_CPU_H

/*
 * May a wakeup go straight onto cpu's local queue? Not while tasks wait in
 * our nr queues dsqs[] and cpu has not walked them (overdue.h) for
 * bound_ns. A CPU runs its local queue before it asks us for more
 * (ops.dispatch, where the walk runs), so tasks put there directly, back to
 * back, keep it from ever asking: a critical pair waking each other took
 * one CPU for 2 s while the other was being unplugged (inactive: the
 * kernel runs nothing there, and wakeups meant for it land on the first
 * CPU's local queue), and every queued task waited, the RCU kthread and
 * with it the unplug too. Such a wakeup goes to our queues instead, and
 * the CPU walks them once its local queue drains. An idle CPU has not
 * walked lately either: the wakeup still goes there, through our queues
 * (the kernel wakes an idle CPU a task is enqueued on, and it dispatches),
 * so it loses little.
 */
static __always_inline bool local_insert_ok(s32 cpu, const u64 *dsqs, int nr, u64 now, u64 bound_ns)
{
	struct cpu_state *cs;
	int i;

	for (i = 0; i < nr; i++)
		if (scx_bpf_dsq_nr_queued(dsqs[i]))
			break;
	if (i == nr)
		return true;
	cs = bpf_map_lookup_elem(&cpu_states, (u32 *)&cpu);
	return !cs || now - cs->overdue.walked_at <= bound_ns;
}

/*
 * ops.cpu_offline, both schedulers: the CPU runs nothing of ours any more,
 * the tasks queued for it in our nr queues dsqs[] move to the kernel's global
 * queue (evacuate_cpu, overdue.h), and it leaves the critical pool's count.
 * Inlined, so each caller's loop over its constant list unrolls.
 */
static __always_inline void cpu_going_offline(s32 cpu, const u64 *dsqs, int nr)
{
	struct cpu_state *cs = bpf_map_lookup_elem(&cpu_states, (u32 *)&cpu);
	int i;

	if (cs) {
		cs->busy = 0;
		for (i = 0; i < nr; i++)
			evacuate_cpu(dsqs[i], cpu, &cs->overdue);
	}
	crit_cpu_member(cpu, false);
}

#endif /* SWIFTLANE_OVERDUE_CPU_H */
