/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The start of every swiftlane scheduler's BPF source: kernel types, libbpf,
 * the types shared with Go (intf.h), the sched_ext kfuncs (compat.h), and
 * the few definitions every scheduler uses. Included first; schedext.h
 * follows once the scheduler has defined its task_ctx.
 */
#ifndef SWIFTLANE_COMMON_H
#define SWIFTLANE_COMMON_H

/* compat.h declares the kfuncs itself, with the prototypes each API level loads. */
#define BPF_NO_KFUNC_PROTOTYPES
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#include "intf.h"
#include "compat.h"

char _license[] SEC("license") = "GPL";

#define BPF_STRUCT_OPS(name, args...) SEC("struct_ops/" #name) BPF_PROG(name, ##args)
#define BPF_STRUCT_OPS_SLEEPABLE(name, args...) SEC("struct_ops.s/" #name) BPF_PROG(name, ##args)

#define ENOMEM 12
#define NSEC_PER_USEC 1000ULL
#define NSEC_PER_MSEC 1000000ULL
/* task_struct->flags bit for kernel threads (include/linux/sched.h). */
#define PF_KTHREAD 0x00200000

/*
 * Enqueue flags are renumbered between kernels (SCX_ENQ_HEAD is 16 on 6.18,
 * 65536 on 7.3): take their values from the running kernel's BTF (CO-RE).
 */
#define ENQ_WAKEUP bpf_core_enum_value(enum scx_enq_flags, SCX_ENQ_WAKEUP)

#ifndef ARRAY_SIZE
#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#endif

/*
 * scx_bpf_kick_cpu(), for every kick of ours: nothing when the CPU we run on
 * is no longer online.
 *
 * A kick is sent by an irq_work queued on the kicking CPU. A CPU being
 * unplugged still runs our callbacks after its last irq_work flush
 * (smpcfd_dying_cpu): in the idle loop it reports itself dead to RCU, which
 * wakes RCU's kthread, and that wakeup calls ops.select_cpu and
 * ops.enqueue there (a probe on arch_irq_work_raise caught our enqueue
 * kicking from a dead CPU). The work queued then stays on the dead CPU's
 * list, and as the list is not empty when the CPU comes back, no later
 * irq_work there raises its interrupt until the next unplug flushes it: the
 * CPU's kicks, and anything that waits for its irq_work (irq_work_sync()
 * when a ring buffer is freed), wait meanwhile. The woken task loses
 * nothing: the wakeup reschedules its CPU if that one idles, and a busy one
 * reschedules at its slice's end.
 */
static __always_inline void swl_kick_cpu(s32 cpu, u64 flags)
{
	const struct cpumask *online = scx_bpf_get_online_cpumask();
	bool here = bpf_cpumask_test_cpu(bpf_get_smp_processor_id(), online);

	scx_bpf_put_cpumask(online);
	if (here)
		scx_bpf_kick_cpu(cpu, flags);
}

#endif /* SWIFTLANE_COMMON_H */
