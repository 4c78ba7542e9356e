// SPDX-License-Identifier: GPL-2.0-only
//go:build ignore

// Service load balancer at tc ingress, IPv4 and IPv6, TCP and UDP.
//
// One program on every pod-facing interface and on the node's uplink:
//   client -> frontend  forward: pick a backend, DNAT (and SNAT for NodePort
//                       and hairpin), record a forward and a reply session.
//   backend -> client   reply: the reply session restores the frontend tuple.
// Translated packets are redirected straight to the egress device found by a
// FIB lookup, so they never reach the node's netfilter hooks and create no
// nf_conntrack entries; our LRU session map is the only connection state.
//
// Both families run one data path. Each family has its own types and maps
// (lb.h: IPv6 keys are 16-byte addresses, the IPv4 ones stay small), named
// alike but for a suffix: none for IPv4, 6 for IPv6 (struct flow and struct
// flow6, sessions and sessions6). Every session operation (create, look up,
// reclaim, sweep) is written once, as a DEFINE_* macro over that suffix F,
// and expanded once per family below it; the addr_* helpers take either
// kind of address. Only what the headers make different is written per
// family: the IP header rewrite (IPv4's checksum and TTL, IPv6's hop limit),
// IPv4 fragments and the ICMP errors; those share the helpers for the rest.
//
// The node's own connections are balanced at the socket by sock.bpf.c, a
// compilation unit of its own. What both need is in headers: the types
// (lb.h), the maps they share (maps.h), the address helpers (addr.h) and
// the choice of a backend (backend.h, pick_backend and source_allowed).

#include <stdbool.h>
#include <stddef.h>
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "lb.h"
#include "addr.h"
#include "backend.h"
#include "maps.h"

// Sizes are defaults; the loader overrides max_entries from the config.
// The maps the socket programs use too, and their sizes, are in maps.h.
#define MAX_FRAGS 8192

#define AF_INET 2
#define AF_INET6 10
// <linux/icmp.h> drags in libc headers, so the few ICMP bits live here.
// ICMPv6 shares the first 8 bytes' layout.
#define ICMP_DEST_UNREACH 3
#define ICMP_TIME_EXCEEDED 11
#define ICMP_PARAMETERPROB 12
#define ICMPV6_DEST_UNREACH 1
#define ICMPV6_PARAMPROB 4 // 2 packet too big and 3 time exceeded lie between
struct icmphdr {
	__u8 type;
	__u8 code;
	__sum16 checksum;
	__be32 rest;
};
#define IP_MF 0x2000
#define IP_OFFSET 0x1fff
#define TCP_FLAG_FIN 0x01
#define TCP_FLAG_SYN 0x02
#define TCP_FLAG_RST 0x04
#define TCP_FLAG_ACK 0x10

// No VLAN tags: the program runs on veths and plain Ethernet uplinks. IPv6
// packets with extension headers go to the stack, so their L4 header is at
// a fixed offset.
#define IP_OFF ETH_HLEN
#define L4_OFF6 (IP_OFF + sizeof(struct ipv6hdr))

// Source ports handed out for SNAT, host order, inclusive. The loader
// refuses ranges that overlap the NodePort range; the check below is a
// second line of defence so a bad constant can never leak such a port.
const volatile __u16 snat_port_min = 32768;
const volatile __u16 snat_port_max = 60999;
const volatile __u16 nodeport_min = 30000;
const volatile __u16 nodeport_max = 32767;
// Source address for hairpin connections (a backend reaching its own
// service): the backend would otherwise answer itself directly. All zero:
// hairpin connections of that family are dropped (IPv6 hairpin off).
const volatile __be32 hairpin_addr = 0;
const volatile __be32 hairpin_addr6[4] = {};
// Redirect translated packets via a FIB lookup (production). Unit tests turn
// it off to read the rewritten packet back from BPF_PROG_TEST_RUN.
const volatile bool fib_redirect = true;
// A session's last_seen is rewritten only once it is this much behind, so
// a busy connection does not write its entry (and bounce its cache line
// between CPUs) on every packet. The sweeper adds it to every idle timeout.
const volatile __u64 last_seen_grain_ns = 1000000000ULL;

// The maps each family has to itself.
//
// sessions: forward and reply entries share one LRU map so both compete
// for the same capacity; the loader sizes it so eviction only happens under
// overload. sweep_batch: the keys user space hands the sweep.
#define SESSION_MAPS(F)                                                                                   \
	MAP(BPF_MAP_TYPE_LRU_HASH, MAX_SESSIONS, struct flow##F, struct session##F) sessions##F SEC(".maps"); \
	MAP(BPF_MAP_TYPE_ARRAY, SWEEP_BATCH, __u32, struct flow##F) sweep_batch##F SEC(".maps");

SESSION_MAPS()
SESSION_MAPS(6)

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_FRAGS);
	__type(key, struct frag_key);
	__type(value, struct frag_val);
} frags SEC(".maps");

// Interfaces (by ifindex) that are one end of a veth pair whose other end is
// in a pod's namespace. Packets for them skip the host-side transmit and
// backlog and enter the pod directly (bpf_redirect_peer).
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u8);
} peer_ifaces SEC(".maps");

// port_tries[i]: allocations that succeeded on try i+1; [SNAT_TRIES]: failed.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SNAT_TRIES + 1);
	__type(key, __u32);
	__type(value, __u64);
} port_tries SEC(".maps");

static __always_inline void count_tries(__u32 idx)
{
	__u64 *n = bpf_map_lookup_elem(&port_tries, &idx);
	if (n)
		(*n)++;
}

// A translated packet, by direction; frag: a later IPv4 fragment.
static __always_inline void count_packet(__u32 session_flags, bool frag)
{
	struct lb_stats *st = lookup_stats();

	if (!st)
		return;
	if (session_flags & SESS_F_REPLY)
		st->reply_packets++;
	else
		st->fwd_packets++;
	if (frag)
		st->frag_translated++;
}

// addr_zero: whether an address (addr.h) is all zero.
#define addr_zero(a) (!words_or((const volatile __be32 *)&(a), addr_words(a)))
static __always_inline __be32 words_or(const volatile __be32 *a, int n)
{
	__be32 x = 0;

#pragma unroll
	for (int i = 0; i < n; i++)
		x |= a[i];
	return x;
}

// Ones' complement arithmetic for incremental checksum updates (RFC 1624):
// a diff is the 32-bit sum of ~old and new words with end-around carry,
// the form bpf_l4_csum_replace takes when its size is 0.
static __always_inline __u32 csum_add(__u32 a, __u32 b)
{
	a += b;
	return a + (a < b);
}

static __always_inline __u16 csum_fold(__u32 sum)
{
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return ~sum;
}

static __always_inline __u32 words_csum_diff(const __be32 *from, const __be32 *to, int n)
{
	__u32 d = 0;

#pragma unroll
	for (int i = 0; i < n; i++)
		d = csum_add(d, csum_add(~from[i], to[i]));
	return d;
}

// The diff for rewriting address from into to (either family).
#define addr_csum_diff(from, to) \
	words_csum_diff((const __be32 *)&(from), (const __be32 *)&(to), addr_words(from))

// The diff for rewriting two 16-bit ports.
static __always_inline __u32 ports_csum_diff(__be16 sport, __be16 dport, __be16 to_sport, __be16 to_dport)
{
	return csum_add(csum_add(~(__u32)sport & 0xffff, to_sport), csum_add(~(__u32)dport & 0xffff, to_dport));
}

// A closed connection quiet for this long gives its SNAT port back to the
// next allocation that lands on it, as a new SYN may take over a TIME_WAIT
// 4-tuple. last_seen lags by up to last_seen_grain_ns, so that is at least
// a second of silence after the FIN or RST. Left to the sweep (closingIdle,
// 10 s, plus up to a sweep interval), closed connections held their ports
// for 11-16 s: at 13,000 NodePort connections/s more than the 28,000 ports
// per backend, and allocations began to fail (drop_no_port, a 1 s SYN retry).
#define CLOSED_REUSE_NS (2 * 1000000000ULL)

static __always_inline bool port_allowed(__u16 port)
{
	return port >= snat_port_min && port <= snat_port_max &&
	       (port < nodeport_min || port > nodeport_max);
}

static __always_inline __u16 random_port(void)
{
	__u32 span = (__u32)snat_port_max - snat_port_min + 1;

	return snat_port_min + bpf_get_prandom_u32() % span;
}

#define flow_hash(f) hash_mix(addr_fold((f)->saddr), addr_fold((f)->daddr), (f)->sport, (f)->dport, (f)->proto)

// Inside the DEFINE_* macros comments are /* */: a // comment would swallow
// the rest of the macro.

// reply_key: the reply tuple a forward session's packets will come back
// with. delete_pair: a forward entry and its reply entry.
#define DEFINE_PAIR_KEYS(F)                                                                      \
	static __always_inline void reply_key##F(struct flow##F *rk, const struct session##F *fwd, \
						 __u8 proto)                                       \
	{                                                                                        \
		addr_set(rk->saddr, fwd->daddr);                                                 \
		addr_set(rk->daddr, fwd->saddr);                                                 \
		rk->sport = fwd->dport;                                                          \
		rk->dport = fwd->sport;                                                          \
		rk->proto = proto;                                                               \
		rk->pad[0] = rk->pad[1] = rk->pad[2] = 0;                                        \
	}                                                                                        \
                                                                                                 \
	static __always_inline void delete_pair##F(const struct flow##F *f,                       \
						   const struct session##F *fwd)                  \
	{                                                                                        \
		struct flow##F rk;                                                               \
                                                                                                 \
		reply_key##F(&rk, fwd, f->proto);                                                \
		bpf_map_delete_elem(&sessions##F, &rk);                                          \
		bpf_map_delete_elem(&sessions##F, f);                                            \
	}

// reclaim_closed frees the reply tuple rk if its connection has closed
// (FIN or RST seen either way) and gone quiet, or if it is an orphan (no
// forward entry pointing back at it) as old; the caller then inserts there.
#define DEFINE_RECLAIM_CLOSED(F)                                                              \
	static __always_inline bool reclaim_closed##F(const struct flow##F *rk, __u64 now)      \
	{                                                                                     \
		struct session##F *rev = bpf_map_lookup_elem(&sessions##F, rk);               \
		struct flow##F fk, back;                                                      \
                                                                                              \
		if (!rev || !(rev->flags & SESS_F_REPLY))                                     \
			return false;                                                         \
		reply_key##F(&fk, rev, rk->proto);                                            \
		struct session##F *fwd = bpf_map_lookup_elem(&sessions##F, &fk);              \
		__u64 last = rev->last_seen;                                                  \
		bool closing = rev->flags & SESS_F_CLOSING;                                   \
		bool paired = false;                                                          \
                                                                                              \
		if (fwd && !(fwd->flags & SESS_F_REPLY)) {                                    \
			reply_key##F(&back, fwd, rk->proto);                                  \
			paired = !__builtin_memcmp(&back, rk, sizeof(back));                  \
		}                                                                             \
		if (paired) {                                                                 \
			closing |= fwd->flags & SESS_F_CLOSING;                               \
			if (fwd->last_seen > last)                                            \
				last = fwd->last_seen;                                        \
		}                                                                             \
		if ((paired && !closing) || last > now || now - last < CLOSED_REUSE_NS)       \
			return false;                                                         \
		if (paired)                                                                   \
			bpf_map_delete_elem(&sessions##F, &fk);                               \
		bpf_map_delete_elem(&sessions##F, rk);                                        \
		return true;                                                                  \
	}

// Choose a backend and insert the session pair: 0 with *out the forward
// entry to apply, or -1 after counting the drop reason. attr: IPv6 calls it
// out of line (__noinline), which keeps its bigger keys within the stack.
#define DEFINE_CREATE_SESSION(F, attr)                                                              \
	static attr int create_session##F(const struct flow##F *f, const struct svc_val##F *svc,      \
					  struct session##F *out)                                     \
	{                                                                                           \
		struct affinity_key##F ak = { .svc_id = svc->id };                                  \
		struct lb_stats *st = lookup_stats();                                               \
		__u64 now = bpf_ktime_get_ns();                                                     \
		__u32 backend_id;                                                                   \
		bool hit;                                                                           \
                                                                                                    \
		addr_set(ak.client, f->saddr);                                                      \
		/* Random spreads best for one node; Maglev gives a flow the same                   \
		   backend on every LB node and after a restart, and moves few                      \
		   flows when the backend set changes. */                                           \
		__u32 h = (svc->flags & SVC_F_MAGLEV) ? flow_hash(f) : bpf_get_prandom_u32();       \
		struct backend##F *b = pick_backend##F(svc, &ak, h, now, &backend_id, &hit);        \
		if (hit && st)                                                                      \
			st->affinity_hits++;                                                        \
		if (!b) {                                                                           \
			if (st)                                                                     \
				st->drop_no_backend++;                                              \
			return -1;                                                                  \
		}                                                                                   \
                                                                                                    \
		struct session##F fwd = {                                                           \
			.sport = f->sport, .dport = b->port, .backend_id = backend_id, .last_seen = now, \
		};                                                                                  \
		struct session##F rev = {                                                           \
			.sport = f->dport, .dport = f->sport, .backend_id = backend_id,             \
			.last_seen = now, .flags = SESS_F_REPLY,                                    \
		};                                                                                  \
		addr_set(fwd.saddr, f->saddr);                                                      \
		addr_set(fwd.daddr, b->addr);                                                       \
		addr_set(rev.saddr, f->daddr);                                                      \
		addr_set(rev.daddr, f->saddr);                                                      \
		bool snat = false, tried_own = false;                                               \
                                                                                                    \
		if (svc->flags & SVC_F_SNAT) {                                                      \
			/* A node address, so replies come back through this node: the one          \
			   the client reached (NodePort), or the configured one (external           \
			   and load-balancer IPs). */                                               \
			if (addr_zero(svc->snat_addr))                                              \
				addr_set(fwd.saddr, f->daddr);                                      \
			else                                                                        \
				addr_set(fwd.saddr, svc->snat_addr);                                \
			snat = true;                                                                \
		} else if (addr_eq(b->addr, f->saddr)) {                                            \
			if (addr_zero(hairpin_addr##F)) {                                           \
				if (st)                                                             \
					st->drop_no_backend++;                                      \
				return -1;                                                          \
			}                                                                           \
			addr_set(fwd.saddr, hairpin_addr##F);                                       \
			snat = true;                                                                \
		}                                                                                   \
                                                                                                    \
		struct flow##F rk;                                                                  \
		reply_key##F(&rk, &fwd, f->proto);                                                  \
                                                                                                    \
		if (!snat) {                                                                        \
			/* Keep the client's tuple unless another frontend already maps the         \
			   same client port onto this backend; then translate the port. */          \
			if (bpf_map_update_elem(&sessions##F, &rk, &rev, BPF_NOEXIST) == 0)         \
				goto insert_fwd;                                                    \
			addr_set(fwd.saddr, f->saddr);                                              \
			tried_own = true;                                                           \
		}                                                                                   \
                                                                                                    \
		fwd.flags |= SESS_F_SNAT;                                                           \
		rev.flags |= SESS_F_SNAT;                                                           \
		__u32 i;                                                                            \
		bool ok = false;                                                                    \
		for (i = 0; i < SNAT_TRIES; i++) {                                                  \
			__u16 port = bpf_ntohs(f->sport);                                           \
                                                                                                    \
			/* First choice is the client's own port, as netfilter does: it is          \
			   usually free and keeps the tuple recognisable in captures. */            \
			if (i > 0 || tried_own || !port_allowed(port))                              \
				port = random_port();                                               \
			if (!port_allowed(port))                                                    \
				continue;                                                           \
			rk.dport = bpf_htons(port);                                                 \
			if (bpf_map_update_elem(&sessions##F, &rk, &rev, BPF_NOEXIST) == 0 ||       \
			    (reclaim_closed##F(&rk, now) &&                                         \
			     bpf_map_update_elem(&sessions##F, &rk, &rev, BPF_NOEXIST) == 0)) {     \
				ok = true;                                                          \
				break;                                                              \
			}                                                                           \
		}                                                                                   \
		count_tries(ok ? i : SNAT_TRIES);                                                   \
		if (!ok) {                                                                          \
			if (st)                                                                     \
				st->drop_no_port++;                                                 \
			return -1;                                                                  \
		}                                                                                   \
		fwd.sport = rk.dport;                                                               \
		if (st)                                                                             \
			st->snat_allocations++;                                                     \
                                                                                                    \
	insert_fwd:                                                                                 \
		/* NOEXIST: if another CPU created this flow's session first, keep its              \
		   choice and withdraw ours, so a flow never has two reply entries. */              \
		if (bpf_map_update_elem(&sessions##F, f, &fwd, BPF_NOEXIST) != 0) {                 \
			bpf_map_delete_elem(&sessions##F, &rk);                                     \
			struct session##F *won = bpf_map_lookup_elem(&sessions##F, f);              \
			if (!won) {                                                                 \
				if (st)                                                             \
					st->drop_session_map++;                                     \
				return -1;                                                          \
			}                                                                           \
			*out = *won;                                                                \
			return 0;                                                                   \
		}                                                                                   \
		if (st)                                                                             \
			st->sessions_created++;                                                     \
		*out = fwd;                                                                         \
		return 0;                                                                           \
	}

// session_for: the session of flow f, refreshed, or a new one. It returns
// TC_ACT_OK with *s the tuple to write, or the packet's verdict:
// TC_ACT_UNSPEC (not service traffic) or TC_ACT_SHOT. has_l4: the packet
// carries its ports (a later IPv4 fragment may use a session, not open one).
#define DEFINE_SESSION_FOR(F)                                                                   \
	static __always_inline bool backend_alive##F(const struct session##F *s)                \
	{                                                                                       \
		__u32 id = s->backend_id;                                                       \
		struct backend##F *b = bpf_map_lookup_elem(&backends##F, &id);                  \
                                                                                                \
		return b && addr_eq(b->addr, s->daddr) && b->port == s->dport;                  \
	}                                                                                       \
                                                                                                \
	static __always_inline int session_for##F(const struct flow##F *f, __u8 tcp_flags,      \
						  bool has_l4, struct session##F *s)             \
	{                                                                                       \
		struct session##F *cur = bpf_map_lookup_elem(&sessions##F, f);                  \
                                                                                                \
		if (cur && !(cur->flags & SESS_F_REPLY)) {                                      \
			/* A removed backend's TCP connections drain where they are, as         \
			   kube-proxy leaves their conntrack entries alone: moving one would    \
			   only earn it a RST. UDP flows and new connections re-balance. */     \
			bool syn = (tcp_flags & (TCP_FLAG_SYN | TCP_FLAG_ACK)) == TCP_FLAG_SYN; \
			bool reopen = syn && (cur->flags & SESS_F_CLOSING);                     \
			bool gone = (f->proto == IPPROTO_UDP || syn) && !backend_alive##F(cur); \
			if (gone || reopen) {                                                   \
				if (gone)                                                       \
					STAT_INC(stale_backend);                                \
				*s = *cur;                                                      \
				delete_pair##F(f, s);                                           \
				cur = NULL;                                                     \
			}                                                                       \
		}                                                                               \
		if (cur) {                                                                      \
			/* Write the shared entry only when something changes (see              \
			   last_seen_grain_ns); a lost race only delays expiry. */              \
			__u64 now = bpf_ktime_get_ns();                                         \
			if (now - cur->last_seen > last_seen_grain_ns)                          \
				cur->last_seen = now;                                           \
			if ((tcp_flags & (TCP_FLAG_FIN | TCP_FLAG_RST)) &&                      \
			    !(cur->flags & SESS_F_CLOSING))                                     \
				cur->flags |= SESS_F_CLOSING;                                   \
			*s = *cur;                                                              \
			return TC_ACT_OK;                                                       \
		}                                                                               \
		struct svc_key##F k = { .port = f->dport, .proto = f->proto };                  \
		addr_set(k.addr, f->daddr);                                                     \
		struct svc_val##F *svc = bpf_map_lookup_elem(&services##F, &k);                 \
		if (!svc)                                                                       \
			return TC_ACT_UNSPEC;                                                   \
		if (!has_l4) {                                                                  \
			STAT_INC(drop_frag);                                                    \
			return TC_ACT_SHOT;                                                     \
		}                                                                               \
		struct src_range_key##F rk;                                                     \
		addr_set(rk.addr, f->saddr);                                                    \
		if (!source_allowed##F(svc, &rk))                                               \
			return TC_ACT_SHOT;                                                     \
		return create_session##F(f, svc, s) ? TC_ACT_SHOT : TC_ACT_OK;                  \
	}

// The sweep. User space reads the session maps in batches and passes the
// keys of entries whose own last_seen is old enough to be idle; this program
// decides and deletes, a batch per run. Deciding here, on each entry and
// its partner as they are at the moment of the delete, matters: between the
// read and the delete a packet may have woken the connection, or a SYN
// reopened the same tuple (the reopen and reclaim_closed paths delete the
// pair and insert a new one under the same keys). A delete decided from the
// snapshot took such a live connection's session with it, and its next
// packets missed. Lookup and delete are still two steps, but the window is
// a few instructions instead of the sweep's milliseconds.

// Whether a connection last seen at last is past its timeout.
static __always_inline bool sweep_expired(const struct sweep_args *a, __u8 proto, __u64 last, bool closing)
{
	__u64 idle = a->udp_idle;

	if (proto == IPPROTO_TCP)
		idle = closing ? a->closing_idle : a->tcp_idle;
	return last <= a->now && a->now - last > idle;
}

// sweep_one: key i of the batch. A forward entry goes with its reply entry
// once the connection, by the later of their last_seen and either's closing
// flag, is idle; a reply entry whose forward entry is gone or points
// elsewhere (LRU eviction, a lost creation race) goes alone once as old as
// a closed connection. The program inserts the reply entry just before the
// forward one, so an orphan younger than that may be a connection being
// created.
#define DEFINE_SWEEP_ONE(F)                                                                      \
	static long sweep_one##F(__u32 i, void *ctx)                                             \
	{                                                                                        \
		struct sweep_args *a = ctx;                                                      \
		struct flow##F *k = bpf_map_lookup_elem(&sweep_batch##F, &i);                    \
		struct session##F *s, *o;                                                        \
		struct flow##F ok, back;                                                         \
                                                                                                 \
		if (!k)                                                                          \
			return 1;                                                                \
		s = bpf_map_lookup_elem(&sessions##F, k);                                        \
		if (!s)                                                                          \
			return 0;                                                                \
		reply_key##F(&ok, s, k->proto);                                                  \
		o = bpf_map_lookup_elem(&sessions##F, &ok);                                      \
		if (o) { /* the partner only if it points back and faces the other way */        \
			reply_key##F(&back, o, k->proto);                                        \
			if (__builtin_memcmp(&back, k, sizeof(back)) ||                          \
			    !((o->flags ^ s->flags) & SESS_F_REPLY))                             \
				o = NULL;                                                        \
		}                                                                                \
		if (s->flags & SESS_F_REPLY) {                                                   \
			if (!o && sweep_expired(a, IPPROTO_TCP, s->last_seen, true) &&           \
			    bpf_map_delete_elem(&sessions##F, k) == 0)                           \
				a->deleted++;                                                    \
			return 0;                                                                \
		}                                                                                \
		__u64 last = s->last_seen;                                                       \
		bool closing = s->flags & SESS_F_CLOSING;                                        \
		if (o) {                                                                         \
			if (o->last_seen > last)                                                 \
				last = o->last_seen;                                             \
			closing |= o->flags & SESS_F_CLOSING;                                    \
		}                                                                                \
		if (!sweep_expired(a, k->proto, last, closing))                                  \
			return 0;                                                                \
		if (o && bpf_map_delete_elem(&sessions##F, &ok) == 0)                            \
			a->deleted++;                                                            \
		if (bpf_map_delete_elem(&sessions##F, k) == 0) {                                 \
			a->deleted++;                                                            \
			a->conns++;                                                              \
		}                                                                                \
		return 0;                                                                        \
	}

DEFINE_PAIR_KEYS()
DEFINE_PAIR_KEYS(6)
DEFINE_RECLAIM_CLOSED()
DEFINE_RECLAIM_CLOSED(6)
DEFINE_CREATE_SESSION(, __always_inline)
DEFINE_CREATE_SESSION(6, __noinline)
DEFINE_SESSION_FOR()
DEFINE_SESSION_FOR(6)
DEFINE_SWEEP_ONE()
DEFINE_SWEEP_ONE(6)

static __always_inline void *pkt_data(struct __sk_buff *skb) { return (void *)(long)skb->data; }
static __always_inline void *pkt_end(struct __sk_buff *skb) { return (void *)(long)skb->data_end; }

// Make the first len bytes directly accessible. They almost always are
// (headers sit in the linear area); a pull costs a copy only when not.
// Invalidates packet pointers.
static __always_inline int pull(struct __sk_buff *skb, __u32 len)
{
	if (pkt_data(skb) + len <= pkt_end(skb))
		return 0;
	if (len > skb->len || bpf_skb_pull_data(skb, len))
		return -1;
	return 0;
}

// The IP header (after Ethernet), or NULL if the packet is shorter than size.
static __always_inline void *ip_header(struct __sk_buff *skb, __u32 size)
{
	void *ip = pkt_data(skb) + IP_OFF;

	return ip + size > pkt_end(skb) ? NULL : ip;
}

// The ports of the TCP or UDP header at l4off and, for TCP, its flags;
// -1 if the packet is shorter (truncated: the stack drops it).
static __always_inline int load_ports(struct __sk_buff *skb, __u32 l4off, __u8 proto, __be16 *sport,
				      __be16 *dport, __u8 *tcp_flags)
{
	__u32 l4len = proto == IPPROTO_TCP ? sizeof(struct tcphdr) : sizeof(struct udphdr);

	if (pull(skb, l4off + l4len))
		return -1;
	void *end = pkt_end(skb);
	__u8 *l4 = pkt_data(skb) + l4off;
	if ((void *)(l4 + sizeof(struct udphdr)) > end)
		return -1;
	*sport = ((__be16 *)l4)[0];
	*dport = ((__be16 *)l4)[1];
	if (proto == IPPROTO_TCP) {
		if ((void *)(l4 + sizeof(struct tcphdr)) > end)
			return -1;
		*tcp_flags = l4[13];
	}
	return 0;
}

// Rewrite the packet to the tuple in `to` and send it on (translate4,
// translate6; the helpers below are theirs).
//
// The route is looked up first, with the translated addresses, so the packet
// is then written in one pass with direct packet access: addresses, ports,
// TTL or hop limit and MACs. The IPv4 header checksum is updated once, in
// the program, for all of its changes. The L4 checksum takes at most two
// helper calls, one for the addresses (pseudo header) and one for the
// ports: they must stay apart because for a CHECKSUM_PARTIAL skb (local
// senders, GSO) the checksum field holds only the pseudo-header sum, which
// the port change must not touch; the helper knows the skb's checksum state,
// we do not.

// fib_route looks up the route of the translated packet (p holds the
// family's fields) and returns false, counted, if the route discards it.
// *rc is the lookup's result. The lookup leaves packet pointers valid.
static __always_inline bool fib_route(struct __sk_buff *skb, struct bpf_fib_lookup *p, long *rc)
{
	p->ifindex = skb->ingress_ifindex;
	*rc = bpf_fib_lookup(skb, p, sizeof(*p), 0);
	if (*rc == BPF_FIB_LKUP_RET_BLACKHOLE || *rc == BPF_FIB_LKUP_RET_UNREACHABLE ||
	    *rc == BPF_FIB_LKUP_RET_PROHIBIT) {
		STAT_INC(drop_fib);
		return false;
	}
	return true;
}

// Whether we forward the packet ourselves (rc: the route lookup's result,
// -1 without one). Anything we cannot forward goes to the stack (which
// then may track it).
static __always_inline bool routed(long rc)
{
	bool redirect = rc == BPF_FIB_LKUP_RET_SUCCESS || rc == BPF_FIB_LKUP_RET_NO_NEIGH;

	if (fib_redirect && !redirect)
		STAT_INC(passed_to_stack);
	return redirect;
}

static __always_inline void set_macs(struct __sk_buff *skb, const struct bpf_fib_lookup *p, long rc)
{
	struct ethhdr *eth = pkt_data(skb);

	if (rc != BPF_FIB_LKUP_RET_SUCCESS || (void *)(eth + 1) > pkt_end(skb))
		return;
	__builtin_memcpy(eth->h_dest, p->dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, p->smac, ETH_ALEN);
}

// Offset of the checksum in a TCP, UDP or ICMP(v6) header.
static __always_inline __u32 l4_csum_off(__u8 l4proto)
{
	if (l4proto == IPPROTO_TCP)
		return offsetof(struct tcphdr, check);
	if (l4proto == IPPROTO_UDP)
		return offsetof(struct udphdr, check);
	return offsetof(struct icmphdr, checksum);
}

// The L4 part of a translation: the ports at l4off (unless !ports: ICMPv6)
// and the L4 checksum for them and, as a pseudo-header diff, for the
// addresses (addrs: they changed). mangled: BPF_F_MARK_MANGLED_0 where a
// zero checksum means none (IPv4 UDP). -1: drop the packet.
static __always_inline int rewrite_l4(struct __sk_buff *skb, __u32 l4off, __u8 l4proto, bool ports,
				      __u64 mangled, bool addrs, __u32 addr_diff, __be16 sport, __be16 dport)
{
	__u32 csum_off = l4off + l4_csum_off(l4proto);
	__u32 port_diff = 0;
	bool ports_changed = false;

	if (ports) {
		__be16 *p = pkt_data(skb) + l4off;
		if ((void *)(p + 2) > pkt_end(skb))
			return -1;
		ports_changed = p[0] != sport || p[1] != dport;
		if (ports_changed) {
			port_diff = ports_csum_diff(p[0], p[1], sport, dport);
			p[0] = sport;
			p[1] = dport;
		}
	}
	// The helpers invalidate packet pointers: every direct write is done.
	if (addrs && bpf_l4_csum_replace(skb, csum_off, 0, addr_diff, mangled | BPF_F_PSEUDO_HDR))
		return -1;
	if (ports_changed && bpf_l4_csum_replace(skb, csum_off, 0, port_diff, mangled))
		return -1;
	return 0;
}

// Send a translated packet on: to the stack unless routed, else out of the
// route's interface, into a pod's namespace directly where that is a veth.
static __always_inline int send_on(struct __sk_buff *skb, const struct bpf_fib_lookup *p, long rc, bool redirect)
{
	if (!redirect)
		return TC_ACT_OK;
	if (rc == BPF_FIB_LKUP_RET_NO_NEIGH) {
		// The slow path (the packet waits for resolution): user space
		// resolves backends' neighbours ahead so this stays rare. The
		// next hop's IPv4 address is the first word of its IPv6 one.
		STAT_INC(neigh_redirects);
		struct bpf_redir_neigh nh = { .nh_family = p->family };
		addr_set(nh.ipv6_nh, p->ipv6_dst);
		return bpf_redirect_neigh(p->ifindex, &nh, sizeof(nh), 0);
	}
	__u32 out = p->ifindex;
	if (bpf_map_lookup_elem(&peer_ifaces, &out))
		return bpf_redirect_peer(out, 0);
	return bpf_redirect(out, 0);
}

// l4proto: IPPROTO_TCP/UDP when the packet carries that header (not a
// later fragment), 0 otherwise (ICMP has no pseudo header).
static __always_inline int translate4(struct __sk_buff *skb, __u32 l4off, __u8 l4proto,
				      const struct flow *old, const struct session *to)
{
	struct iphdr *ip = ip_header(skb, sizeof(*ip));
	struct bpf_fib_lookup p = {};
	long rc = -1;

	if (!ip)
		return TC_ACT_SHOT;
	if (fib_redirect && ip->ttl > 1) { // TTL 1: the stack sends Time Exceeded
		p.family = AF_INET;
		p.tos = ip->tos;
		p.l4_protocol = ip->protocol;
		// tot_len stays 0: the helper then checks the skb against the egress
		// MTU itself, which is right for GSO packets (tot_len would be 64K).
		p.ipv4_src = to->saddr;
		p.ipv4_dst = to->daddr;
		if (!fib_route(skb, &p, &rc))
			return TC_ACT_SHOT;
	}
	bool redirect = routed(rc);

	__u32 addr_diff = csum_add(addr_csum_diff(old->saddr, to->saddr), addr_csum_diff(old->daddr, to->daddr));
	bool addrs = !addr_eq(old->saddr, to->saddr) || !addr_eq(old->daddr, to->daddr);
	__u32 l3_diff = addr_diff;
	ip->saddr = to->saddr;
	ip->daddr = to->daddr;
	if (redirect) {
		// We route, so we decrement the TTL like a router would.
		__u16 *ttl_proto = (__u16 *)&ip->ttl;
		__u16 before = *ttl_proto;
		ip->ttl--;
		l3_diff = csum_add(l3_diff, csum_add(~before & 0xffff, *ttl_proto));
		set_macs(skb, &p, rc);
	}
	if (addrs || redirect)
		ip->check = csum_fold(csum_add(l3_diff, ~(__u32)ip->check));

	// UDP checksum 0 means "none" and must stay 0.
	if (l4proto && rewrite_l4(skb, l4off, l4proto, true, l4proto == IPPROTO_UDP ? BPF_F_MARK_MANGLED_0 : 0,
				  addrs, addr_diff, to->sport, to->dport))
		return TC_ACT_SHOT;
	return send_on(skb, &p, rc, redirect);
}

// No header checksum, a hop limit instead of a TTL. ICMPv6 (l4proto) has
// a pseudo header too, and no ports to change; a zero UDP checksum is
// invalid in IPv6, so there is none to preserve. The addresses to replace
// are read from the header rather than passed in: the ICMPv6 path then
// keeps no copy of them, which holds its call chain within the 512 bytes
// of stack.
static __noinline int translate6(struct __sk_buff *skb, __u8 l4proto, const struct session6 *to)
{
	struct ipv6hdr *ip6 = ip_header(skb, sizeof(*ip6));
	struct bpf_fib_lookup p = {};
	long rc = -1;

	if (!ip6)
		return TC_ACT_SHOT;
	if (fib_redirect && ip6->hop_limit > 1) {
		p.family = AF_INET6;
		p.flowinfo = *(__be32 *)ip6 & bpf_htonl(0x0fffffff);
		p.l4_protocol = ip6->nexthdr;
		addr_set(p.ipv6_src, to->saddr);
		addr_set(p.ipv6_dst, to->daddr);
		if (!fib_route(skb, &p, &rc))
			return TC_ACT_SHOT;
	}
	bool redirect = routed(rc);

	__be32 *saddr = ip6->saddr.in6_u.u6_addr32, *daddr = ip6->daddr.in6_u.u6_addr32;
	__u32 addr_diff = csum_add(words_csum_diff(saddr, to->saddr, 4), words_csum_diff(daddr, to->daddr, 4));
	bool addrs = !words_eq(saddr, to->saddr, 4) || !words_eq(daddr, to->daddr, 4);
	addr_set(ip6->saddr.in6_u.u6_addr32, to->saddr);
	addr_set(ip6->daddr.in6_u.u6_addr32, to->daddr);
	if (redirect) {
		ip6->hop_limit--;
		set_macs(skb, &p, rc);
	}

	if (l4proto && rewrite_l4(skb, L4_OFF6, l4proto, l4proto != IPPROTO_ICMPV6, 0, addrs, addr_diff,
				  to->sport, to->dport))
		return TC_ACT_SHOT;
	return send_on(skb, &p, rc, redirect);
}

// Header of the packet quoted inside an ICMP error: IPv4 without options and
// the first 8 bytes of TCP/UDP, which hold both ports.
struct quoted {
	struct iphdr ip;
	__be16 sport;
	__be16 dport;
	__be32 rest;
};

static __always_inline __u16 ip_csum(const struct iphdr *ip)
{
	const __u16 *w = (const __u16 *)ip;
	__u32 sum = 0;

#pragma unroll
	for (int i = 0; i < (int)(sizeof(*ip) / 2); i++)
		sum += w[i];
	return csum_fold(sum);
}

// An ICMP error quotes a packet we translated on its way out; give the
// quoted packet and the outer addresses the tuple its sender knows, or the
// sender's socket never learns about the error (e.g. UDP port unreachable).
// Rare, so it keeps the simpler load/store helpers.
static __always_inline int handle_icmp4(struct __sk_buff *skb, const struct flow *outer, __u32 l4off)
{
	struct icmphdr ic;
	struct quoted q, old;

	if (bpf_skb_load_bytes(skb, l4off, &ic, sizeof(ic)))
		return TC_ACT_UNSPEC;
	if (ic.type != ICMP_DEST_UNREACH && ic.type != ICMP_TIME_EXCEEDED &&
	    ic.type != ICMP_PARAMETERPROB)
		return TC_ACT_UNSPEC;
	__u32 qoff = l4off + sizeof(ic);
	if (bpf_skb_load_bytes(skb, qoff, &q, sizeof(q)))
		return TC_ACT_UNSPEC;
	if (q.ip.ihl != 5 || (q.ip.protocol != IPPROTO_TCP && q.ip.protocol != IPPROTO_UDP))
		return TC_ACT_UNSPEC;

	// The quoted packet went the other way, so its reverse is a session key.
	struct flow k = {
		.saddr = q.ip.daddr, .daddr = q.ip.saddr,
		.sport = q.dport, .dport = q.sport, .proto = q.ip.protocol,
	};
	struct session *s = bpf_map_lookup_elem(&sessions, &k);
	if (!s)
		return TC_ACT_UNSPEC;

	old = q;
	q.ip.saddr = s->daddr;
	q.ip.daddr = s->saddr;
	q.sport = s->dport;
	q.dport = s->sport;
	q.ip.check = 0;
	q.ip.check = ip_csum(&q.ip);

	// ICMP has no pseudo header: the checksum only covers the bytes we changed.
	__s64 diff = bpf_csum_diff((__be32 *)&old, sizeof(old), (__be32 *)&q, sizeof(q), 0);
	if (diff < 0 ||
	    bpf_l4_csum_replace(skb, l4off + offsetof(struct icmphdr, checksum), 0, diff, 0) ||
	    bpf_skb_store_bytes(skb, qoff, &q, sizeof(q), 0))
		return TC_ACT_SHOT;

	struct session to = {
		.saddr = outer->saddr == old.ip.daddr ? q.ip.daddr : outer->saddr,
		.daddr = q.ip.saddr,
	};
	STAT_INC(icmp_translated);
	return translate4(skb, l4off, 0, outer, &to);
}

// Header of the packet quoted inside an ICMPv6 error: IPv6 without
// extension headers and the first 8 bytes of TCP/UDP.
struct quoted6 {
	struct ipv6hdr ip;
	__be16 sport;
	__be16 dport;
	__be32 rest;
};

// handle_icmp4 for IPv6: Packet Too Big matters most here, since IPv6
// routers never fragment and path MTU discovery depends on it reaching the
// socket that sent the packet. There is no quoted header checksum; the
// ICMPv6 checksum covers the quoted bytes, so it takes their diff.
static __noinline int handle_icmp6(struct __sk_buff *skb)
{
	__u8 type; // of the ICMPv6 header, which shares struct icmphdr's layout
	struct quoted6 q;
	__be32 outer_src[4];
	// The session key, then the outer rewrite: one slot of stack for both
	// keeps this call chain within the 512-byte limit.
	union {
		struct flow6 k;
		struct session6 to;
	} u = {};

	if (bpf_skb_load_bytes(skb, IP_OFF + offsetof(struct ipv6hdr, saddr), outer_src, sizeof(outer_src)) ||
	    bpf_skb_load_bytes(skb, L4_OFF6 + offsetof(struct icmphdr, type), &type, 1))
		return TC_ACT_UNSPEC;
	if (type < ICMPV6_DEST_UNREACH || type > ICMPV6_PARAMPROB)
		return TC_ACT_UNSPEC;
	__u32 qoff = L4_OFF6 + sizeof(struct icmphdr);
	if (bpf_skb_load_bytes(skb, qoff, &q, sizeof(q)))
		return TC_ACT_UNSPEC;
	if (q.ip.nexthdr != IPPROTO_TCP && q.ip.nexthdr != IPPROTO_UDP)
		return TC_ACT_UNSPEC;

	u.k.sport = q.dport;
	u.k.dport = q.sport;
	u.k.proto = q.ip.nexthdr;
	addr_set(u.k.saddr, q.ip.daddr.in6_u.u6_addr32);
	addr_set(u.k.daddr, q.ip.saddr.in6_u.u6_addr32);
	struct session6 *s = bpf_map_lookup_elem(&sessions6, &u.k);
	if (!s)
		return TC_ACT_UNSPEC;

	// The outer rewrite, now that the key is no longer needed: to the
	// quoted packet's sender, from the address it sent to if the error
	// comes from there. Done first, so no flag stays live across the
	// checksum work (its spills took this call chain past 512 bytes).
	bool from_quoted_dst = addr_eq(outer_src, q.ip.daddr.in6_u.u6_addr32);
	__builtin_memset(&u, 0, sizeof(u));
	if (from_quoted_dst)
		addr_set(u.to.saddr, s->saddr);
	else
		addr_set(u.to.saddr, outer_src);
	addr_set(u.to.daddr, s->daddr);

	__u32 diff = csum_add(addr_csum_diff(q.ip.saddr.in6_u.u6_addr32, s->daddr),
			      addr_csum_diff(q.ip.daddr.in6_u.u6_addr32, s->saddr));
	diff = csum_add(diff, ports_csum_diff(q.sport, q.dport, s->dport, s->sport));
	addr_set(q.ip.saddr.in6_u.u6_addr32, s->daddr);
	addr_set(q.ip.daddr.in6_u.u6_addr32, s->saddr);
	q.sport = s->dport;
	q.dport = s->sport;
	if (bpf_l4_csum_replace(skb, L4_OFF6 + offsetof(struct icmphdr, checksum), 0, diff, 0) ||
	    bpf_skb_store_bytes(skb, qoff, &q, sizeof(q), 0))
		return TC_ACT_SHOT;
	STAT_INC(icmp_translated);
	return translate6(skb, IPPROTO_ICMPV6, &u.to);
}

// Each family is its own BPF function, so each has the whole stack.
static __noinline int lb_ingress4(struct __sk_buff *skb)
{
	if (pull(skb, IP_OFF + sizeof(struct iphdr)))
		return TC_ACT_UNSPEC;
	void *data = pkt_data(skb), *end = pkt_end(skb);
	struct iphdr *ip = data + IP_OFF;
	if ((void *)(ip + 1) > end || ip->ihl < 5)
		return TC_ACT_UNSPEC;

	__u32 l4off = IP_OFF + ip->ihl * 4;
	__u16 frag = bpf_ntohs(ip->frag_off);
	bool has_l4 = (frag & IP_OFFSET) == 0;
	bool first_frag = has_l4 && (frag & IP_MF);
	__u8 proto = ip->protocol;

	struct flow f = { .saddr = ip->saddr, .daddr = ip->daddr, .proto = proto };
	struct frag_key fk = { .saddr = ip->saddr, .daddr = ip->daddr, .id = ip->id, .proto = proto };
	__u8 tcp_flags = 0;

	if (proto == IPPROTO_ICMP)
		return has_l4 ? handle_icmp4(skb, &f, l4off) : TC_ACT_UNSPEC;
	if (proto != IPPROTO_TCP && proto != IPPROTO_UDP)
		return TC_ACT_UNSPEC;

	if (has_l4) {
		if (load_ports(skb, l4off, proto, &f.sport, &f.dport, &tcp_flags))
			return TC_ACT_UNSPEC;
	} else {
		// Later fragments carry no ports: take them from the first one.
		struct frag_val *fv = bpf_map_lookup_elem(&frags, &fk);
		if (!fv)
			return TC_ACT_UNSPEC;
		f.sport = fv->sport;
		f.dport = fv->dport;
	}

	struct session s;
	int v = session_for(&f, tcp_flags, has_l4, &s);
	if (v != TC_ACT_OK)
		return v;
	if (first_frag) {
		struct frag_val fv = { .sport = f.sport, .dport = f.dport };
		bpf_map_update_elem(&frags, &fk, &fv, BPF_ANY);
	}
	count_packet(s.flags, !has_l4);
	return translate4(skb, l4off, has_l4 ? proto : 0, &f, &s);
}

static __noinline int lb_ingress6(struct __sk_buff *skb)
{
	if (pull(skb, L4_OFF6))
		return TC_ACT_UNSPEC;
	void *data = pkt_data(skb), *end = pkt_end(skb);
	struct ipv6hdr *ip6 = data + IP_OFF;
	if ((void *)(ip6 + 1) > end)
		return TC_ACT_UNSPEC;
	__u8 proto = ip6->nexthdr;
	if (proto != IPPROTO_TCP && proto != IPPROTO_UDP)
		return TC_ACT_UNSPEC;

	struct flow6 f = { .proto = proto };
	addr_set(f.saddr, ip6->saddr.in6_u.u6_addr32);
	addr_set(f.daddr, ip6->daddr.in6_u.u6_addr32);
	__u8 tcp_flags = 0;
	if (load_ports(skb, L4_OFF6, proto, &f.sport, &f.dport, &tcp_flags))
		return TC_ACT_UNSPEC;

	struct session6 s;
	int v = session_for6(&f, tcp_flags, true, &s);
	if (v != TC_ACT_OK)
		return v;
	count_packet(s.flags, false);
	return translate6(skb, proto, &s);
}

SEC("tc")
int lb_ingress(struct __sk_buff *skb)
{
	if (skb->protocol == bpf_htons(ETH_P_IP))
		return lb_ingress4(skb);
	if (skb->protocol == bpf_htons(ETH_P_IPV6)) {
		__u8 nexthdr;
		if (bpf_skb_load_bytes(skb, IP_OFF + offsetof(struct ipv6hdr, nexthdr), &nexthdr, 1))
			return TC_ACT_UNSPEC;
		if (nexthdr == IPPROTO_ICMPV6) // a sibling call: each has the stack to itself
			return handle_icmp6(skb);
		return lb_ingress6(skb);
	}
	return TC_ACT_UNSPEC;
}

// Run by user space (BPF_PROG_RUN) after it fills sweep_batch or
// sweep_batch6 with ctx->count keys. Batches are kept small because the
// loop runs without a scheduling point, on a CPU that may carry packets.
SEC("syscall")
int sweep_delete(struct sweep_args *ctx)
{
	struct sweep_args a = *ctx;

	a.deleted = a.conns = 0;
	if (a.count > SWEEP_BATCH)
		a.count = SWEEP_BATCH;
	if (a.family == 4)
		bpf_loop(a.count, sweep_one, &a, 0);
	else if (a.family == 6)
		bpf_loop(a.count, sweep_one6, &a, 0);
	else
		return -1;
	ctx->deleted = a.deleted;
	ctx->conns = a.conns;
	return 0;
}

char __license[] SEC("license") = "GPL";
