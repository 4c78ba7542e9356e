// SPDX-License-Identifier: GPL-2.0-only
/* Structs shared by gtp.bpf.c and the Go loader (bpf2go generates the Go types). */
#ifndef SWL_TRACE_GTP_H
#define SWL_TRACE_GTP_H

#define GTP_COMM_LEN 16
#define GTP_IFNAME_LEN 16
/* Functions one tracer traces at most (func ids 0 to GTP_MAX_FUNCS - 1). */
#define GTP_MAX_FUNCS 64
/* Contexts (enum gtp_ctx). */
#define GTP_NCTX 5
/* Sent GTP-U packets remembered per CPU (see gtp_cpu_state in gtp.bpf.c). */
#define GTP_MARK_BITS 8
#define GTP_MARK_SLOTS (1 << GTP_MARK_BITS)

/* In which context a traced function ran. */
enum gtp_ctx {
	GTP_CTX_PROCESS = 0,   /* a user task, inside a system call: it carries the packet */
	GTP_CTX_IDLE = 1,      /* the idle task (softirq on an idle CPU) */
	GTP_CTX_KTHREAD = 2,   /* a kernel thread (ksoftirqd, NAPI threads, workers) */
	GTP_CTX_INTERRUPT = 3, /* a user task an IRQ interrupted (in user mode, or in a call that moves no packets): softirq on IRQ exit */
	GTP_CTX_BACKLOG = 4,   /* a user task in a packet-moving call whose softirq ran a packet it did not send */
};

/* A GTP-U packet a process sent, known by its skb's data buffer. */
struct gtp_mark {
	__u64 head;  /* skb->head; 0: free */
	__u64 ts_ns; /* when it was sent */
	__u32 tgid;  /* who sent it */
	__u32 _pad;
};

/* Per-CPU state of the programs (one element of a per-CPU array). */
struct gtp_cpu {
	__u64 preempt_count; /* this CPU's preempt count's address; 0: not known yet */
	struct gtp_mark marks[GTP_MARK_SLOTS]; /* direct-mapped by head */
};

/* One ring buffer record: the first call of a key (a process and function,
 * or a CPU, function and context), then at most one per emit interval. */
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

/* Key of a process's counts (GTP_CTX_PROCESS calls). */
struct gtp_key {
	__u32 tgid;
	__u32 func;
};

struct gtp_count {
	__u64 packets;
	__u64 epoch; /* gtp_epoch's value at the last ring record */
};

/* Calls in the other contexts, per CPU (one element of a per-CPU array),
 * at [func * GTP_NCTX + ctx]. */
struct gtp_cpu_counts {
	struct gtp_count c[GTP_MAX_FUNCS * GTP_NCTX];
};

#endif /* SWL_TRACE_GTP_H */
