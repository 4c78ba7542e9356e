/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Types both BPF schedulers (internal/sched, usersched) share with
 * internal/schedext, which reads and writes them from Go. bpf2go generates
 * the Go side from these definitions (-type, see intf.bpf.c), so keep them
 * plain: fixed-width fields, explicit padding, no pointers.
 */
#ifndef SWIFTLANE_INTF_H
#define SWIFTLANE_INTF_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

/* Scheduling classes, most urgent first. Their values index per-class stats arrays. */
enum swl_class {
	SWL_CLASS_CRITICAL = 0,
	SWL_CLASS_HIGH = 1,
	SWL_CLASS_NORMAL = 2,
	SWL_CLASS_BACKGROUND = 3,
	SWL_NR_CLASSES = 4,
};

enum swl_strategy_flags {
	SWL_STRAT_INHERIT = 1 << 0,   /* children forked later get the same strategy */
	SWL_STRAT_INHERITED = 1 << 1, /* entry was created in BPF at fork time */
};

/* Value of the tgid_strategy and cgroup_strategy maps. */
struct swl_strategy {
	__u32 class;    /* enum swl_class */
	__u32 flags;    /* enum swl_strategy_flags */
	__u64 slice_ns; /* 0: the scheduler's own slice */
	__u32 id;       /* index of the strategy in user space, for reporting */
	__u32 _pad;
};

enum swl_event_type {
	SWL_EV_EXEC = 1,       /* a process called exec */
	SWL_EV_FORK = 2,       /* a new process (not a thread) was created */
	SWL_EV_EXIT = 3,       /* a process (thread group) exited */
	SWL_EV_SCHED_EXIT = 4, /* the kernel is disabling this scheduler; see exit_info */
};

struct swl_event {
	__u32 type; /* enum swl_event_type */
	__u32 pid;
	__u32 tgid;
	__u32 ppid; /* parent tgid, for SWL_EV_FORK */
};

/*
 * The kernel's state dump on an error exit: what every CPU ran and which
 * tasks were runnable where, and for how long. The kernel's default
 * length (ops.exit_dump_len unset); a longer one is truncated.
 */
#define SWL_EXIT_DUMP_LEN 32768

/* Why the scheduler stopped, copied from the kernel's scx_exit_info. */
struct swl_exit_info {
	__s64 exit_code;
	__u32 kind;
	__u32 valid;
	char reason[128];
	char msg[1024];
	char dump[SWL_EXIT_DUMP_LEN]; /* empty unless the kernel dumped (error exits) */
};

#endif /* SWIFTLANE_INTF_H */
