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
 * The includer (after common.h) calls crit_init() from ops.init and
 * crit_cpu_online() from the hotplug ops.
 */
#ifndef SWIFTLANE_CRITICAL_H
#define SWIFTLANE_CRITICAL_H

/* Tunables: a loader could set them before load; none does, so these are the values. */
const volatile u64 critical_burst_ns = 50 * NSEC_PER_MSEC; /* critical CPU budget a task can bank */
const volatile u32 critical_share_pct = 50;                /* budget refill rate, % of one CPU */

static s64 crit_pool;       /* critical CPU time all critical tasks may still use, ns */
static u64 crit_pool_at;    /* last pool refill */
static s32 crit_online = 1; /* online CPUs */

/* From ops.init (sleepable). */
static void crit_init(u64 now)
{
	const struct cpumask *online = scx_bpf_get_online_cpumask();

	crit_online = bpf_cpumask_weight(online);
	scx_bpf_put_cpumask(online);
	crit_pool = critical_burst_ns * crit_online;
	crit_pool_at = now;
}

/* From ops.cpu_online (up) and ops.cpu_offline. */
static void crit_cpu_online(bool up)
{
	__sync_fetch_and_add(&crit_online, up ? 1 : -1);
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
