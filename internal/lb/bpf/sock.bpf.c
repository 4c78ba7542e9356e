// SPDX-License-Identifier: GPL-2.0-only
//go:build ignore

// Socket-level balancing of the node's own connections (host-network pods,
// node daemons). Their packets never cross a tc ingress hook on the way to a
// backend, so the tc program cannot translate them; these cgroup programs
// translate the socket's address instead, before any packet exists:
//
//   connect4/6     TCP and connected UDP: a frontend becomes a backend
//   sendmsg4/6     unconnected UDP, per datagram, the same way
//   recvmsg4/6     a reply's source, the backend, becomes the frontend again
//   getpeername4/6 the peer the application reads is the frontend
//
// The socket then talks to the backend directly: no packet is rewritten, no
// session entry is made, and nf_conntrack (if the node runs it) sees an
// ordinary connection from the node to a pod, never the Service address.
//
// A compilation unit of its own that shares the tc program's maps (maps.h:
// the loader hands this collection the tc collection's maps in place of its
// own) and chooses a backend with the same pick_backend (backend.h): one set
// of pinned maps, one choice of backend for both paths.
//
// Only sockets of the node's network namespace (host_netns_cookie) are
// translated. A pod's processes usually sit in the same cgroup tree, but
// their packets do cross the node's tc hook, which translates them without
// conntrack; translating them here too would send them to a backend
// directly, as forwarded traffic that the node's conntrack tracks.

#include <stdbool.h>
#include <linux/bpf.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "lb.h"
#include "addr.h"
#include "backend.h"
#include "maps.h"

// Reverse entries: two per connected socket at most (one per family); an
// evicted one only makes recvmsg/getpeername show the backend's address.
#define SOCK_REV_ENTRIES 65536

// The frontend a socket was sent to instead of a backend, keyed by the
// socket and that backend (the value is an address and a port, the shape of
// struct backend). The cookie makes the key unique per socket, so sockets
// that reach one backend through different frontends each get theirs back.
struct sock_key {
	__u64 cookie;
	__be32 addr;
	__be16 port;
	__u8 proto;
	__u8 pad;
};

struct sock_key6 {
	__u64 cookie;
	__be32 addr[4];
	__be16 port;
	__u8 proto;
	__u8 pad;
	__u32 pad2;
};

MAP(BPF_MAP_TYPE_LRU_HASH, SOCK_REV_ENTRIES, struct sock_key, struct backend) sock_rev SEC(".maps");
MAP(BPF_MAP_TYPE_LRU_HASH, SOCK_REV_ENTRIES, struct sock_key6, struct backend6) sock_rev6 SEC(".maps");

// The node's network namespace, by its cookie; written by the loader when it
// attaches (from that namespace). 0: translate nothing.
volatile __u64 host_netns_cookie = 0;

static __always_inline bool own_netns(struct bpf_sock_addr *ctx)
{
	__u64 want = host_netns_cookie;

	return want && bpf_get_netns_cookie(ctx) == want;
}

// The context's IPv6 address (the destination, or a reply's source).
// Field by field: the verifier only takes context accesses at a constant
// offset from the context pointer itself.
static __always_inline void ctx_addr6(const struct bpf_sock_addr *ctx, __be32 *a)
{
	a[0] = ctx->user_ip6[0];
	a[1] = ctx->user_ip6[1];
	a[2] = ctx->user_ip6[2];
	a[3] = ctx->user_ip6[3];
}

static __always_inline void ctx_set_addr6(struct bpf_sock_addr *ctx, const __be32 *a)
{
	ctx->user_ip6[0] = a[0];
	ctx->user_ip6[1] = a[1];
	ctx->user_ip6[2] = a[2];
	ctx->user_ip6[3] = a[3];
}

// An IPv4 address on an IPv6 socket (::ffff:a.b.c.d): a dual-stack socket
// reaching an IPv4 frontend, which the IPv4 maps answer.
static __always_inline bool v4_mapped(const __be32 *a)
{
	return !a[0] && !a[1] && a[2] == bpf_htonl(0xffff);
}

// sock_forward: k, a destination (address, port, protocol), becomes a
// backend's if it is a frontend. 1: translated; 0: not service traffic;
// -1: refuse (the caller gets EPERM): the frontend has no backend, or its
// source ranges keep the node out.
//
// The hash that picks a slot is the socket's and the frontend's: each
// socket lands like a new flow of the tc path (uniformly over the slots,
// so over the backends, or over a Maglev table), and an unconnected UDP
// socket keeps its backend datagram after datagram, as a tc flow keeps its
// session. The tc path's flow hash is not available: the source port is
// not chosen yet at connect. Affinity treats the node as one client (the
// zero address), which is what it is to kube-proxy's rules too.
#define DEFINE_SOCK_FORWARD(F)                                                                     \
	static __always_inline int sock_forward##F(struct bpf_sock_addr *ctx, struct svc_key##F *k) \
	{                                                                                           \
		struct svc_val##F *svc = bpf_map_lookup_elem(&services##F, k);                      \
		if (!svc)                                                                           \
			return 0;                                                                   \
		/* loadBalancerSourceRanges: the source address is not chosen yet, so          \
		   the node is judged as kube-proxy judges it, admitted when a range            \
		   holds a node address; the loader then admits the frontend's own              \
		   address (balancer.guarded), which is what is looked up. */                   \
		struct src_range_key##F sk;                                                         \
		addr_set(sk.addr, k->addr);                                                         \
		if (!source_allowed##F(svc, &sk))                                                   \
			return -1;                                                                  \
                                                                                                    \
		__u64 cookie = bpf_get_socket_cookie(ctx);                                          \
		struct affinity_key##F ak = { .svc_id = svc->id };                                  \
		__u32 h = hash_mix((__u32)cookie ^ addr_fold(k->addr), (__u32)(cookie >> 32), 0,    \
				   k->port, k->proto);                                              \
		__u32 id;                                                                           \
		bool hit;                                                                           \
		struct backend##F *b = pick_backend##F(svc, &ak, h, bpf_ktime_get_ns(), &id, &hit); \
		if (!b)                                                                             \
			return -1;                                                                  \
                                                                                                    \
		struct sock_key##F rk = { .cookie = cookie, .port = b->port, .proto = k->proto };   \
		struct backend##F fe = { .port = k->port };                                         \
		addr_set(rk.addr, b->addr);                                                         \
		addr_set(fe.addr, k->addr);                                                         \
		/* Written once per socket and backend: later datagrams find it. */                 \
		struct backend##F *cur = bpf_map_lookup_elem(&sock_rev##F, &rk);                    \
		if (!cur || !addr_eq(cur->addr, fe.addr) || cur->port != fe.port)                   \
			bpf_map_update_elem(&sock_rev##F, &rk, &fe, BPF_ANY);                       \
		addr_set(k->addr, b->addr);                                                         \
		k->port = b->port;                                                                  \
		return 1;                                                                           \
	}

// sock_reverse: k, an address the socket got from a backend it was sent
// to (a datagram's source, the connected peer), becomes the frontend.
// 1: translated; 0: not from a backend this socket was sent to.
#define DEFINE_SOCK_REVERSE(F)                                                                     \
	static __always_inline int sock_reverse##F(struct bpf_sock_addr *ctx, struct svc_key##F *k)  \
	{                                                                                           \
		struct sock_key##F rk = {                                                           \
			.cookie = bpf_get_socket_cookie(ctx), .port = k->port, .proto = k->proto,   \
		};                                                                                  \
		addr_set(rk.addr, k->addr);                                                         \
		struct backend##F *fe = bpf_map_lookup_elem(&sock_rev##F, &rk);                     \
		if (!fe)                                                                            \
			return 0;                                                                   \
		addr_set(k->addr, fe->addr);                                                        \
		k->port = fe->port;                                                                 \
		return 1;                                                                           \
	}

DEFINE_SOCK_FORWARD()
DEFINE_SOCK_FORWARD(6)
DEFINE_SOCK_REVERSE()
DEFINE_SOCK_REVERSE(6)

// The context's destination as a frontend key; false: not ours to touch.
static __always_inline bool sock_dest(struct bpf_sock_addr *ctx, __u8 *proto, __be16 *port)
{
	*proto = ctx->protocol;
	*port = (__be16)ctx->user_port;
	return (*proto == IPPROTO_TCP || *proto == IPPROTO_UDP) && own_netns(ctx);
}

// DEFINE_ON_ADDR: name4 and name6 run fn on the context's address (fn6 on
// an IPv6 one, fn with the IPv4 maps on an IPv4-mapped one) and write a
// translated one back. They return fn's result, 0 for sockets not ours.
#define DEFINE_ON_ADDR(name, fn)                                                             \
	static __always_inline int name##4(struct bpf_sock_addr *ctx)                         \
	{                                                                                     \
		struct svc_key k = { .addr = ctx->user_ip4 };                                 \
		int r;                                                                        \
                                                                                              \
		if (!sock_dest(ctx, &k.proto, &k.port))                                       \
			return 0;                                                             \
		r = fn(ctx, &k);                                                              \
		if (r > 0) {                                                                  \
			ctx->user_ip4 = k.addr;                                               \
			ctx->user_port = k.port;                                              \
		}                                                                             \
		return r;                                                                     \
	}                                                                                     \
                                                                                              \
	static __always_inline int name##6(struct bpf_sock_addr *ctx)                         \
	{                                                                                     \
		struct svc_key6 k = {};                                                       \
		int r;                                                                        \
                                                                                              \
		if (!sock_dest(ctx, &k.proto, &k.port))                                       \
			return 0;                                                             \
		ctx_addr6(ctx, k.addr);                                                       \
		if (v4_mapped(k.addr)) {                                                      \
			struct svc_key k4 = { .addr = k.addr[3], .port = k.port, .proto = k.proto }; \
			r = fn(ctx, &k4);                                                     \
			k.addr[3] = k4.addr;                                                  \
			k.port = k4.port;                                                     \
		} else {                                                                      \
			r = fn##6(ctx, &k);                                                   \
		}                                                                             \
		if (r > 0) {                                                                  \
			ctx_set_addr6(ctx, k.addr);                                           \
			ctx->user_port = k.port;                                              \
		}                                                                             \
		return r;                                                                     \
	}

DEFINE_ON_ADDR(forward, sock_forward)
DEFINE_ON_ADDR(reverse, sock_reverse)

// verdict counts a forward result r (of a datagram, or a connect) and
// turns it into the hook's answer: 1 go ahead, 0 refuse. Sockets that are
// not service traffic (r 0) cost no counter lookup.
static __always_inline int verdict(int r, bool datagram)
{
	if (r < 0)
		STAT_INC(host_refused);
	else if (r > 0 && datagram)
		STAT_INC(host_datagrams);
	else if (r > 0)
		STAT_INC(host_connects);
	return r >= 0;
}

SEC("cgroup/connect4")
int sock_connect4(struct bpf_sock_addr *ctx) { return verdict(forward4(ctx), false); }

SEC("cgroup/connect6")
int sock_connect6(struct bpf_sock_addr *ctx) { return verdict(forward6(ctx), false); }

SEC("cgroup/sendmsg4")
int sock_sendmsg4(struct bpf_sock_addr *ctx) { return verdict(forward4(ctx), true); }

SEC("cgroup/sendmsg6")
int sock_sendmsg6(struct bpf_sock_addr *ctx) { return verdict(forward6(ctx), true); }

SEC("cgroup/recvmsg4")
int sock_recvmsg4(struct bpf_sock_addr *ctx)
{
	reverse4(ctx);
	return 1;
}

SEC("cgroup/recvmsg6")
int sock_recvmsg6(struct bpf_sock_addr *ctx)
{
	reverse6(ctx);
	return 1;
}

SEC("cgroup/getpeername4")
int sock_getpeername4(struct bpf_sock_addr *ctx)
{
	reverse4(ctx);
	return 1;
}

SEC("cgroup/getpeername6")
int sock_getpeername6(struct bpf_sock_addr *ctx)
{
	reverse6(ctx);
	return 1;
}

char __license[] SEC("license") = "GPL";
