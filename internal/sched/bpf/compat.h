/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The sched_ext kfuncs this scheduler calls, and wrappers that pick the
 * spelling the running kernel has.
 *
 * The loader checks each kfunc's prototype against the kernel's BTF and
 * refuses any mismatch (even void vs bool), so a kfunc whose signature changed
 * cannot be declared once for all kernels. The kernel keeps the old signature
 * under the old name and adds the new one under a "___v2" name, so each
 * spelling is declared __weak with its own exact prototype and the wrappers
 * test which exist (bpf_ksym_exists). Absent weak kfuncs load as dead code.
 *
 *   6.12          scx_bpf_dispatch(), scx_bpf_dispatch_vtime(), scx_bpf_consume()
 *   6.13 ..       scx_bpf_dsq_insert(), scx_bpf_dsq_insert_vtime(), scx_bpf_dsq_move_to_local()
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

/* Insert into a queue, FIFO. */
bool scx_bpf_dsq_insert___v2(struct task_struct *p, u64 dsq_id, u64 slice, u64 enq_flags) __ksym __weak;
void scx_bpf_dsq_insert(struct task_struct *p, u64 dsq_id, u64 slice, u64 enq_flags) __ksym __weak;
void scx_bpf_dispatch(struct task_struct *p, u64 dsq_id, u64 slice, u64 enq_flags) __ksym __weak;

static __always_inline void swl_insert(struct task_struct *p, u64 dsq, u64 slice, u64 flags)
{
	if (bpf_ksym_exists(scx_bpf_dsq_insert___v2))
		scx_bpf_dsq_insert___v2(p, dsq, slice, flags);
	else if (bpf_ksym_exists(scx_bpf_dsq_insert))
		scx_bpf_dsq_insert(p, dsq, slice, flags);
	else
		scx_bpf_dispatch(p, dsq, slice, flags);
}

/* Insert into a queue ordered by vtime. */
bool __scx_bpf_dsq_insert_vtime(struct task_struct *p, struct scx_bpf_dsq_insert_vtime_args *args) __ksym __weak;
void scx_bpf_dsq_insert_vtime(struct task_struct *p, u64 dsq_id, u64 slice, u64 vtime, u64 enq_flags) __ksym __weak;
void scx_bpf_dispatch_vtime(struct task_struct *p, u64 dsq_id, u64 slice, u64 vtime, u64 enq_flags) __ksym __weak;

static __always_inline void swl_insert_vtime(struct task_struct *p, u64 dsq, u64 slice, u64 vtime, u64 flags)
{
	if (bpf_ksym_exists(__scx_bpf_dsq_insert_vtime)) {
		struct scx_bpf_dsq_insert_vtime_args args = {
			.dsq_id = dsq,
			.slice = slice,
			.vtime = vtime,
			.enq_flags = flags,
		};

		__scx_bpf_dsq_insert_vtime(p, &args);
	} else if (bpf_ksym_exists(scx_bpf_dsq_insert_vtime)) {
		scx_bpf_dsq_insert_vtime(p, dsq, slice, vtime, flags);
	} else {
		scx_bpf_dispatch_vtime(p, dsq, slice, vtime, flags);
	}
}

/* Move the first task of a queue to this CPU's local queue. */
bool scx_bpf_dsq_move_to_local___v2(u64 dsq_id, u64 enq_flags) __ksym __weak;
bool scx_bpf_dsq_move_to_local(u64 dsq_id) __ksym __weak;
bool scx_bpf_consume(u64 dsq_id) __ksym __weak;

static __always_inline bool swl_move_to_local(u64 dsq)
{
	if (bpf_ksym_exists(scx_bpf_dsq_move_to_local___v2))
		return scx_bpf_dsq_move_to_local___v2(dsq, 0);
	if (bpf_ksym_exists(scx_bpf_dsq_move_to_local))
		return scx_bpf_dsq_move_to_local(dsq);
	return scx_bpf_consume(dsq);
}

#endif /* SWIFTLANE_COMPAT_H */
