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

#endif /* SWIFTLANE_COMMON_H */
