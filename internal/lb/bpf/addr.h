// SPDX-License-Identifier: GPL-2.0-only
//go:build ignore

#ifndef SWIFTLANE_ADDR_H
#define SWIFTLANE_ADDR_H

#include <stdbool.h>
#include <linux/types.h>
#include <bpf/bpf_helpers.h>

// Addresses, in lb.bpf.c and sock.bpf.c: a __be32 (IPv4) or __be32[4]
// (IPv6) lvalue; these take either and work on its words. addr_set reads
// its source as volatile: the tc program's load-time constants need it
// (the compiler would fold in their initial zero), and everywhere else it
// keeps the compiler from holding copied words in registers across helper
// calls, whose spills took the ICMPv6 call chain past the 512-byte stack.
#define addr_words(a) (sizeof(a) / sizeof(__be32))
#define addr_set(dst, src) words_set((__be32 *)&(dst), (const volatile __be32 *)&(src), addr_words(dst))
#define addr_eq(a, b) words_eq((const __be32 *)&(a), (const __be32 *)&(b), addr_words(a))
#define addr_fold(a) words_xor((const __be32 *)&(a), addr_words(a))

static __always_inline void words_set(__be32 *dst, const volatile __be32 *src, int n)
{
#pragma unroll
	for (int i = 0; i < n; i++)
		dst[i] = src[i];
}

// Word by word: __builtin_memcmp compares bytes.
static __always_inline bool words_eq(const __be32 *a, const __be32 *b, int n)
{
	__be32 x = 0;

#pragma unroll
	for (int i = 0; i < n; i++)
		x |= a[i] ^ b[i];
	return !x;
}
static __always_inline __u32 words_xor(const __be32 *a, int n)
{
	__u32 x = 0;

#pragma unroll
	for (int i = 0; i < n; i++)
		x ^= a[i];
	return x;
}
#endif
