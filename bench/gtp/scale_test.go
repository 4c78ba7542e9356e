// SPDX-License-Identifier: Apache-2.0

package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/swiftlane/swiftlane/bench/internal/benchlab"
)

func scaleRuns(offAvg, onAvg []float64) []ScaleRun {
	var runs []ScaleRun
	for i := range offAvg {
		runs = append(runs,
			ScaleRun{UEs: 16, Variant: "no-tracer", Round: i + 1, Result: &Result{AvgMs: offAvg[i], P99Ms: 2 * offAvg[i]}, PacketsPerSecond: 400},
			ScaleRun{UEs: 16, Variant: "tracer", Round: i + 1, Result: &Result{AvgMs: onAvg[i], P99Ms: 2 * onAvg[i]},
				PacketsPerSecond: 400, TracerNsPerPacket: 2500})
	}
	return runs
}

func TestSummarise(t *testing.T) {
	s := summarise(16, scaleRuns([]float64{2, 3, 4}, []float64{2.2, 3.3, 4.4}))
	if s.AvgOverheadPct == nil || s.AvgOverheadPct.Median != 10 || s.AvgOverheadPct.Min != 10 {
		t.Fatalf("overhead %+v, want 10 %% in every round", s.AvgOverheadPct)
	}
	// 2,500 ns a packet at 400 packets/s is 1 ms of CPU a second: 0.1 %.
	if s.TracerCPUPct.Median != 0.1 {
		t.Errorf("tracer CPU %v %%, want 0.1", s.TracerCPUPct.Median)
	}
	if !strings.Contains(s.Finding, "adds 10.0 %") || !strings.Contains(s.Finding, "goal < 5 %: false") {
		t.Errorf("finding %q", s.Finding)
	}

	// A round that goes the other way: nothing beyond the spread.
	s = summarise(16, scaleRuns([]float64{2, 3, 4}, []float64{2.04, 2.9, 4.1}))
	if !strings.Contains(s.Finding, "no difference beyond the spread") || !strings.Contains(s.Finding, "goal < 5 %: true") {
		t.Errorf("finding %q", s.Finding)
	}
	// Lower in every round: no cost to see, so under the goal.
	s = summarise(16, scaleRuns([]float64{2, 3, 4}, []float64{1.9, 2.8, 3.9}))
	if !strings.Contains(s.Finding, "lower average RTT in every round") || !strings.Contains(s.Finding, "goal < 5 %: true") {
		t.Errorf("finding %q", s.Finding)
	}
	s = summarise(16, scaleRuns([]float64{2, 3, 4}, []float64{2.5, 3.5, 3.9}))
	if !strings.Contains(s.Finding, "goal < 5 %: false") {
		t.Errorf("a round 25 %% slower must not meet the goal: %q", s.Finding)
	}

	// A failed tracer round is left out, not counted as zero; fewer than
	// three rounds judge nothing.
	runs := scaleRuns([]float64{2, 3, 4, 5}, []float64{2.2, 3.3, 4.4, 5.5})
	runs[3].Result = nil
	s = summarise(16, runs)
	if s.AvgOverheadPct.Median != 10 || len(s.AvgOverheadPct.Values) != 3 || s.AvgOverheadPct.Boots[1] != 3 {
		t.Errorf("overhead %+v, want rounds 1, 3 and 4", s.AvgOverheadPct)
	}
	if s := summarise(16, scaleRuns([]float64{2}, []float64{2.2})); !strings.Contains(s.Finding, "too few") {
		t.Errorf("one round: finding %q", s.Finding)
	}
}

func TestParseCPUTimes(t *testing.T) {
	// user nice system idle iowait irq softirq steal guest guest_nice
	c0, err := parseCPUTimes("cpu  100 0 50 800 50 0 0 0 30 0\ncpu0 50 0 25 400 25 0 0 0 15 0\n")
	if err != nil {
		t.Fatal(err)
	}
	c1, err := parseCPUTimes("cpu  160 0 90 880 70 0 0 0 60 0\n")
	if err != nil {
		t.Fatal(err)
	}
	// 200 ticks passed, 100 of them idle or iowait; guest time is inside user.
	if got := c1.busyPctSince(c0); got != 50 {
		t.Errorf("busy %v %%, want 50", got)
	}
	if _, err := parseCPUTimes("intr 1 2 3\n"); err == nil || !strings.Contains(err.Error(), "not the CPUs' total") {
		t.Errorf("a /proc/stat without the cpu line: err %v", err)
	}
}

func TestJudgeSaturation(t *testing.T) {
	runs := func(n int, offAvg, busy float64) []ScaleRun {
		var out []ScaleRun
		for r := 1; r <= 3; r++ {
			out = append(out,
				ScaleRun{UEs: n, Variant: "no-tracer", Round: r, Result: &Result{AvgMs: offAvg}, CPUBusyPct: busy},
				ScaleRun{UEs: n, Variant: "tracer", Round: r, Result: &Result{AvgMs: offAvg * 1.5}, CPUBusyPct: busy + 5})
		}
		return out
	}
	rep := &ScaleReport{Runs: append(append(append(runs(1, 4, 20), runs(16, 5, 60)...), runs(64, 6, 95)...), runs(128, 12, 70)...)}
	rescore(rep)
	want := map[int]bool{1: false, 16: false, 64: true, 128: true} // 64: by CPU; 128: by RTT (3x)
	for _, s := range rep.Summary {
		if s.Saturated != want[s.UEs] {
			t.Errorf("%d UEs: saturated %v, want %v (%s)", s.UEs, s.Saturated, want[s.UEs], s.Saturation)
		}
		if s.Saturated != strings.HasPrefix(s.Finding, "measured in a saturated guest") {
			t.Errorf("%d UEs: finding %q does not say what saturation says (%v)", s.UEs, s.Finding, s.Saturated)
		}
	}
	if s := rep.Summary[3]; s.NoTracerAvgVs1UE != 3 || !strings.Contains(s.Saturation, "3.0x the 1-UE figure") {
		t.Errorf("128 UEs: %v x, %q", s.NoTracerAvgVs1UE, s.Saturation)
	}
	if s := rep.Summary[2]; s.NoTracerCPUBusyPct.Median != 95 || s.TracerCPUBusyPct.Median != 100 || !strings.Contains(s.Saturation, "95 % busy") {
		t.Errorf("64 UEs: busy %+v / %+v, %q", s.NoTracerCPUBusyPct, s.TracerCPUBusyPct, s.Saturation)
	}
	table := scaleTable(rep)
	if !strings.Contains(table, "| 64 | 0 | 95 % | 1.5x |") || !strings.Contains(table, "**yes** |\n") {
		t.Errorf("table:\n%s", table)
	}

	// A report without CPU figures (written before they existed) and
	// without a 1-UE count is not judged.
	old := &ScaleReport{Runs: runs(128, 12, 0)}
	rescore(old)
	if s := old.Summary[0]; s.Saturated || !strings.HasPrefix(s.Saturation, "not judged") {
		t.Errorf("no figures: %+v", s)
	}
}

// Enough paired rounds: the finding is judged on the median's interval,
// and pairs from different boots never mix.
func TestSummariseInterval(t *testing.T) {
	var runs []ScaleRun
	// Two boots of 4 rounds; within a boot the RTT drifts, the tracer's run
	// of each round is 1-3 % dearer than its pair.
	for b := 1; b <= 2; b++ {
		for r := 1; r <= 4; r++ {
			off := float64(5+b) + float64(r) // drift across rounds and boots
			on := off * (1 + float64(r)/100)
			runs = append(runs,
				ScaleRun{UEs: 128, Variant: "no-tracer", Boot: b, Round: r, Result: &Result{AvgMs: off}},
				ScaleRun{UEs: 128, Variant: "tracer", Boot: b, Round: r, Result: &Result{AvgMs: on}})
		}
	}
	s := summarise(128, runs)
	if s.AvgOverheadCI == nil || s.AvgOverheadCI.N != 8 {
		t.Fatalf("interval %+v, want one over 8 pairs", s.AvgOverheadCI)
	}
	if s.AvgOverheadPct.Max > 4.01 || s.AvgOverheadPct.Min < 0.99 {
		t.Errorf("overheads %v: a pair mixed boots", s.AvgOverheadPct.Values)
	}
	if got := s.AvgOverheadPct.Boots; len(got) != 8 || got[0] != 1 || got[7] != 2 {
		t.Errorf("labels %v, want each value's boot", got)
	}
	if !strings.Contains(s.Finding, "adds a cost, under the goal") || !strings.Contains(s.Finding, "goal < 5 %: true") {
		t.Errorf("finding %q", s.Finding)
	}

	// Pairs far above 5 % among pairs near 0: with 10 pairs the 97.9 %
	// interval runs from the 2nd to the 9th, so one such pair is left out
	// and two are not.
	over := func(pcts ...float64) ScaleSummary {
		var runs []ScaleRun
		for i, p := range pcts {
			runs = append(runs,
				ScaleRun{UEs: 128, Variant: "no-tracer", Boot: 1, Round: i + 1, Result: &Result{AvgMs: 10}},
				ScaleRun{UEs: 128, Variant: "tracer", Boot: 1, Round: i + 1, Result: &Result{AvgMs: 10 * (1 + p/100)}})
		}
		return summarise(128, runs)
	}
	if s := over(-2, 1, -1, 0, 2, 3, 9, -3, 1, 0); !strings.Contains(s.Finding, "goal < 5 %: true") {
		t.Errorf("one outlier pair: %q", s.Finding)
	}
	if s := over(-2, 1, 9, 0, 2, 3, 9, -3, 1, 0); !strings.Contains(s.Finding, "not settled") {
		t.Errorf("two pairs above 5 %%: %q", s.Finding)
	}
	if s := over(6, 7, 9, 8, 8, 6, 9, 7); !strings.Contains(s.Finding, "goal < 5 %: false") {
		t.Errorf("every pair above 5 %%: %q", s.Finding)
	}
}

func TestMergeScale(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, rep ScaleReport) string {
		p := filepath.Join(dir, name)
		if err := benchlab.WriteJSON(p, rep); err != nil {
			t.Fatal(err)
		}
		return p
	}
	boot := func(b int, kernel string) ScaleReport {
		runs := scaleRuns([]float64{2, 3, 4}, []float64{2.02, 3.03, 4.04})
		for i := range runs {
			runs[i].Boot = b
		}
		return ScaleReport{Kernel: kernel, UPF: "gtp5g", PPSPerUE: 2, Rounds: 3, Runs: runs}
	}
	a, b := write("a.json", boot(1, "7.3.4")), write("b.json", boot(2, "7.3.4"))
	rep, err := mergeScale([]string{a, b})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Runs) != 12 || len(rep.Boots) != 2 || len(rep.Summary) != 1 || rep.Summary[0].AvgOverheadCI == nil {
		t.Fatalf("merged %d runs of boots %v, summary %+v", len(rep.Runs), rep.Boots, rep.Summary)
	}
	if _, err := mergeScale([]string{a, a}); err == nil || !strings.Contains(err.Error(), "both boot 1") {
		t.Errorf("the same boot twice: %v", err)
	}
	if _, err := mergeScale([]string{a, write("c.json", boot(2, "6.18.15"))}); err == nil || !strings.Contains(err.Error(), "one setup") {
		t.Errorf("another kernel: %v", err)
	}
	if _, err := mergeScale([]string{a, write("d.json", boot(0, "7.3.4"))}); err == nil || !strings.Contains(err.Error(), "-boot N") {
		t.Errorf("no boot number: %v", err)
	}
}
