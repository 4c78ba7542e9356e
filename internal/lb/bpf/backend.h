// SPDX-License-Identifier: GPL-2.0-only
//go:build ignore

// Choosing a backend for a new connection, the part of the data path the
// tc program (lb.bpf.c) and the socket programs (sock.bpf.c) share so that
// both choose alike: the flow hash, pick_backend and source_allowed.

#ifndef SWIFTLANE_BACKEND_H
#define SWIFTLANE_BACKEND_H

#include <stdbool.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "addr.h"
#include "maps.h"

static __always_inline __u32 rol32(__u32 w, unsigned int s)
{
	return (w << s) | (w >> (32 - s));
}

// Hash of a flow's 5-tuple for Maglev services: Bob Jenkins' lookup3 final
// mix over three words (what the kernel's jhash_3words does), with the
// protocol in the initial value. An IPv6 address is folded to one word by
// XOR first. It has no per-node seed on purpose: every LB node must map a
// flow to the same slot. internal/lb/bpf tests mirror it in Go; keep the
// two in step.
static __always_inline __u32 hash_mix(__u32 saddr, __u32 daddr, __be16 sport, __be16 dport, __u8 proto)
{
	__u32 a = saddr + 0xdeadbeef;
	__u32 b = daddr + 0xdeadbeef;
	__u32 c = ((__u32)sport | (__u32)dport << 16) + proto;

	c ^= b; c -= rol32(b, 14);
	a ^= c; a -= rol32(c, 11);
	b ^= a; b -= rol32(a, 25);
	c ^= b; c -= rol32(b, 16);
	a ^= c; a -= rol32(c, 4);
	b ^= a; b -= rol32(a, 14);
	c ^= b; c -= rol32(b, 24);
	return c;
}

// Inside the DEFINE_* macros comments are /* */: a // comment would swallow
// the rest of the macro.

// pick_backend: the backend a new connection to svc goes to, or NULL. The
// tc path (create_session) and the socket path (sock.bpf.c) both choose
// with it, so they agree: the client's (ak) remembered backend first, if
// recent and still taking new connections for this frontend (not removed,
// not terminating), else the slot hash % count. *id is the backend's id;
// *hit says affinity chose it. A frontend with affinity remembers the
// choice.
#define DEFINE_PICK_BACKEND(F)                                                                          \
	static __always_inline struct backend##F *pick_backend##F(const struct svc_val##F *svc,             \
								  const struct affinity_key##F *ak, __u32 hash, \
								  __u64 now, __u32 *id, bool *hit)            \
	{                                                                                               \
		struct backend##F *b = NULL;                                                            \
		__u32 backend_id = 0;                                                                   \
		__u32 count = svc->count;                                                               \
                                                                                                        \
		*hit = false;                                                                           \
		if (svc->affinity_sec) {                                                                \
			struct affinity_val *a = bpf_map_lookup_elem(&affinity##F, ak);                 \
			if (a && now - a->last_used < (__u64)svc->affinity_sec * 1000000000ULL) {       \
				struct member_key mk = { .svc_id = svc->id, .backend_id = a->backend_id }; \
				backend_id = a->backend_id;                                             \
				if (bpf_map_lookup_elem(&svc_members, &mk))                             \
					b = bpf_map_lookup_elem(&backends##F, &backend_id);             \
				*hit = b != NULL;                                                       \
			}                                                                               \
		}                                                                                       \
		if (!b && count) {                                                                      \
			struct slot_key sk = { .svc_id = svc->id, .slot = hash % count };               \
			__u32 *bid = bpf_map_lookup_elem(&backend_slots, &sk);                          \
			if (!bid) { /* the set shrank under us; slot 0 is always written first */       \
				sk.slot = 0;                                                            \
				bid = bpf_map_lookup_elem(&backend_slots, &sk);                         \
			}                                                                               \
			if (bid) {                                                                      \
				backend_id = *bid;                                                      \
				b = bpf_map_lookup_elem(&backends##F, &backend_id);                     \
			}                                                                               \
		}                                                                                       \
		if (b && svc->affinity_sec) {                                                           \
			/* Refreshed by every new connection, as kube-proxy's "recent" list is. */      \
			struct affinity_val av = { .backend_id = backend_id, .last_used = now };        \
			bpf_map_update_elem(&affinity##F, ak, &av, BPF_ANY);                            \
		}                                                                                       \
		*id = backend_id;                                                                       \
		return b;                                                                               \
	}

DEFINE_PICK_BACKEND()
DEFINE_PICK_BACKEND(6)

// source_allowed: whether frontend svc takes a new connection from the
// client address in k->addr: yes without SVC_F_SOURCE_RANGES, else if one
// of its ranges holds the address (the trie's longest match exists). Only
// new connections pay for the lookup, and only to frontends with ranges;
// established ones never get here, so a range removed later leaves them
// be, as conntrack does for kube-proxy. A refusal is counted.
#define DEFINE_SOURCE_ALLOWED(F)                                                                     \
	static __always_inline bool source_allowed##F(const struct svc_val##F *svc, struct src_range_key##F *k) \
	{                                                                                            \
		if (!(svc->flags & SVC_F_SOURCE_RANGES))                                             \
			return true;                                                                 \
		k->prefixlen = 32 + 8 * sizeof(k->addr);                                             \
		k->svc_id = svc->id;                                                                 \
		if (bpf_map_lookup_elem(&src_ranges##F, k))                                          \
			return true;                                                                 \
		STAT_INC(drop_source_range);                                                         \
		return false;                                                                        \
	}

DEFINE_SOURCE_ALLOWED()
DEFINE_SOURCE_ALLOWED(6)

#endif
