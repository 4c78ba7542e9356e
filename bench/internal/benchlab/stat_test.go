// SPDX-License-Identifier: Apache-2.0

package benchlab

import "testing"

func TestMedianCI(t *testing.T) {
	seq := func(n int) []float64 {
		var xs []float64
		for i := n; i >= 1; i-- { // unsorted on purpose
			xs = append(xs, float64(i))
		}
		return xs
	}
	if _, ok := MedianCI(seq(5), 0.95); ok {
		t.Error("5 values give no 95 % interval (the extremes cover 93.75 %)")
	}
	// 6 values: the extremes, 1 - 2/64.
	if ci, ok := MedianCI(seq(6), 0.95); !ok || ci.Lo != 1 || ci.Hi != 6 || ci.Level != 0.969 || ci.N != 6 {
		t.Errorf("6 values: %+v %v", ci, ok)
	}
	// 18 values: the 5th from each end, P(X <= 4) = 4048/2^18.
	if ci, ok := MedianCI(seq(18), 0.95); !ok || ci.Lo != 5 || ci.Hi != 14 || ci.Level != 0.969 {
		t.Errorf("18 values: %+v %v", ci, ok)
	}
	// 27 values: the 8th from each end, P(X <= 7) = 0.0096.
	if ci, ok := MedianCI(seq(27), 0.95); !ok || ci.Lo != 8 || ci.Hi != 20 || ci.Level != 0.981 {
		t.Errorf("27 values: %+v %v", ci, ok)
	}
}
