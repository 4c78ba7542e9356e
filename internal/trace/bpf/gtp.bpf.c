// SPDX-License-Identifier: GPL-2.0-only
//go:build ignore

/*
 * GTP-U (and TUN) path tracer. One copy of gtp_fentry is loaded per traced kernel
 * function (the loader sets the attach target and the constants below), all
 * copies sharing the maps. Every call is counted, per process when the
 * process carries the packet and per CPU otherwise, so nothing is lost when
 * user space is slow; the ring buffer gets the first call of a process (or
 * of a CPU and context) and then at most one record per emit interval, so a
 * packet flood cannot flood user space. Two small programs beside them
 * (mark_ip4, mark_ip6) and the CPU's preempt count tell a caller's own
 * packets from the ones its softirq happens to run: see owner().
 *
 * Every GTP-U packet runs several of these programs (one per traced function
 * on its path, and a mark on each IP send), so the per-call work is kept
 * small (issue 38: tens of microseconds per packet under TCG): fields of the
 * task and of a function's typed arguments are plain loads, not
 * bpf_probe_read_kernel calls; the clock is read only for a ring record or a
 * sender mark; the emit interval is an epoch number that user space
 * advances; counts outside a process's context and the sender marks live in
 * per-CPU arrays (an index, no hashing, no allocation, no lock), and only a
 * process's counts take a hash lookup (then an atomic add in place).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>

#include "gtp.h"

char _license[] SEC("license") = "GPL";

/* task_struct->flags bit for kernel threads (include/linux/sched.h). */
#define PF_KTHREAD 0x00200000
/* (Process, function) pairs counted at once; least recently used ones are evicted. */
#define MAX_KEYS 16384
/* GTP-U's UDP port (3GPP TS 29.281), the destination of every GTP-U packet. */
#define GTPU_PORT 2152
/*
 * How long a sent packet's mark counts. A packet is normally received within
 * the same system call that sent it (microseconds); the bound only keeps a
 * mark on a recycled buffer from crediting its sender with a later packet.
 */
#define MARK_TTL_NS (50 * 1000 * 1000ULL)

/* Set by the loader per copy of the program. */
const volatile __u32 func_id = 0;
/* Argument positions of the struct sk_buff *, struct net_device * and
 * struct tun_struct *; -1: none. */
const volatile __s32 skb_arg = -1;
const volatile __s32 dev_arg = -1;
const volatile __s32 tun_arg = -1;
/* Non-zero: at most one ring record per key and gtp_epoch value (user space
 * advances it every emit interval); 0: every call is recorded. */
const volatile __u64 emit_interval_ns = 0;
/*
 * Set by the loader from /proc/kallsyms: the per-CPU preempt count's address
 * before the CPU's per-CPU offset is added, and __per_cpu_offset's (x86-64).
 * 0: unknown; then no call is seen inside a softirq and the marks are off.
 */
const volatile __u64 preempt_count_addr = 0;
const volatile __u64 per_cpu_offset_addr = 0;

/* The preempt count's bit that is set while a CPU serves softirqs
 * (SOFTIRQ_OFFSET; a bh-disabled section sets the bit above it). */
#define SOFTIRQ_OFFSET 0x100

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} gtp_events SEC(".maps");

/* A process's calls per function: one lookup, then an atomic add in place. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_KEYS);
	__type(key, struct gtp_key);
	__type(value, struct gtp_count);
} gtp_counts SEC(".maps");

/* Calls in the other contexts: per CPU, indexed by function and context. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct gtp_cpu_counts);
} gtp_cpu_work SEC(".maps");

/*
 * The emit interval's clock: user space adds one every interval. A count
 * remembers the epoch of its last record, so deciding whether a call gets a
 * record is a load and a compare; no clock is read unless it does.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} gtp_epoch SEC(".maps");

/* Ring records dropped because the ring was full. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} gtp_drops SEC(".maps");

/*
 * Per CPU: where its preempt count is, and the GTP-U packets user processes
 * sent from it (ip_send_skb/ip6_send_skb: UDP, ping and raw sockets), known
 * by the skb's data buffer, which clones share (a packet tap makes the
 * receive path clone the skb). A packet is queued to the backlog of the CPU
 * that sends it and processed there (the send's bh-enable, or a later
 * softirq of that CPU), so the mark is looked up where it was written, and a
 * plain store replaces the update of a hash map (an allocation and two
 * locks per packet). Slots are direct-mapped: a mark that a later one
 * overwrites (GTP_MARK_SLOTS packets sent and not yet processed on one CPU,
 * or a collision) leaves its packet reported as backlog, never credited to
 * the wrong process. With RPS steering packets to other CPUs, those CPUs
 * find no mark: backlog too.
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct gtp_cpu);
} gtp_cpu_state SEC(".maps");

/* Unused: makes the compiler emit the record's BTF for the Go bindings. */
struct gtp_event _gtp_event_btf;

/*
 * Who carries this packet? Softirq work runs on whatever task the CPU was
 * running: the task's own system call (a gNB's sendmsg runs the receive path
 * on bh enable), the idle task, ksoftirqd, or a user task that an IRQ
 * interrupted. Only the first is the packet's owner. The frame at the top of
 * a user task's stack says how it entered the kernel: an interrupt from user
 * mode leaves orig_ax at -1, a system call its number. An IRQ that arrives
 * while the task is already in a system call leaves that frame alone, so the
 * number alone would credit the softirq run on that IRQ's exit to whatever
 * call the task was in (a Go runtime thread's madvise, say): only calls that
 * move packets or TUN data count as the owner's. (x86-64 numbers.)
 */
static __always_inline bool moves_packets(long nr)
{
	switch (nr) {
	case 0:   /* read */
	case 1:   /* write */
	case 17:  /* pread64 */
	case 18:  /* pwrite64 */
	case 19:  /* readv */
	case 20:  /* writev */
	case 40:  /* sendfile */
	case 44:  /* sendto */
	case 45:  /* recvfrom */
	case 46:  /* sendmsg */
	case 47:  /* recvmsg */
	case 275: /* splice */
	case 295: /* preadv */
	case 296: /* pwritev */
	case 299: /* recvmmsg */
	case 307: /* sendmmsg */
	case 327: /* preadv2 */
	case 328: /* pwritev2 */
	case 426: /* io_uring_enter */
		return true;
	}
	return false;
}

static __always_inline struct gtp_cpu *this_cpu(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&gtp_cpu_state, &zero);
}

/*
 * Is this CPU serving softirqs (NET_RX, NET_TX: the packet work a call's
 * bh-enable or an IRQ's exit runs)? One read of per-CPU data: the preempt
 * count's address is worked out on the CPU's first call and kept in pc.
 * Brackets on net_rx_action alone let other softirqs' work through
 * (bench/results/gtp-softirq/).
 */
static __always_inline bool serving_softirq(struct gtp_cpu *pc)
{
	__u64 addr = pc->preempt_count, off = 0;
	__u32 count = 0;

	if (!preempt_count_addr || !per_cpu_offset_addr)
		return false;
	if (!addr) {
		__u64 cpu = bpf_get_smp_processor_id();

		if (bpf_probe_read_kernel(&off, sizeof(off), (void *)(per_cpu_offset_addr + cpu * sizeof(off))))
			return false;
		addr = preempt_count_addr + off;
		pc->preempt_count = addr;
	}
	if (bpf_probe_read_kernel(&count, sizeof(count), (void *)addr))
		return false;
	return count & SOFTIRQ_OFFSET;
}

/* The task and its entry frame are BTF-typed: plain loads, no helper calls. */
static __always_inline __u32 classify(struct task_struct *t, __u32 tgid)
{
	if (tgid == 0)
		return GTP_CTX_IDLE;
	if (t->flags & PF_KTHREAD)
		return GTP_CTX_KTHREAD;
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(t);
	if (!regs)
		return GTP_CTX_INTERRUPT;
	long nr = regs->orig_ax;
	if (nr < 0 || !moves_packets(nr))
		return GTP_CTX_INTERRUPT;
	return GTP_CTX_PROCESS;
}

/* A sent packet's slot in its CPU's marks (a multiplicative hash: heads are
 * slab objects, so their low bits are mostly alike). */
static __always_inline struct gtp_mark *mark_slot(struct gtp_cpu *pc, __u64 head)
{
	__u64 i = (head * 0x9E3779B97F4A7C15ULL) >> (64 - GTP_MARK_BITS);

	if (i >= GTP_MARK_SLOTS)
		return NULL;
	return &pc->marks[i];
}

/*
 * tun.c's private device struct: only its dev pointer is read, relocated
 * against the tun module's BTF (or vmlinux's when tun is built in). Copies
 * for other functions never reach the read (tun_arg is -1, a constant the
 * verifier prunes on), so they load without tun.
 */
struct tun_struct___swl {
	struct net_device *dev;
} __attribute__((preserve_access_index));

/*
 * A packet-moving call's bh-enable runs the NET_RX softirq, and with it every
 * packet pending on that CPU, not only the caller's: a backlog another
 * sender queued, a qdisc's delayed packets, a NIC's. Inside a softirq the
 * caller owns the packet only if it sent it (its mark in gtp_cpu_state); otherwise
 * the work is reported as the CPU's. Outside the softirq, a function runs in
 * the call's own send path (a packet it routes into a gtp device) or in a
 * TUN read or write, and belongs to the caller. The clock is read only when
 * the mark is the caller's, to see that it is recent.
 */
static __always_inline __u32 owner(void *ctx, struct task_struct *t, __u32 tgid)
{
	__u32 kind = classify(t, tgid);
	struct gtp_cpu *pc;
	struct gtp_mark *m;
	__u64 skb = 0, head;

	if (kind != GTP_CTX_PROCESS)
		return kind;
	pc = this_cpu();
	if (!pc || !serving_softirq(pc))
		return kind;
	if (skb_arg < 0 || bpf_get_func_arg(ctx, skb_arg, &skb) || !skb)
		return GTP_CTX_BACKLOG;
	head = (__u64)BPF_CORE_READ((struct sk_buff *)skb, head);
	m = mark_slot(pc, head);
	if (m && head && m->head == head && m->tgid == tgid && bpf_ktime_get_ns() - m->ts_ns < MARK_TTL_NS)
		return GTP_CTX_PROCESS;
	return GTP_CTX_BACKLOG;
}

static __always_inline struct net_device *dev_of(void *ctx)
{
	__u64 v = 0;

	if (dev_arg >= 0 && bpf_get_func_arg(ctx, dev_arg, &v) == 0)
		return (struct net_device *)v;
	if (skb_arg >= 0 && bpf_get_func_arg(ctx, skb_arg, &v) == 0 && v)
		return BPF_CORE_READ((struct sk_buff *)v, dev);
	if (tun_arg >= 0 && bpf_get_func_arg(ctx, tun_arg, &v) == 0 && v)
		return BPF_CORE_READ((struct tun_struct___swl *)v, dev);
	return NULL;
}

/*
 * The count of this call's key: a process's entry in gtp_counts (created on
 * its first call, then added to in place) or this CPU's slot for the
 * function and context. *first says the call is the key's first.
 */
static __always_inline struct gtp_count *count_call(__u32 kind, __u32 tgid, bool *first)
{
	struct gtp_count *c;
	__u32 zero = 0;

	if (kind == GTP_CTX_PROCESS) {
		struct gtp_key key = { .tgid = tgid, .func = func_id };

		c = bpf_map_lookup_elem(&gtp_counts, &key);
		if (c) {
			__sync_fetch_and_add(&c->packets, 1);
			return c;
		}
		struct gtp_count init = { .packets = 1 };
		*first = true;
		bpf_map_update_elem(&gtp_counts, &key, &init, BPF_NOEXIST);
		return bpf_map_lookup_elem(&gtp_counts, &key);
	}
	struct gtp_cpu_counts *cc = bpf_map_lookup_elem(&gtp_cpu_work, &zero);
	__u32 i = func_id * GTP_NCTX + kind;

	if (!cc || i >= GTP_MAX_FUNCS * GTP_NCTX)
		return NULL;
	c = &cc->c[i];
	/* Atomic although per CPU: a softirq can interrupt a program run in
	 * process context on the same CPU and count into the same slot. */
	*first = __sync_fetch_and_add(&c->packets, 1) == 0;
	return c;
}

/* Whether the call gets a ring record: the key's first call, then the first
 * one in each epoch (racy across CPUs: at worst one extra record). */
static __always_inline bool due(struct gtp_count *c, bool first)
{
	__u32 zero = 0;
	__u64 *epoch;

	if (!emit_interval_ns)
		return true;
	epoch = bpf_map_lookup_elem(&gtp_epoch, &zero);
	if (!epoch)
		return first;
	if (!c)
		return first; /* a new entry evicted at once: record its first call */
	if (!first && c->epoch == *epoch)
		return false;
	c->epoch = *epoch;
	return true;
}

SEC("fentry/gtp_encap_recv")
int gtp_fentry(void *ctx)
{
	struct task_struct *t = bpf_get_current_task_btf();
	__u32 tgid = t->tgid;
	__u32 kind = owner(ctx, t, tgid);
	bool first = false;
	struct gtp_count *c = count_call(kind, tgid, &first);

	if (!due(c, first))
		return 0;

	struct gtp_event *e = bpf_ringbuf_reserve(&gtp_events, sizeof(*e), 0);
	if (!e) {
		__u32 zero = 0;
		__u64 *d = bpf_map_lookup_elem(&gtp_drops, &zero);
		if (d)
			(*d)++;
		return 0;
	}
	e->ts_ns = bpf_ktime_get_ns();
	e->pid = t->pid;
	e->tgid = tgid;
	e->cpu = bpf_get_smp_processor_id();
	e->func = func_id;
	e->ctx = kind;
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	struct net_device *dev = dev_of(ctx);
	e->ifindex = dev ? BPF_CORE_READ(dev, ifindex) : 0;
	e->ifname[0] = 0;
	if (dev)
		bpf_probe_read_kernel_str(e->ifname, sizeof(e->ifname), &dev->name);
	bpf_ringbuf_submit(e, 0);
	return 0;
}

/*
 * Marks a GTP-U packet (UDP to GTPU_PORT) that a process sends, for owner().
 * Other packets cost a read of skb->head (a pointer to bytes: read as a
 * number, so that offsets can be added), two loads of the typed skb and two
 * reads of its headers.
 */
static __always_inline void mark_sent(struct sk_buff *skb, __u32 proto_off)
{
	unsigned char *head = BPF_CORE_READ(skb, head);
	__u16 nh = skb->network_header, th = skb->transport_header;
	struct task_struct *t;
	struct gtp_cpu *pc;
	struct gtp_mark *m;
	__u8 proto = 0;
	__u16 dport = 0;
	__u32 tgid;

	if (bpf_probe_read_kernel(&proto, sizeof(proto), head + nh + proto_off) || proto != IPPROTO_UDP)
		return;
	if (bpf_probe_read_kernel(&dport, sizeof(dport), head + th + 2) || dport != bpf_htons(GTPU_PORT))
		return;
	t = bpf_get_current_task_btf();
	tgid = t->tgid;
	pc = this_cpu();
	if (!pc || serving_softirq(pc) || classify(t, tgid) != GTP_CTX_PROCESS)
		return; /* sent by the kernel (in softirq, a kthread) or outside a packet-moving call */
	m = mark_slot(pc, (__u64)head);
	if (!m)
		return;
	/* Free the slot first: an interrupt on this CPU that looks at it while
	 * it is rewritten finds no mark rather than half of two. */
	m->head = 0;
	barrier();
	m->ts_ns = bpf_ktime_get_ns();
	m->tgid = tgid;
	barrier();
	m->head = (__u64)head;
}

SEC("fentry/ip_send_skb")
int BPF_PROG(mark_ip4, struct net *net, struct sk_buff *skb)
{
	mark_sent(skb, 9); /* struct iphdr's protocol */
	return 0;
}

SEC("fentry/ip6_send_skb")
int BPF_PROG(mark_ip6, struct sk_buff *skb)
{
	mark_sent(skb, 6); /* struct ipv6hdr's nexthdr */
	return 0;
}
