/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The critical class's CPU budget, shared by the in-kernel scheduler and the
 * user-space mode's BPF side.
 *
 * A critical task goes ahead of everything else, so it may do so only within
 * a budget, per task and for all of them together. Each task's budget
 * refills at critical_share_pct of one CPU and banks at most
 * critical_burst_ns: a critical task that spins gets at most that share as
 * critical (plus its fair share as a normal task once demoted). The pool of
 * all critical tasks refills at critical_share_pct of every online CPU and
 * banks critical_burst_ns per online CPU: without it, three critical tasks
 * that spin, each within its own budget, took both CPUs of a 2-CPU machine
 * and starved everything else. Tasks that run briefly and sleep, the shape
 * of a packet loop, never run out of either.
 *
 * A CPU on its way offline leaves the pool when it stops being active (the
 * CPUHP_AP_ACTIVE teardown, sched_cpu_deactivate), not at ops.cpu_offline:
 * in between, a synchronize_rcu() long, the kernel runs nothing there. With
 * the pool still sized for it, critical tasks took every CPU left, RCU's
 * kthread starved, the unplug waited on RCU, and the kernel ejected the
 * scheduler for an RCU stall.
 *
 * The includer (after common.h, having defined nr_cpus) calls crit_init()
 * from ops.init and crit_cpu_member() from the hotplug ops, and attaches
 * swl_on_cpuhp_enter and swl_on_cpuhp_exit.
 */
#ifndef SWIFTLANE_CRITICAL_H
#define SWIFTLANE_CRITICAL_H

/* Tunables: a loader could set them before load; none does, so these are the values. */
const volatile u64 critical_burst_ns = 50 * NSEC_PER_MSEC; /* critical CPU budget a task can bank */
const volatile u32 critical_share_pct = 50;                /* budget refill rate, % of one CPU */

static s64 crit_pool;       /* critical CPU time all critical tasks may still use, ns */
static u64 crit_pool_at;    /* last pool refill */
static s32 crit_online = 1; /* CPUs in the pool: online and active */

/* CPUs past this count in the pool from ops.init on, whatever hotplug does. */
#define CRIT_MAX_CPUS 8192 /* a power of two: crit_cpu_member() masks with it */
static u8 crit_member[CRIT_MAX_CPUS]; /* 1 while the CPU counts in crit_online */

/* From ops.init (sleepable). */
static void crit_init(u64 now)
{
	const struct cpumask *online = scx_bpf_get_online_cpumask();
	u32 cpu;

	crit_online = bpf_cpumask_weight(online);
	bpf_for(cpu, 0, nr_cpus) {
		if (cpu >= CRIT_MAX_CPUS)
			break;
		crit_member[cpu & (CRIT_MAX_CPUS - 1)] = bpf_cpumask_test_cpu(cpu, online);
	}
	scx_bpf_put_cpumask(online);
	crit_pool = critical_burst_ns * crit_online;
	crit_pool_at = now;
}

/*
 * cpu joins the pool (in) or leaves it; a no-op if it is already so, as
 * both its deactivation and ops.cpu_offline take it out. The kernel runs
 * one CPU's hotplug steps one at a time, so the flag needs no atomics.
 */
static void crit_cpu_member(s32 cpu, bool in)
{
	u32 i = cpu; /* a negative cpu wraps past the cap */

	if (i >= CRIT_MAX_CPUS)
		return;
	/* For the verifier: the compiler may index with a copy of what it checked. */
	i &= CRIT_MAX_CPUS - 1;
	if (crit_member[i] == in)
		return;
	crit_member[i] = in;
	__sync_fetch_and_add(&crit_online, in ? 1 : -1);
}

/* The hotplug step that makes a CPU active, or inactive on the way down. */
#define CPUHP_ACTIVE bpf_core_enum_value(enum cpuhp_state, CPUHP_AP_ACTIVE)

SEC("tp_btf/cpuhp_enter")
int BPF_PROG(swl_on_cpuhp_enter, unsigned int cpu, int target, int step)
{
	if (step == CPUHP_ACTIVE && target < step)
		crit_cpu_member(cpu, false);
	return 0;
}

SEC("tp_btf/cpuhp_exit")
int BPF_PROG(swl_on_cpuhp_exit, unsigned int cpu, int state, int step, int ret)
{
	/* Only the deactivation can fail, and the CPU is active again then. */
	if (step == CPUHP_ACTIVE && ret)
		crit_cpu_member(cpu, true);
	return 0;
}

static bool crit_pool_left(u64 now)
{
	u64 last = crit_pool_at;
	s64 cpus = crit_online > 0 ? crit_online : 1, cap = critical_burst_ns * cpus;

	/* One CPU refills for the time since the last refill; the others see its result. */
	if ((s64)(last - now) < 0 && __sync_bool_compare_and_swap(&crit_pool_at, last, now) &&
	    __sync_add_and_fetch(&crit_pool, (s64)((now - last) * critical_share_pct / 100) * cpus) > cap)
		crit_pool = cap; /* racing consumers may lose a little: errs towards the rest */
	return crit_pool > 0;
}

/* Refill a task's budget (*left, last refilled at *at) and say whether it may run as critical now. */
static bool crit_may_run(s64 *left, u64 *at, u64 now)
{
	s64 budget = *left + (s64)((now - *at) * critical_share_pct / 100);

	if (budget > (s64)critical_burst_ns)
		budget = critical_burst_ns;
	*left = budget;
	*at = now;
	return budget > 0 && crit_pool_left(now);
}

/* A critical run of delta ns ended. */
static void crit_charge(s64 *left, u64 delta)
{
	*left -= delta;
	__sync_fetch_and_sub(&crit_pool, (s64)delta);
}

#endif /* SWIFTLANE_CRITICAL_H */
