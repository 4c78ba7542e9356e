// SPDX-License-Identifier: Apache-2.0

package balancer

import (
	"crypto/sha256"
	"encoding/binary"
	"slices"
)

// MaglevTableSize is the number of selection slots of every Maglev service
// (Eisenbud et al., "Maglev: A Fast and Reliable Software Network Load
// Balancer", NSDI 2016, §3.4). It is prime, so every backend's skip is
// coprime with it and its permutation visits every slot. It is one fixed
// value rather than one derived from the backend count because changing the
// size reshuffles the whole table (the disruption Maglev exists to avoid),
// and because every LB node must build the same table. With N backends each
// gets ⌊M/N⌋ or ⌈M/N⌉ slots (within 1 % of fair up to 10 backends, 10 % at
// 100), and removing one moves its own 1/N of the flows plus a few percent
// more up to N ≈ 10, more beyond (maglev_test.go). Cost: M entries of the
// preallocated backend_slots hash map (about 80 bytes each, ~80 KiB per
// Maglev frontend); the map holds 262144 slots, so about 250 Maglev
// frontends fit next to the random ones.
const MaglevTableSize = 1021

// maglevTable fills a table of m slots with indexes into backends. The
// result depends only on the set of backend names, not on their order, so
// two nodes (or two runs) with the same backends agree slot by slot, and
// removing one of N backends moves little more than its own 1/N of the
// slots. m must be prime; nil if there are no backends.
func maglevTable(backends []string, m int) []int {
	if len(backends) == 0 {
		return nil
	}
	// Canonical order: Maglev's population takes turns, and ties between
	// backends that prefer the same slot go to whoever comes first.
	order := make([]int, len(backends))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		if backends[a] < backends[b] {
			return -1
		}
		if backends[a] > backends[b] {
			return 1
		}
		return 0
	})

	// Each backend's permutation of the slots is offset, offset+skip, ...
	// (mod m), both from a hash of its name, which is stable across nodes.
	offset := make([]uint64, len(backends))
	skip := make([]uint64, len(backends))
	for i, name := range backends {
		h := sha256.Sum256([]byte(name))
		offset[i] = binary.BigEndian.Uint64(h[0:8]) % uint64(m)
		skip[i] = binary.BigEndian.Uint64(h[8:16])%uint64(m-1) + 1
	}
	next := make([]uint64, len(backends)) // position in each permutation
	table := make([]int, m)
	for i := range table {
		table[i] = -1
	}
	for filled := 0; ; {
		for _, i := range order {
			c := (offset[i] + next[i]*skip[i]) % uint64(m)
			for table[c] >= 0 {
				next[i]++
				c = (offset[i] + next[i]*skip[i]) % uint64(m)
			}
			table[c] = i
			next[i]++
			if filled++; filled == m {
				return table
			}
		}
	}
}
