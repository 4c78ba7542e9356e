// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParseVariants(t *testing.T) {
	for _, c := range []struct {
		list, baseline string
		want           []string
		err            string
	}{
		{list: "swiftlane,iptables", want: []string{"swiftlane", "iptables"}},
		{list: "swiftlane,swiftlane-baseline", baseline: "/old", want: []string{"swiftlane", "swiftlane-baseline"}},
		// -baseline alone adds its variant to whatever else runs.
		{list: "none,swiftlane", baseline: "/old", want: []string{"none", "swiftlane", "swiftlane-baseline"}},
		{list: "swiftlane,swiftlane-baseline", err: "swiftlane-baseline needs -baseline PATH"},
		{list: "swiftlane,swiftlane", err: `"swiftlane" is listed twice`},
		{list: "swiftlane,kube-router", err: `"kube-router" is not one of`},
	} {
		got, err := parseVariants(c.list, c.baseline)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("parseVariants(%q, %q) = %v, %v; want an error containing %q", c.list, c.baseline, got, err, c.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("parseVariants(%q, %q) = %v, %v; want %v", c.list, c.baseline, got, err, c.want)
		}
	}
}

// A baseline that cannot run fails before the first round, naming its flag.
func TestCheckBinaries(t *testing.T) {
	dir := t.TempDir()
	exe, data := filepath.Join(dir, "swiftlane"), filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(data, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	both := []string{"swiftlane", "swiftlane-baseline"}
	for _, c := range []struct {
		o   options
		err string
	}{
		{options{variants: both, swiftlane: exe, baseline: exe}, ""},
		{options{variants: []string{"iptables"}}, ""}, // no swiftlane variant, no binary needed
		{options{variants: both, swiftlane: exe, baseline: filepath.Join(dir, "gone")}, "-baseline " + filepath.Join(dir, "gone")},
		{options{variants: both, swiftlane: exe, baseline: data}, "-baseline " + data},
		{options{variants: both, baseline: exe}, "-swiftlane: required for the swiftlane variant"},
		{options{variants: []string{"swiftlane-nosweep"}}, "-swiftlane: required for the swiftlane-nosweep variant"},
	} {
		err := checkBinaries(c.o)
		if c.err == "" && err != nil || c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
			t.Errorf("checkBinaries(%+v) = %v, want %q", c.o, err, c.err)
		}
	}
}

// swiftlane and the baseline binary side by side: a clear connection-rate
// gain is beyond the spread by both tests, a p50 10 % higher in every round
// only by the per-round ratio (the rounds' spread hides it from the means),
// and a p99 that moves with the rounds is within it.
func TestBaselineComparison(t *testing.T) {
	rounds := func(cps, p50, p99 []float64) []phase {
		var ps []phase
		for i := range cps {
			ps = append(ps, phase{CPS: cps[i], P50us: p50[i], P99us: p99[i], Gbps: 1, CPUusPerConn: 50, DpCPUusPerConn: 30})
		}
		return ps
	}
	r := &report{Variants: map[string]summary{}, NodePort: map[string]summary{}, Ratios: map[string]map[string]float64{},
		Settings: map[string]any{"baseline": "/old/swiftlane"}}
	r.summarise(map[string]map[string][]phase{
		"clusterip": {
			"swiftlane":          rounds([]float64{200, 201, 199}, []float64{110, 330, 550}, []float64{400, 520, 380}),
			"swiftlane-baseline": rounds([]float64{100, 101, 99}, []float64{100, 300, 500}, []float64{420, 480, 410}),
			"iptables":           rounds([]float64{150, 150, 150}, []float64{100, 300, 500}, []float64{400, 400, 400}),
		},
		"nodeport": {"swiftlane": rounds([]float64{100}, []float64{100}, []float64{100})}, // no baseline here: no rows
	})
	verdicts := map[string]string{}
	for _, b := range r.Baseline {
		if b.Path != "clusterip" {
			t.Fatalf("a row for %s, where the baseline did not run: %+v", b.Path, b)
		}
		verdicts[b.Metric] = b.Verdict
	}
	want := map[string]string{
		"cps":             "beyond the spread, better (means' 95 % intervals apart; per-round ratio's 95 % interval excludes 1)",
		"p50_us":          "beyond the spread, worse (per-round ratio's 95 % interval excludes 1)",
		"p99_us":          "within the spread",
		"cpu_us_per_conn": "within the spread",
	}
	for m, v := range want {
		if verdicts[m] != v {
			t.Errorf("%s: verdict %q, want %q", m, verdicts[m], v)
		}
	}
	if len(r.Baseline) != len(metrics) {
		t.Fatalf("%d rows, want one per metric (%d)", len(r.Baseline), len(metrics))
	}
	if b := r.Baseline[0]; b.Ratio != 2 || b.PairedCI == nil || b.Paired < 1.98 || b.Paired > 2.02 {
		t.Fatalf("cps row %+v, want ratio 2", b)
	}

	var out strings.Builder
	r.printTable(&out)
	for _, s := range []string{
		"swiftlane against swiftlane-baseline (/old/swiftlane)",
		"| clusterip | cps | 100 (97.5–102) | 200 (198–202) | 2.000 |",
		"| clusterip | p50_us | 300 ",
		"| swiftlane-baseline |", // the variant's own row in the main table
	} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, out.String())
		}
	}

	// -reanalyse rebuilds the comparison from the rounds alone.
	want0 := r.Baseline[0]
	r.Baseline = []vsBaseline{{Metric: "stale"}}
	got := reanalysed(t, r)
	if len(got.Baseline) != len(metrics) || got.Baseline[0].Verdict != want0.Verdict || got.Baseline[0].Ratio != want0.Ratio {
		t.Fatalf("reanalysed comparison %+v, want its first row %+v", got.Baseline, want0)
	}
}
