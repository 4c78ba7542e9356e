// SPDX-License-Identifier: GPL-2.0-only
/* Structs shared by gtp.bpf.c and the Go loader (bpf2go generates the Go types). */
#ifndef SWL_TRACE_GTP_H
#define SWL_TRACE_GTP_H

#define GTP_COMM_LEN 16
#define GTP_IFNAME_LEN 16

/* In which context a traced function ran. */
enum gtp_ctx {
	GTP_CTX_PROCESS = 0,   /* a user task, inside a system call: it carries the packet */
	GTP_CTX_IDLE = 1,      /* the idle task (softirq on an idle CPU) */
	GTP_CTX_KTHREAD = 2,   /* a kernel thread (ksoftirqd, NAPI threads, workers) */
	GTP_CTX_INTERRUPT = 3, /* a user task an IRQ interrupted (in user mode, or in a call that moves no packets): softirq on IRQ exit */
	GTP_CTX_BACKLOG = 4,   /* a user task in a packet-moving call whose softirq ran a packet it did not send */
};

/* A GTP-U packet a process sent, keyed by its skb's data buffer. */
struct gtp_mark {
	__u64 ts_ns; /* when it was sent */
	__u32 tgid;  /* who sent it */
	__u32 _pad;
};

/* One ring buffer record: the first packet of a (task, function), then at
 * most one per emit_interval_ns. */
struct gtp_event {
	__u64 ts_ns; /* bpf_ktime_get_ns (CLOCK_MONOTONIC) */
	__u32 pid;
	__u32 tgid;
	__u32 cpu;
	__u32 func;    /* index in the loader's function list */
	__u32 ifindex; /* device of the skb (or the net_device argument); 0 if unknown */
	__u32 ctx;     /* enum gtp_ctx */
	char comm[GTP_COMM_LEN];
	char ifname[GTP_IFNAME_LEN]; /* that device's name (its namespace's); empty if unknown */
};

/* Counts key: per thread group for process context, per CPU otherwise. */
struct gtp_key {
	__u32 tgid; /* 0 unless ctx is GTP_CTX_PROCESS */
	__u32 func;
	__u32 cpu; /* 0xffffffff for GTP_CTX_PROCESS */
	__u32 ctx;
};

struct gtp_count {
	__u64 packets;
	__u64 last_emit_ns;
};

#endif /* SWL_TRACE_GTP_H */
