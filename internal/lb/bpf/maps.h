// SPDX-License-Identifier: GPL-2.0-only
//go:build ignore

// The maps both programs use, lb.bpf.c's tc program and sock.bpf.c's
// socket programs. Each unit compiles its own definition; the loader loads
// the tc collection first and hands its maps to the socket collection in
// place of that one's (CollectionOptions.MapReplacements), so both read and
// write one set, pinned once. A map only one unit needs is defined there.

#ifndef SWIFTLANE_MAPS_H
#define SWIFTLANE_MAPS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "lb.h"

// Sizes are defaults; the loader overrides max_entries from the config
// (the same way for both collections, so the replaced maps match).
#define MAX_SERVICES 16384
#define MAX_SLOTS 262144
#define MAX_BACKENDS 65536
#define MAX_SESSIONS 262144 // two entries per connection
#define MAX_SRC_RANGES 16384 // per family: (frontend, prefix) pairs

// A map definition (the struct that names its type, size, key and value).
#define MAP(type_, max, key_t, value_t)  \
	struct {                          \
		__uint(type, type_);      \
		__uint(max_entries, max); \
		__type(key, key_t);       \
		__type(value, value_t);   \
	}

// The maps each family has to itself.
//
// affinity: one entry per (frontend with affinity, client); stale ones are
// ignored by their timestamp and pushed out by LRU; the loader sizes it
// like the tc program's sessions. src_ranges: loadBalancerSourceRanges
// (lb.h); an LPM trie is allocated as entries are added, which is all it
// supports.
#define FAMILY_MAPS(F)                                                                                   \
	MAP(BPF_MAP_TYPE_HASH, MAX_SERVICES, struct svc_key##F, struct svc_val##F) services##F SEC(".maps"); \
	MAP(BPF_MAP_TYPE_HASH, MAX_BACKENDS, __u32, struct backend##F) backends##F SEC(".maps");             \
	MAP(BPF_MAP_TYPE_LRU_HASH, MAX_SESSIONS / 2, struct affinity_key##F, struct affinity_val)            \
	affinity##F SEC(".maps");                                                                        \
	struct {                                                                                         \
		__uint(type, BPF_MAP_TYPE_LPM_TRIE);                                                     \
		__uint(max_entries, MAX_SRC_RANGES);                                                     \
		__uint(map_flags, BPF_F_NO_PREALLOC);                                                    \
		__type(key, struct src_range_key##F);                                                    \
		__type(value, __u8);                                                                     \
	} src_ranges##F SEC(".maps");

FAMILY_MAPS()
FAMILY_MAPS(6)

// Backend ids, slots and affinity members are shared by the families.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_SLOTS);
	__type(key, struct slot_key);
	__type(value, __u32); // backend id
} backend_slots SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_BACKENDS);
	__uint(map_flags, BPF_F_NO_PREALLOC); // few frontends use affinity
	__type(key, struct member_key);
	__type(value, __u8);
} svc_members SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lb_stats);
} stats SEC(".maps");

static __always_inline struct lb_stats *lookup_stats(void)
{
	__u32 zero = 0;
	return bpf_map_lookup_elem(&stats, &zero);
}

#define STAT_INC(field)                                  \
	do {                                             \
		struct lb_stats *__st = lookup_stats(); \
		if (__st)                                \
			__st->field++;                   \
	} while (0)

#endif
