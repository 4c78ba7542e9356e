// SPDX-License-Identifier: Apache-2.0

package main

import (
	"strings"
	"testing"
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
