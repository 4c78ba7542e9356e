// SPDX-License-Identifier: Apache-2.0

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// The report keeps every key of the committed bench/results/userspace.json
// (what readers of it use) and gains boots.
func TestReportKeys(t *testing.T) {
	b, err := os.ReadFile("../results/userspace.json")
	if err != nil {
		t.Fatal(err)
	}
	var committed map[string]json.RawMessage
	if err := json.Unmarshal(b, &committed); err != nil {
		t.Fatal(err)
	}
	full := &Variant{Throughput: 1, RunsSec: []float64{1}, DecisionsPerS: 1, LoopCPUPct: 1, CriticalAvgUs: 1,
		CriticalP99Us: 1, IdleAvgUs: 1, IdleP99Us: 1, PlainAvgUs: 1, PlainP99Us: 1, Counters: map[string]float64{"x": 1},
		Threads: []ThreadCPU{{TID: 1}}, Error: "e", Description: "d"}
	rep := Report{Boots: 1, Order: []string{"v"}, Variants: map[string]*Variant{"v": full}, UserVsKernelPct: 1, CriticalAvgRatio: 1,
		Spread: &Spread{}, Goals: []Goal{{Goal: "g"}}}
	var now map[string]json.RawMessage
	if b, err = json.Marshal(rep); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &now); err != nil {
		t.Fatal(err)
	}
	for k := range committed {
		if _, ok := now[k]; !ok {
			t.Errorf("key %q of userspace.json is gone", k)
		}
	}
	if string(now["boots"]) != "1" {
		t.Errorf("boots: %s", now["boots"])
	}
	var variants map[string]map[string]json.RawMessage
	if err := json.Unmarshal(committed["variants"], &variants); err != nil {
		t.Fatal(err)
	}
	var fullKeys map[string]json.RawMessage
	if b, err = json.Marshal(full); err != nil {
		t.Fatal(err)
	}
	json.Unmarshal(b, &fullKeys)
	for name, v := range variants {
		for k := range v {
			if _, ok := fullKeys[k]; !ok {
				t.Errorf("variant %s: key %q is gone", name, k)
			}
		}
	}
}

// Three boots merge into one boot's keys holding medians, the ratios taken
// within each boot, and goals met only where every boot met them.
func TestMergeReports(t *testing.T) {
	boot := func(n int, kernel, user, rustland, kcrit, ucrit, loop float64) Report {
		return Report{Kernel: "k", Boots: 1, Boot: n, Workload: "w", Order: all, Variants: map[string]*Variant{
			"eevdf":            {Throughput: 100},
			"swiftlane-kernel": {Throughput: kernel, CriticalAvgUs: kcrit, RunsSec: []float64{1}},
			"swiftlane-user":   {Throughput: user, CriticalAvgUs: ucrit, LoopCPUPct: loop, Counters: map[string]float64{"c": float64(n)}},
			"scx_rustland":     {Throughput: rustland},
		}}
	}
	b3 := boot(3, 100, 0, 100, 1000, 0, 0)
	b3.Variants["swiftlane-user"].Error = "scheduler did not attach"
	m := mergeReports([]Report{
		boot(1, 100, 96, 90, 1000, 1100, 15),
		boot(2, 200, 180, 150, 2000, 2600, 25), // the host was slower: the ratio is what counts
		b3,
	})
	if m.Boots != 3 || m.Variants["swiftlane-kernel"].Throughput != 100 || len(m.Variants["swiftlane-kernel"].RunsSec) != 3 {
		t.Errorf("kernel variant: %+v", m.Variants["swiftlane-kernel"])
	}
	u := m.Variants["swiftlane-user"]
	if u.Throughput != 138 || u.Counters["c"] != 1.5 || u.Error != "boot 3: scheduler did not attach" {
		t.Errorf("user variant: %+v", u)
	}
	// Per boot 96 % and 90 %: median 93.
	if s := m.Spread.UserVsKernelPct; s == nil || s.Median != 93 || s.Min != 90 || m.UserVsKernelPct != 93 {
		t.Errorf("user vs kernel: %+v %v", s, m.UserVsKernelPct)
	}
	goals := map[string]Goal{}
	for _, g := range m.Goals {
		goals[g.Goal] = g
	}
	if g := goals["messaging: user-space mode, % of scx_rustland"]; !g.Met || !g.EveryBoot || g.Min != 107 {
		t.Errorf("rustland goal: %+v", g)
	}
	if g := goals["critical probe avg under stress-ng: user-space / kernel mode"]; !g.Met || g.EveryBoot || g.Value != 1.2 {
		t.Errorf("critical goal (1.1 and 1.3: met at the median only): %+v", g)
	}
	if g := goals["messaging: user-space mode, % of kernel mode"]; g.Met {
		t.Errorf("kernel-mode goal: %+v", g)
	}
}

// With -base in every boot, swiftlane-user is compared with the base build
// boot by boot, and the verdict states a ratio only when the ranges part.
func TestMergeBase(t *testing.T) {
	var boots []Report
	for i, idle := range [][2]float64{{1000, 700}, {1200, 800}, {1100, 900}} {
		boots = append(boots, Report{Kernel: "k", Boots: 1, Boot: i + 1, Order: append(slices.Clone(all), "swiftlane-user-base"), Variants: map[string]*Variant{
			"eevdf":               {Throughput: 1, IdleAvgUs: 600},
			"swiftlane-user":      {Throughput: 1, IdleAvgUs: idle[1]},
			"swiftlane-user-base": {Throughput: 1, IdleAvgUs: idle[0]},
		}})
	}
	m := mergeReports(boots)
	if !slices.Contains(m.Order, "swiftlane-user-base") || m.Variants["swiftlane-user-base"].IdleAvgUs != 1100 {
		t.Fatalf("base variant: %v %+v", m.Order, m.Variants["swiftlane-user-base"])
	}
	c := m.Spread.Base["idle_avg_us"]
	if !c.Measurable || !strings.HasPrefix(c.Verdict, "swiftlane-user 1.4x faster than the base build") {
		t.Errorf("idle comparison: %+v", c)
	}
	if c := m.Spread.Base["critical_avg_us"]; c.Measurable || c.Rounds != 0 {
		t.Errorf("critical comparison without numbers: %+v", c)
	}
}

func TestThreadCPU(t *testing.T) {
	// A thread's stat line (comm with a space and a parenthesis, as comm
	// may be) and its schedstat.
	stat := func(utime, stime int) string {
		return fmt.Sprintf("4242 (go) sched) R 1 4242 4242 0 -1 4194560 100 0 0 0 %d %d 0 0 20 0 7 0 50 0 0", utime, stime)
	}
	a, ok := parseThread(stat(100, 50), "1000000000 200000000 300\n")
	if !ok {
		t.Fatal("parseThread refused a well-formed thread")
	}
	b, _ := parseThread(stat(400, 250), "4500000000 1200000000 2300\n")
	if _, ok := parseThread("4242 (go) R 1", "1 2 3"); ok {
		t.Error("a short stat line must be refused")
	}
	idle, _ := parseThread(stat(0, 0), "0 0 0")
	got := threadCPU(map[int]threadSample{1: a}, map[int]threadSample{1: b, 2: idle}, 10*time.Second)
	// 300 user and 200 system ticks over 10 s: 30 % and 20 %; 2,000 runs;
	// 1 s waiting.
	want := []ThreadCPU{{TID: 1, UserPct: 30, SysPct: 20, RunsPerS: 200, WaitPct: 10}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("threadCPU = %+v, want %+v (the idle thread left out)", got, want)
	}
}
