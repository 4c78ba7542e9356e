// SPDX-License-Identifier: Apache-2.0

package main

import (
	"math"
	"strings"
	"testing"
)

func TestMeanCI(t *testing.T) {
	m, ci := meanCI([]float64{10, 12, 14})
	// sd 2, t(2) 4.303: half width 4.303*2/sqrt(3)
	h := 4.303 * 2 / math.Sqrt(3)
	if m != 12 || ci == nil || math.Abs(ci[0]-(12-h)) > 1e-9 || math.Abs(ci[1]-(12+h)) > 1e-9 {
		t.Fatalf("meanCI = %v %v, want 12 ± %.3f", m, ci, h)
	}
	if _, ci := meanCI([]float64{5}); ci != nil {
		t.Fatalf("one value has an interval %v", ci)
	}
	if q := quantile([]float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 0.99); q != 10 {
		t.Fatalf("p99 of 1..10 = %v, want 10 (nearest rank)", q)
	}
}

// Only differences whose intervals do not overlap become findings.
func TestFindingsNeedSeparateIntervals(t *testing.T) {
	r := &report{Variants: map[string]summary{}, NodePort: map[string]summary{}, Ratios: map[string]map[string]float64{}}
	cps := func(xs ...float64) []phase {
		var ps []phase
		for _, x := range xs {
			ps = append(ps, phase{CPS: x, P99us: 100})
		}
		return ps
	}
	r.summarise(map[string]map[string][]phase{
		"clusterip": {"swiftlane": cps(200, 201, 199), "iptables": cps(100, 101, 99), "nftables": cps(150, 250, 200)},
	})
	if len(r.Findings) != 1 || !strings.Contains(r.Findings[0], "clusterip cps: swiftlane 200 vs iptables 100 (+100 %, better") {
		t.Fatalf("findings %q, want exactly the cps difference to iptables", r.Findings)
	}
	if got := r.Ratios["clusterip_swiftlane_over_iptables"]["cps"]; got != 2 {
		t.Fatalf("cps ratio %v, want 2", got)
	}
}
