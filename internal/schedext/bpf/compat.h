/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The sched_ext kfuncs this scheduler calls, and wrappers that pick the
 * spelling the running kernel has.
 *
 * The loader checks each kfunc's prototype against the kernel's BTF and
 * refuses any mismatch (even void vs bool). When a signature changed, the
 * kernel kept the old one under the old name and added the new one under a
 * "___v2" name. cilium/ebpf cannot resolve the old name on such a kernel
 * (it strips "___" suffixes when looking names up and then finds several),
 * so one object cannot name both: the source is compiled once per API level
 * (SWL_API) and the Go loader picks the object by the names the kernel has
 * (see api.go). Within a level, functions that may be absent are __weak and
 * guarded with bpf_ksym_exists().
 *
 *   SWL_API 1  kernels without ___v2 kfuncs (6.12 .. 6.18)
 *   SWL_API 2  scx_bpf_dsq_insert___v2 and __scx_bpf_dsq_insert_vtime (6.19 ..)
 *   SWL_API 3  also scx_bpf_dsq_move_to_local___v2 (7.1 ..)
 *
 *   6.12          scx_bpf_dispatch(), scx_bpf_dispatch_vtime(), scx_bpf_consume(),
 *                 scx_bpf_dispatch_from_dsq()
 *   6.13 ..       scx_bpf_dsq_insert(), scx_bpf_dsq_insert_vtime(), scx_bpf_dsq_move_to_local(),
 *                 scx_bpf_dsq_move()
 *   6.19 ..       scx_bpf_dsq_insert___v2() returns bool,
 *                 __scx_bpf_dsq_insert_vtime() takes an argument struct
 *   7.1 ..        scx_bpf_dsq_move_to_local___v2() takes enqueue flags
 *
 * Checked against the BTF of Debian's 6.18.15 and 7.3.4 kernels.
 */
#ifndef SWIFTLANE_COMPAT_H
#define SWIFTLANE_COMPAT_H

/* Present, with the same prototype, in every supported kernel. */
s32 scx_bpf_create_dsq(u64 dsq_id, s32 node) __ksym;
s32 scx_bpf_dsq_nr_queued(u64 dsq_id) __ksym;
void scx_bpf_kick_cpu(s32 cpu, u64 flags) __ksym;
s32 scx_bpf_pick_idle_cpu(const struct cpumask *cpus_allowed, u64 flags) __ksym;
bool scx_bpf_test_and_clear_cpu_idle(s32 cpu) __ksym;
s32 scx_bpf_task_cpu(const struct task_struct *p) __ksym;
s32 scx_bpf_select_cpu_dfl(struct task_struct *p, s32 prev_cpu, u64 wake_flags, bool *is_idle) __ksym __weak;
bool bpf_cpumask_test_cpu(u32 cpu, const struct cpumask *cpumask) __ksym;
struct cgroup *bpf_cgroup_ancestor(struct cgroup *cgrp, int level) __ksym;
void bpf_cgroup_release(struct cgroup *cgrp) __ksym;
/* Walking a dispatch queue (6.12 ..): see rescue_overdue() in overdue.h. */
int bpf_iter_scx_dsq_new(struct bpf_iter_scx_dsq *it, u64 dsq_id, u64 flags) __ksym;
struct task_struct *bpf_iter_scx_dsq_next(struct bpf_iter_scx_dsq *it) __ksym;
void bpf_iter_scx_dsq_destroy(struct bpf_iter_scx_dsq *it) __ksym;
const struct cpumask *scx_bpf_get_online_cpumask(void) __ksym;
void scx_bpf_put_cpumask(const struct cpumask *cpumask) __ksym;
u32 bpf_cpumask_weight(const struct cpumask *cpumask) __ksym;
/* Only with CONFIG_CGROUP_SCHED: without it every task counts as the root cgroup's. */
struct cgroup *scx_bpf_task_cgroup(struct task_struct *p) __ksym __weak;

#ifndef SWL_API
#error "SWL_API must be 1, 2 or 3: see compat.h"
#endif

#if SWL_API == 1
void scx_bpf_dsq_insert(struct task_struct *p, u64 dsq_id, u64 slice, u64 enq_flags) __ksym __weak;
void scx_bpf_dsq_insert_vtime(struct task_struct *p, u64 dsq_id, u64 slice, u64 vtime, u64 enq_flags) __ksym __weak;
bool scx_bpf_dsq_move_to_local(u64 dsq_id) __ksym __weak;
void scx_bpf_dispatch(struct task_struct *p, u64 dsq_id, u64 slice, u64 enq_flags) __ksym __weak;
void scx_bpf_dispatch_vtime(struct task_struct *p, u64 dsq_id, u64 slice, u64 vtime, u64 enq_flags) __ksym __weak;
bool scx_bpf_consume(u64 dsq_id) __ksym __weak;
bool scx_bpf_dsq_move(struct bpf_iter_scx_dsq *it__iter, struct task_struct *p, u64 dsq_id, u64 enq_flags) __ksym __weak;
bool scx_bpf_dispatch_from_dsq(struct bpf_iter_scx_dsq *it__iter, struct task_struct *p, u64 dsq_id, u64 enq_flags) __ksym __weak;

static __always_inline void swl_insert(struct task_struct *p, u64 dsq, u64 slice, u64 flags)
{
	if (bpf_ksym_exists(scx_bpf_dsq_insert))
		scx_bpf_dsq_insert(p, dsq, slice, flags);
	else
		scx_bpf_dispatch(p, dsq, slice, flags);
}

static __always_inline void swl_insert_vtime(struct task_struct *p, u64 dsq, u64 slice, u64 vtime, u64 flags)
{
	if (bpf_ksym_exists(scx_bpf_dsq_insert_vtime))
		scx_bpf_dsq_insert_vtime(p, dsq, slice, vtime, flags);
	else
		scx_bpf_dispatch_vtime(p, dsq, slice, vtime, flags);
}

static __always_inline bool swl_move_to_local(u64 dsq)
{
	if (bpf_ksym_exists(scx_bpf_dsq_move_to_local))
		return scx_bpf_dsq_move_to_local(dsq);
	return scx_bpf_consume(dsq);
}

/* Move p, found by the iterator it, to another queue. */
static __always_inline bool swl_dsq_move(struct bpf_iter_scx_dsq *it, struct task_struct *p, u64 dsq, u64 flags)
{
	if (bpf_ksym_exists(scx_bpf_dsq_move))
		return scx_bpf_dsq_move(it, p, dsq, flags);
	return scx_bpf_dispatch_from_dsq(it, p, dsq, flags);
}

#else /* SWL_API 2 and 3: the ___v2 insert and the argument-struct vtime insert */
bool scx_bpf_dsq_insert___v2(struct task_struct *p, u64 dsq_id, u64 slice, u64 enq_flags) __ksym;
bool __scx_bpf_dsq_insert_vtime(struct task_struct *p, struct scx_bpf_dsq_insert_vtime_args *args) __ksym;
bool scx_bpf_dsq_move(struct bpf_iter_scx_dsq *it__iter, struct task_struct *p, u64 dsq_id, u64 enq_flags) __ksym;

static __always_inline bool swl_dsq_move(struct bpf_iter_scx_dsq *it, struct task_struct *p, u64 dsq, u64 flags)
{
	return scx_bpf_dsq_move(it, p, dsq, flags);
}

static __always_inline void swl_insert(struct task_struct *p, u64 dsq, u64 slice, u64 flags)
{
	scx_bpf_dsq_insert___v2(p, dsq, slice, flags);
}

static __always_inline void swl_insert_vtime(struct task_struct *p, u64 dsq, u64 slice, u64 vtime, u64 flags)
{
	struct scx_bpf_dsq_insert_vtime_args args = {
		.dsq_id = dsq,
		.slice = slice,
		.vtime = vtime,
		.enq_flags = flags,
	};

	__scx_bpf_dsq_insert_vtime(p, &args);
}

#if SWL_API == 2
bool scx_bpf_dsq_move_to_local(u64 dsq_id) __ksym;
static __always_inline bool swl_move_to_local(u64 dsq)
{
	return scx_bpf_dsq_move_to_local(dsq);
}
#else
bool scx_bpf_dsq_move_to_local___v2(u64 dsq_id, u64 enq_flags) __ksym;
static __always_inline bool swl_move_to_local(u64 dsq)
{
	return scx_bpf_dsq_move_to_local___v2(dsq, 0);
}
#endif
#endif /* SWL_API */

#endif /* SWIFTLANE_COMPAT_H */
