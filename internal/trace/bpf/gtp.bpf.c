// SPDX-License-Identifier: GPL-2.0-only
//go:build ignore

/*
 * GTP-U (and TUN) path tracer. One copy of gtp_fentry is loaded per traced kernel
 * function (the loader sets the attach target and the constants below), all
 * copies sharing the maps. Every call is counted per (task, function) so
 * nothing is lost when user space is slow; the ring buffer gets the first
 * call of a task and then at most one record per emit_interval_ns, so a
 * packet flood cannot flood user space. Two small programs beside them
 * (mark_ip4, mark_ip6) and the CPU's preempt count tell a caller's own
 * packets from the ones its softirq happens to run: see owner().
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
/* Tasks and CPUs tracked at once; least recently used ones are evicted. */
#define MAX_KEYS 16384
/* GTP-U's UDP port (3GPP TS 29.281), the destination of every GTP-U packet. */
#define GTPU_PORT 2152
/* Sent GTP-U packets remembered at once (see gtp_sent). */
#define MAX_SENT 8192
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
/* Minimum gap between two ring records of the same key (ns); 0: every call. */
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

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_KEYS);
	__type(key, struct gtp_key);
	__type(value, struct gtp_count);
} gtp_counts SEC(".maps");

/* Ring records dropped because the ring was full. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} gtp_drops SEC(".maps");

/*
 * GTP-U packets user processes sent (ip_send_skb/ip6_send_skb: UDP, ping and
 * raw sockets), keyed by the skb's data buffer, which clones share (a packet
 * tap makes the receive path clone the skb). Sender and receiver run on the
 * same CPU (the send's bh-enable processes it), so per-CPU LRU lists fit.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_SENT);
	__uint(map_flags, BPF_F_NO_COMMON_LRU);
	__type(key, __u64);
	__type(value, struct gtp_mark);
} gtp_sent SEC(".maps");

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

/*
 * Is this CPU serving softirqs (NET_RX, NET_TX: the packet work a call's
 * bh-enable or an IRQ's exit runs)? Two reads of per-CPU data; brackets on
 * net_rx_action alone let other softirqs' work through (bench/results/gtp-softirq/).
 */
static __always_inline bool serving_softirq(void)
{
	__u64 off = 0, cpu = bpf_get_smp_processor_id();
	__u32 count = 0;

	if (!preempt_count_addr || !per_cpu_offset_addr)
		return false;
	if (bpf_probe_read_kernel(&off, sizeof(off), (void *)(per_cpu_offset_addr + cpu * sizeof(off))))
		return false;
	if (bpf_probe_read_kernel(&count, sizeof(count), (void *)(preempt_count_addr + off)))
		return false;
	return count & SOFTIRQ_OFFSET;
}

static __always_inline __u32 classify(struct task_struct *t, __u32 tgid)
{
	if (tgid == 0)
		return GTP_CTX_IDLE;
	if (BPF_CORE_READ(t, flags) & PF_KTHREAD)
		return GTP_CTX_KTHREAD;
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(t);
	if (!regs)
		return GTP_CTX_INTERRUPT;
	long nr = BPF_CORE_READ(regs, orig_ax);
	if (nr < 0 || !moves_packets(nr))
		return GTP_CTX_INTERRUPT;
	return GTP_CTX_PROCESS;
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
 * caller owns the packet only if it sent it (gtp_sent); otherwise the work
 * is reported as the CPU's. Outside the softirq, a function runs in the
 * call's own send path (a packet it routes into a gtp device) or in a TUN
 * read or write, and belongs to the caller.
 */
static __always_inline __u32 owner(void *ctx, struct task_struct *t, __u32 tgid, __u64 now)
{
	__u32 kind = classify(t, tgid);
	struct gtp_mark *m;
	__u64 skb = 0, key;

	if (kind != GTP_CTX_PROCESS || !serving_softirq())
		return kind;
	if (skb_arg < 0 || bpf_get_func_arg(ctx, skb_arg, &skb) || !skb)
		return GTP_CTX_BACKLOG;
	key = (__u64)BPF_CORE_READ((struct sk_buff *)skb, head);
	m = bpf_map_lookup_elem(&gtp_sent, &key);
	if (m && m->tgid == tgid && now - m->ts_ns < MARK_TTL_NS)
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

SEC("fentry/gtp_encap_recv")
int gtp_fentry(void *ctx)
{
	struct task_struct *t = bpf_get_current_task_btf();
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, cpu = bpf_get_smp_processor_id();
	__u64 now = bpf_ktime_get_ns();
	__u32 kind = owner(ctx, t, tgid, now);
	struct gtp_key key = {
		.tgid = kind == GTP_CTX_PROCESS ? tgid : 0,
		.func = func_id,
		.cpu = kind == GTP_CTX_PROCESS ? 0xffffffff : cpu,
		.ctx = kind,
	};

	struct gtp_count *c = bpf_map_lookup_elem(&gtp_counts, &key);
	if (c) {
		__sync_fetch_and_add(&c->packets, 1);
		if (now - c->last_emit_ns < emit_interval_ns)
			return 0;
		c->last_emit_ns = now; /* racy across CPUs: at worst one extra record */
	} else {
		struct gtp_count init = { .packets = 1, .last_emit_ns = now };
		bpf_map_update_elem(&gtp_counts, &key, &init, BPF_NOEXIST);
	}

	struct gtp_event *e = bpf_ringbuf_reserve(&gtp_events, sizeof(*e), 0);
	if (!e) {
		__u32 zero = 0;
		__u64 *d = bpf_map_lookup_elem(&gtp_drops, &zero);
		if (d)
			(*d)++;
		return 0;
	}
	e->ts_ns = now;
	e->pid = (__u32)id;
	e->tgid = tgid;
	e->cpu = cpu;
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
 * Other packets cost a few reads of the skb and its headers.
 */
static __always_inline void mark_sent(struct sk_buff *skb, __u32 proto_off)
{
	unsigned char *head = BPF_CORE_READ(skb, head);
	__u16 nh = BPF_CORE_READ(skb, network_header), th = BPF_CORE_READ(skb, transport_header);
	struct task_struct *t = bpf_get_current_task_btf();
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	__u8 proto = 0;
	__u16 dport = 0;
	__u64 key = (__u64)head;

	if (bpf_probe_read_kernel(&proto, sizeof(proto), head + nh + proto_off) || proto != IPPROTO_UDP)
		return;
	if (bpf_probe_read_kernel(&dport, sizeof(dport), head + th + 2) || dport != bpf_htons(GTPU_PORT))
		return;
	if (serving_softirq() || classify(t, tgid) != GTP_CTX_PROCESS)
		return; /* sent by the kernel (in softirq, a kthread) or outside a packet-moving call */

	struct gtp_mark m = { .ts_ns = bpf_ktime_get_ns(), .tgid = tgid };
	bpf_map_update_elem(&gtp_sent, &key, &m, BPF_ANY);
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
