// SPDX-License-Identifier: Apache-2.0

package benchlab

import "slices"

// MirroredOrder is the variant order of run n (1, 2, ...: a boot or a
// round). Runs come in mirrored pairs: run 2m+1 takes names rotated by m,
// run 2m+2 the same reversed, so over every pair each two variants run in
// both orders and no variant is first or last twice. A random shuffle or a
// rotation alone can keep one variant ahead of another in most runs, and
// whatever drifts through a boot (page cache, the host's other work) then
// reads as a difference between them. n < 1 returns names unchanged.
func MirroredOrder(names []string, n int) []string {
	names = slices.Clone(names)
	if n < 1 || len(names) == 0 {
		return names
	}
	k := (n - 1) / 2 % len(names)
	names = append(names[k:], names[:k]...)
	if n%2 == 0 {
		slices.Reverse(names)
	}
	return names
}
