// SPDX-License-Identifier: Apache-2.0

package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
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

// p99Rounds is one phase per p99 value, all at 100 conn/s.
func p99Rounds(xs ...float64) []phase {
	var ps []phase
	for _, x := range xs {
		ps = append(ps, phase{CPS: 100, P99us: x})
	}
	return ps
}

// p99 is compared round by round as well: one stalled round widens the
// means' intervals, and the rounds still say which side is lower.
func TestPairedTails(t *testing.T) {
	r := &report{Variants: map[string]summary{}, NodePort: map[string]summary{}, Ratios: map[string]map[string]float64{}}
	r.summarise(map[string]map[string][]phase{
		"clusterip": {
			"swiftlane": p99Rounds(4000, 3000, 90000, 3500, 7000),
			"iptables":  p99Rounds(57000, 19000, 1200000, 46000, 4100000),
			"nftables":  p99Rounds(7500, 2000, 5000, 13000, 6500),
		},
		"nodeport": {"swiftlane": p99Rounds(1, 2), "iptables": p99Rounds(3, 4)}, // too few rounds to pair
	})
	want := []string{
		"clusterip p99_us: swiftlane below iptables in 5 of 5 rounds; medians 4000 vs 5.7e+04, -93 % (ranges 3000-9e+04 and 1.9e+04-4.1e+06); ratio 0.04 (95 % interval 0.0043-0.38)",
		"clusterip p99_us: swiftlane below nftables in 2 of 5 rounds; medians 4000 vs 6500, -38 % (ranges 3000-9e+04 and 2000-1.3e+04); ratio 1.3 (95 % interval 0.18-9.7)",
	}
	if strings.Join(r.Paired, "\n") != strings.Join(want, "\n") {
		t.Fatalf("paired\n%s\nwant\n%s", strings.Join(r.Paired, "\n"), strings.Join(want, "\n"))
	}
	for _, f := range r.Findings {
		if strings.Contains(f, "p99_us: swiftlane") && strings.Contains(f, "iptables") {
			t.Fatalf("the p99 means' intervals overlap here, yet a finding: %q", f)
		}
	}
	if s := r.Variants["swiftlane"]; s.P99Median != 4000 || s.P99Range != [2]float64{3000, 90000} {
		t.Fatalf("median %v range %v", s.P99Median, s.P99Range)
	}
	var b strings.Builder
	r.printTable(&b)
	if !strings.Contains(b.String(), "p99 round by round") || !strings.Contains(b.String(), "5 of 5 rounds") {
		t.Fatalf("table lacks the paired lines:\n%s", b.String())
	}
}

// A stored report recomputed from its rounds: the summaries and the
// round-by-round lines come back from the rounds alone, stale ones go.
func TestReanalyse(t *testing.T) {
	r := &report{Services: 2000, Variants: map[string]summary{}, NodePort: map[string]summary{}, Ratios: map[string]map[string]float64{}}
	r.summarise(map[string]map[string][]phase{
		"clusterip": {"swiftlane": p99Rounds(2000, 1800, 2900), "iptables": p99Rounds(2600, 5500, 3700)},
		"nodeport":  {"swiftlane": p99Rounds(1500, 1900, 2000), "iptables": p99Rounds(510000, 31000, 40000)},
	})
	want := slices.Clone(r.Paired)
	r.Paired = []string{"stale"}
	r.Findings = append(r.Findings, "stale")
	r.Variants["iptables"] = summary{Rounds: p99Rounds(2600, 5500, 3700)} // rounds only: the rest must be recomputed
	got := reanalysed(t, r)
	if strings.Join(got.Paired, "\n") != strings.Join(want, "\n") {
		t.Fatalf("paired\n%s\nwant\n%s", strings.Join(got.Paired, "\n"), strings.Join(want, "\n"))
	}
	if slices.Contains(got.Findings, "stale") || got.Services != 2000 {
		t.Fatalf("findings %q services %d", got.Findings, got.Services)
	}
	if s := got.Variants["iptables"]; s.P99Median != 3700 || s.CPS != 100 {
		t.Fatalf("iptables not recomputed: %+v", s)
	}
}

// reanalysed is r stored as JSON, run through -reanalyse and read back.
func reanalysed(t *testing.T, r *report) report {
	t.Helper()
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	in, out := filepath.Join(t.TempDir(), "in.json"), filepath.Join(t.TempDir(), "out.json")
	if err := os.WriteFile(in, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := reanalyse(in, out); err != nil {
		t.Fatal(err)
	}
	var got report
	if data, err = os.ReadFile(out); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	return got
}
