// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/swiftlane/swiftlane/bench/internal/benchlab"
)

// Spread is what a merged report adds to one boot's keys: when and in
// which order each boot ran, and each number over the boots.
type Spread struct {
	Dates      []string   `json:"dates"`
	BootOrders [][]string `json:"boot_orders"`
	// Variants: per variant, each of statKeys over the boots that
	// measured it.
	Variants map[string]map[string]*benchlab.Stat `json:"variants"`
	// The ratios within each boot (bootRatio).
	UserVsKernelPct   *benchlab.Stat `json:"user_vs_kernel_throughput_pct"`
	UserVsRustlandPct *benchlab.Stat `json:"user_vs_rustland_throughput_pct,omitempty"`
	CriticalAvgRatio  *benchlab.Stat `json:"critical_avg_ratio_user_vs_kernel"`
	// Base: swiftlane-user against swiftlane-user-base (-base), boot by
	// boot, when the boots ran it.
	Base map[string]Comparison `json:"user_vs_base,omitempty"`
}

// Comparison is one number of swiftlane-user against the base build's.
type Comparison struct {
	benchlab.Comparison
	Verdict string `json:"verdict"`
}

// Goal is one of issue 39's targets for user-space mode, judged on the
// median over boots and on the spread: met only if every boot met it.
type Goal struct {
	Goal   string  `json:"goal"`
	Value  float64 `json:"value"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	Target string  `json:"target"`
	Met    bool    `json:"met"`
	// EveryBoot: the target holds in each boot, not only at the median.
	EveryBoot bool `json:"every_boot"`
}

var statKeys = []string{"throughput", "decisions_per_s", "loop_cpu_pct", "critical_avg_us", "critical_p99_us", "idle_avg_us", "idle_p99_us", "plain_loaded_avg_us", "plain_loaded_p99_us"}

func (v *Variant) stat(k string) float64 {
	return map[string]float64{"throughput": v.Throughput, "decisions_per_s": v.DecisionsPerS, "loop_cpu_pct": v.LoopCPUPct,
		"critical_avg_us": v.CriticalAvgUs, "critical_p99_us": v.CriticalP99Us, "idle_avg_us": v.IdleAvgUs, "idle_p99_us": v.IdleP99Us,
		"plain_loaded_avg_us": v.PlainAvgUs, "plain_loaded_p99_us": v.PlainP99Us}[k]
}

// usable: the variant ran without an error in that boot.
func usable(v *Variant) bool { return v != nil && v.Error == "" && v.Throughput > 0 }

func mergeBoots(files []string, out string) error {
	boots, err := benchlab.ReadBoots[Report](files)
	if err != nil {
		return err
	}
	for i, b := range boots {
		if b.Boots != 1 {
			return fmt.Errorf("-merge: %s is a merged report (%d boots): give the per-boot files", files[i], b.Boots)
		}
		if b.Kernel != boots[0].Kernel || b.Workload != boots[0].Workload {
			return fmt.Errorf("-merge: %s (%s, %s) and %s (%s, %s) ran different kernels or workloads",
				files[i], b.Kernel, b.Workload, files[0], boots[0].Kernel, boots[0].Workload)
		}
	}
	m := mergeReports(boots)
	printTable(*m)
	printGoals(m)
	return benchlab.WriteJSON(out, m)
}

// mergeReports keeps one boot's keys, each holding the median over the
// boots, and puts the spread beside them.
func mergeReports(boots []Report) *Report {
	first := boots[0]
	m := &Report{
		Kernel: first.Kernel, CPUs: first.CPUs, Boots: len(boots), Date: boots[len(boots)-1].Date,
		Note:     first.Note + " Medians over boots, the variant order rotated by boot; spread (min-max) under \"spread\".",
		Workload: first.Workload, ThroughputUnit: first.ThroughputUnit, Order: slices.Clone(all), Variants: map[string]*Variant{},
		Spread: &Spread{Variants: map[string]map[string]*benchlab.Stat{}},
	}
	for _, b := range boots {
		m.Spread.Dates = append(m.Spread.Dates, b.Date)
		m.Spread.BootOrders = append(m.Spread.BootOrders, b.Order)
		if b.Variants["swiftlane-user-base"] != nil && !slices.Contains(m.Order, "swiftlane-user-base") {
			m.Order = append(m.Order, "swiftlane-user-base")
		}
	}
	for _, name := range m.Order {
		v := &Variant{Description: describe[name]}
		spread := map[string]*benchlab.Stat{}
		var errs []string
		counters := map[string][]float64{}
		for _, b := range boots {
			bv := b.Variants[name]
			if bv == nil {
				continue
			}
			if bv.Error != "" {
				errs = append(errs, fmt.Sprintf("boot %d: %s", b.Boot, bv.Error))
			}
			if usable(bv) {
				v.RunsSec = append(v.RunsSec, bv.RunsSec...)
				for k, c := range bv.Counters {
					counters[k] = append(counters[k], c)
				}
			}
		}
		for _, k := range statKeys {
			var xs []float64
			var from []int
			for _, b := range boots {
				if bv := b.Variants[name]; usable(bv) && bv.stat(k) > 0 {
					xs, from = append(xs, bv.stat(k)), append(from, b.Boot)
				}
			}
			if s := benchlab.NewStat(xs, from); s != nil {
				spread[k] = s
			}
		}
		med := func(k string) float64 {
			if s := spread[k]; s != nil {
				return s.Median
			}
			return 0
		}
		v.Throughput, v.DecisionsPerS, v.LoopCPUPct = med("throughput"), med("decisions_per_s"), med("loop_cpu_pct")
		v.CriticalAvgUs, v.CriticalP99Us = med("critical_avg_us"), med("critical_p99_us")
		v.IdleAvgUs, v.IdleP99Us = med("idle_avg_us"), med("idle_p99_us")
		v.PlainAvgUs, v.PlainP99Us = med("plain_loaded_avg_us"), med("plain_loaded_p99_us")
		if len(counters) > 0 {
			v.Counters = map[string]float64{}
			for _, k := range slices.Sorted(maps.Keys(counters)) {
				v.Counters[k] = benchlab.Round(benchlab.Median(counters[k]))
			}
		}
		v.Error = strings.Join(errs, "; ") // the other boots' medians stand beside it
		m.Variants[name] = v
		if len(spread) > 0 {
			m.Spread.Variants[name] = spread
		}
	}
	m.Spread.UserVsKernelPct = bootRatio(boots, "swiftlane-user", "swiftlane-kernel", "throughput", 100)
	m.Spread.UserVsRustlandPct = bootRatio(boots, "swiftlane-user", "scx_rustland", "throughput", 100)
	m.Spread.CriticalAvgRatio = bootRatio(boots, "swiftlane-user", "swiftlane-kernel", "critical_avg_us", 1)
	if s := m.Spread.UserVsKernelPct; s != nil {
		m.UserVsKernelPct = math.Round(10*s.Median) / 10
	}
	if s := m.Spread.CriticalAvgRatio; s != nil {
		m.CriticalAvgRatio = math.Round(100*s.Median) / 100
	}
	if slices.Contains(m.Order, "swiftlane-user-base") {
		m.Spread.Base = map[string]Comparison{}
		for _, k := range []string{"idle_avg_us", "idle_p99_us", "critical_avg_us", "critical_p99_us", "plain_loaded_avg_us", "plain_loaded_p99_us"} {
			var b, c []float64
			for _, r := range boots {
				bv, cv := r.Variants["swiftlane-user-base"], r.Variants["swiftlane-user"]
				if usable(bv) && usable(cv) {
					b, c = append(b, bv.stat(k)), append(c, cv.stat(k))
				}
			}
			cmp := benchlab.Compare(b, c)
			m.Spread.Base[k] = Comparison{cmp, cmp.Verdict("swiftlane-user", "the base build", "")}
		}
	}
	m.Goals = userGoals(m, boots)
	return m
}

// userGoals are issue 39's targets that this benchmark measures (the ones
// under saturation without strategies are bench-sched's).
func userGoals(m *Report, boots []Report) []Goal {
	var g []Goal
	add := func(goal string, s *benchlab.Stat, target string, ok func(float64) bool) {
		if s == nil {
			return
		}
		every := true
		for _, x := range s.Values {
			every = every && ok(x)
		}
		g = append(g, Goal{Goal: goal, Value: s.Median, Min: s.Min, Max: s.Max, Target: target, Met: ok(s.Median), EveryBoot: every})
	}
	add("messaging: user-space mode, % of kernel mode", m.Spread.UserVsKernelPct, ">= 95", func(x float64) bool { return x >= 95 })
	add("messaging: user-space mode, % of scx_rustland", m.Spread.UserVsRustlandPct, ">= 100", func(x float64) bool { return x >= 100 })
	add("critical probe avg under stress-ng: user-space / kernel mode", m.Spread.CriticalAvgRatio, "<= 1.2", func(x float64) bool { return x <= 1.2 })
	add("scheduler process CPU during messaging, % of one CPU", m.Spread.Variants["swiftlane-user"]["loop_cpu_pct"], "<= 20", func(x float64) bool { return x <= 20 })
	add("plain probe under stress-ng avg: user-space / kernel mode", bootRatio(boots, "swiftlane-user", "swiftlane-kernel", "plain_loaded_avg_us", 1), "<= 1.5",
		func(x float64) bool { return x <= 1.5 })
	reported := func(float64) bool { return true }
	add("idle probe avg: user-space mode / EEVDF", bootRatio(boots, "swiftlane-user", "eevdf", "idle_avg_us", 1), "reported", reported)
	add("idle probe avg: kernel mode / EEVDF", bootRatio(boots, "swiftlane-kernel", "eevdf", "idle_avg_us", 1), "reported", reported)
	return g
}

// bootRatio is num's key over den's times scale within each boot where
// both are usable, then over the boots: a boot-to-boot drift of the host
// cancels out.
func bootRatio(boots []Report, num, den, k string, scale float64) *benchlab.Stat {
	var xs []float64
	var from []int
	for _, b := range boots {
		n, d := b.Variants[num], b.Variants[den]
		if usable(n) && usable(d) && n.stat(k) > 0 && d.stat(k) > 0 {
			xs, from = append(xs, scale*n.stat(k)/d.stat(k)), append(from, b.Boot)
		}
	}
	return benchlab.NewStat(xs, from)
}

func printGoals(m *Report) {
	fmt.Printf("\n%d boots, medians; goals (issue 39), min-max over boots:\n", m.Boots)
	for _, g := range m.Goals {
		met := "not met"
		switch {
		case g.Met && g.EveryBoot:
			met = "met in every boot"
		case g.Met:
			met = "met at the median, not in every boot"
		}
		if g.Target == "reported" {
			met = "reported"
		}
		fmt.Printf("  %s: %.3g [%.3g–%.3g], target %s: %s\n", g.Goal, g.Value, g.Min, g.Max, g.Target, met)
	}
	for _, k := range slices.Sorted(maps.Keys(m.Spread.Base)) {
		fmt.Printf("  %s against the base build: %s\n", k, m.Spread.Base[k].Verdict)
	}
}
