// SPDX-License-Identifier: Apache-2.0

package benchlab

import (
	"slices"
	"testing"
)

// Over runs 1 and 2 (and 3 and 4) every pair of variants runs in both
// orders, and no variant is first or last in both.
func TestMirroredOrderBothWays(t *testing.T) {
	names := []string{"eevdf", "swiftlane-kernel", "swiftlane-user", "scx_rustland", "swiftlane-user-base"}
	if got := MirroredOrder(names, 1); !slices.Equal(got, names) {
		t.Fatalf("run 1: %v, want the canonical order", got)
	}
	before := func(order []string, a, b string) bool { return slices.Index(order, a) < slices.Index(order, b) }
	for _, first := range []int{1, 3} {
		r1, r2 := MirroredOrder(names, first), MirroredOrder(names, first+1)
		for _, a := range names {
			for _, b := range names {
				if a != b && before(r1, a, b) == before(r2, a, b) {
					t.Errorf("%s and %s run in the same order in runs %d (%v) and %d (%v)", a, b, first, r1, first+1, r2)
				}
			}
		}
		if r1[0] == r2[0] || r1[len(r1)-1] == r2[len(r2)-1] {
			t.Errorf("the same variant first or last in runs %d and %d: %v, %v", first, first+1, r1, r2)
		}
	}
	if MirroredOrder(names, 3)[0] == names[0] {
		t.Error("run 3 starts like run 1: the pairs are not rotated")
	}
	if !slices.Equal(names, []string{"eevdf", "swiftlane-kernel", "swiftlane-user", "scx_rustland", "swiftlane-user-base"}) {
		t.Fatal("MirroredOrder changed its argument")
	}
}
