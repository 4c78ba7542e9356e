// SPDX-License-Identifier: Apache-2.0

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"

	"github.com/swiftlane/swiftlane/bench/internal/benchlab"
)

// Metric describes one per-variant number of the report. Better says which
// way is good ("higher", "lower"; "" for numbers that only explain others).
type Metric struct {
	Key    string `json:"key"`
	Label  string `json:"label"`
	Better string `json:"better,omitempty"`
}

// metrics are the report's keys per variant, in the order the plot shows
// them. The first ten are the ones issue #18 names; keep them stable so
// runs can be compared.
var metrics = []Metric{
	{"probe_idle_avg_us", "probe RTT avg, idle (µs)", "lower"},
	{"probe_loaded_avg_us", "probe RTT avg, hogs (µs)", "lower"},
	{"probe_loaded_p99_us", "probe RTT p99, hogs (µs)", "lower"},
	{"cyclictest_periods", "cyclictest periods run, hogs", "higher"},
	{"cyclictest_avg_us", "cyclictest latency avg, hogs (µs)", "lower"},
	{"messaging_msgs_per_s", "perf messaging (msgs/s)", "higher"},
	{"hackbench_s", "hackbench threads+pipes (s)", "lower"},
	{"hog_ops_per_cpu_s", "hog bogo ops per CPU-second", "higher"},
	{"nginx_rps", "nginx req/s at full speed, hogs", "higher"},
	{"nginx_p99_us", "nginx p99 paced, hogs (µs)", "lower"},
	{"probe_idle_p99_us", "probe RTT p99, idle (µs)", "lower"},
	{"cyclictest_p99_us", "cyclictest latency p99, hogs (µs)", "lower"},
	{"cyclictest_max_us", "cyclictest latency max, hogs (µs)", "lower"},
	{"pipe_ops_per_s", "perf pipe (ops/s)", "higher"},
	{"ctx_switches_per_s", "context switches/s, messaging", ""},
	{"migrations_per_s", "migrations/s, messaging", ""},
	{"hog_ops_per_s", "hog bogo ops per second", "higher"},
	{"nginx_idle_rps", "nginx req/s at full speed, idle", "higher"},
	{"nginx_idle_p99_us", "nginx p99 paced, idle (µs)", "lower"},
	{"nginx_full_p99_us", "nginx p99 at full speed, hogs (µs)", "lower"},
	{"nginx_idle_full_p99_us", "nginx p99 at full speed, idle (µs)", "lower"},
	{"probe_idle_same_cpu_pct", "probe replies read on the CPU that sent them, idle (%)", ""},
	{"probe_loaded_same_cpu_pct", "probe replies read on the CPU that sent them, hogs (%)", ""},
}

// Stat is one metric of one variant over the boots that measured it.
type Stat = benchlab.Stat

// Report is bench/results/sched.json.
type Report struct {
	Kernel     string     `json:"kernel"`
	CPUs       int        `json:"cpus"`
	Boots      int        `json:"boots"`
	Dates      []string   `json:"dates"`
	Note       string     `json:"note"`
	Settings   Settings   `json:"settings"`
	Order      []string   `json:"order"`
	BootOrders [][]string `json:"boot_orders"`
	Metrics    []Metric   `json:"metrics"`
	// Variants: every key of metrics (a Stat, or null if no boot measured
	// it), plus description, ops, errors and rtt_us (the loaded probe's
	// round trips of all boots, as 1000 quantiles, for the CDF plot);
	// scx_layered's also layered (each boot's LayeredCheck) and
	// probe_in_critical_layer (true if it was in every boot).
	Variants map[string]map[string]any `json:"variants"`
	Torture  Torture                   `json:"torture"`
	Goals    []Goal                    `json:"goals"`
}

// Torture is the report's copy of bench/results/torture.json.
type Torture struct {
	Runs     int                      `json:"runs"`
	Survived int                      `json:"survived"`
	Kernels  map[string]TortureKernel `json:"kernels,omitempty"`
	Note     string                   `json:"note,omitempty"`
}

// mergeBoots reads boot reports and writes the merged report to out.
func mergeBoots(files []string, tortureFile, out string) error {
	boots, err := benchlab.ReadBoots[BootReport](files)
	if err != nil {
		return err
	}
	sort.SliceStable(boots, func(i, j int) bool { return boots[i].Boot < boots[j].Boot })
	rep, err := mergeReports(boots)
	if err != nil {
		return err
	}
	if out == "" {
		out = "bench/results/" + resultName(rep.Settings.Profile) + ".json"
	}
	rep.Torture = readTorture(tortureFile)
	rep.Goals = goals(rep)
	printReport(os.Stdout, rep)
	return benchlab.WriteJSON(out, rep)
}

func mergeReports(boots []BootReport) (*Report, error) {
	first := boots[0]
	rep := &Report{
		Kernel: first.Kernel, CPUs: first.CPUs, Boots: len(boots), Settings: first.Settings,
		Note: "Medians over boots, with min and max; every variant runs in every boot, the order rotated by one per boot. " +
			"QEMU TCG guest: absolute numbers are inflated 20-50x and noisy; compare variants within a run.",
		Metrics:  metrics,
		Variants: map[string]map[string]any{},
	}
	for _, b := range boots {
		if b.Kernel != first.Kernel || b.CPUs != first.CPUs || !reflect.DeepEqual(b.Settings, first.Settings) {
			return nil, fmt.Errorf("boot %d ran differently from boot %d (kernel %s/%s, CPUs %d/%d, settings %+v / %+v): merge boots of one run only",
				b.Boot, first.Boot, b.Kernel, first.Kernel, b.CPUs, first.CPUs, b.Settings, first.Settings)
		}
		rep.Dates = append(rep.Dates, b.Date)
		rep.BootOrders = append(rep.BootOrders, b.Order)
	}
	for _, v := range slices.Concat(variants, optional) {
		var runs []*VariantRun
		var bootNo []int
		for _, b := range boots {
			if r := b.Variants[v.name]; r != nil {
				runs = append(runs, r)
				bootNo = append(bootNo, b.Boot)
			}
		}
		if len(runs) == 0 {
			continue
		}
		rep.Order = append(rep.Order, v.name)
		mv := map[string]any{"description": runs[0].Description}
		for _, m := range metrics {
			var xs []float64
			var from []int
			for i, r := range runs {
				if x, ok := r.Metrics[m.Key]; ok {
					xs = append(xs, x)
					from = append(from, bootNo[i])
				}
			}
			mv[m.Key] = benchlab.NewStat(xs, from)
		}
		var errs []string
		var rtt []float64
		var layered []BootLayeredCheck
		for i, r := range runs {
			if r.Error != "" {
				errs = append(errs, fmt.Sprintf("boot %d: %s", bootNo[i], r.Error))
			}
			for _, w := range errorKeys() {
				if e := r.Errors[w]; e != "" {
					errs = append(errs, fmt.Sprintf("boot %d: %s: %s", bootNo[i], w, e))
				}
			}
			if r.Layered != nil {
				layered = append(layered, BootLayeredCheck{bootNo[i], r.Layered})
			}
			if r.ProbeLoaded != nil {
				rtt = append(rtt, r.ProbeLoaded.RTTUs...)
			}
			if r.Ops != "" {
				mv["ops"] = r.Ops
			}
		}
		if len(errs) > 0 {
			mv["errors"] = errs
		}
		if len(rtt) > 0 {
			mv["rtt_us"] = quantiles(rtt, 1000)
		}
		if len(layered) > 0 {
			in := true
			for _, c := range layered {
				in = in && c.ProbeInCritical
			}
			mv["layered"], mv["probe_in_critical_layer"] = layered, in
		}
		rep.Variants[v.name] = mv
	}
	return rep, nil
}

// BootLayeredCheck is one boot's LayeredCheck in the merged report.
type BootLayeredCheck struct {
	Boot int `json:"boot"`
	*LayeredCheck
}

// quantiles reduces samples to n evenly spaced quantiles (all of them if
// there are fewer): the same CDF in a fraction of the file.
func quantiles(xs []float64, n int) []float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) <= n {
		return s
	}
	q := make([]float64, n)
	for i := range q {
		q[i] = s[i*(len(s)-1)/(n-1)]
	}
	return q
}

func readTorture(path string) Torture {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Torture{Note: path + " is missing: run `make bench-torture`"}
	}
	if err != nil {
		return Torture{Note: err.Error()}
	}
	var ks map[string]TortureKernel
	if err := json.Unmarshal(b, &ks); err != nil {
		return Torture{Note: fmt.Sprintf("%s: %v", path, err)}
	}
	t := Torture{Kernels: ks}
	for _, k := range ks {
		t.Runs += k.Runs
		t.Survived += k.Survived
	}
	return t
}

// Goal is one of issue #18's goals (and #39's for the heavy profile), checked against the medians; Met is nil
// when the numbers it needs are missing.
type Goal struct {
	Goal  string `json:"goal"`
	Value string `json:"value"`
	Met   *bool  `json:"met"`
}

// goals checks issue #18's goals. Throughput and timer goals take swiftlane
// without strategies (none of those workloads is matched by one); latency
// goals the critical variant.
func goals(rep *Report) []Goal {
	med := func(variant, key string) (float64, bool) {
		v := rep.Variants[variant]
		if v == nil {
			return 0, false
		}
		s, _ := v[key].(*Stat)
		if s == nil {
			return 0, false
		}
		return s.Median, true
	}
	var gs []Goal
	add := func(goal string, ok bool, value string, met bool) {
		g := Goal{Goal: goal, Value: "not measured"}
		if ok {
			g.Value, g.Met = value, &met
		}
		gs = append(gs, g)
	}
	// ratio compares a variant's median with another's: a/b.
	ratio := func(a, b, key string) (float64, bool) {
		x, ok1 := med(a, key)
		y, ok2 := med(b, key)
		return x / y, ok1 && ok2 && y != 0
	}

	var tk []string
	tortureOK := len(rep.Torture.Kernels) > 0
	for _, name := range sortedKeys(rep.Torture.Kernels) {
		k := rep.Torture.Kernels[name]
		tk = append(tk, fmt.Sprintf("%s %d/%d", name, k.Survived, k.Runs))
		tortureOK = tortureOK && k.Runs >= 20 && k.Survived == k.Runs && k.coversModes(tortureModes, 20)
	}
	add("torture: survived = runs, at least 20 runs per kernel, in "+strings.Join(tortureModes, " and ")+" mode",
		len(tk) > 0, strings.Join(tk, ", "), tortureOK)

	r, ok := ratio("swiftlane", "eevdf", "cyclictest_periods")
	add("cyclictest periods run >= EEVDF's", ok, fmt.Sprintf("%.2fx EEVDF's", r), r >= 1)
	r, ok = ratio("swiftlane", "eevdf", "cyclictest_avg_us")
	add("cyclictest average latency <= 2x EEVDF's", ok, fmt.Sprintf("%.2fx EEVDF's", r), r <= 2)
	r, ok = ratio("swiftlane", "eevdf", "messaging_msgs_per_s")
	add("messaging throughput >= EEVDF's", ok, fmt.Sprintf("%.2fx EEVDF's", r), r >= 1)
	r, ok = ratio("swiftlane", "eevdf", "hackbench_s")
	add("hackbench throughput >= EEVDF's (time <=)", ok, fmt.Sprintf("time %.2fx EEVDF's", r), r <= 1)
	r, ok = ratio("swiftlane", "eevdf", "hog_ops_per_cpu_s")
	add("hog work per CPU-second >= 97% of EEVDF's", ok, fmt.Sprintf("%.1f%% of EEVDF's", 100*r), r >= 0.97)

	idle, ok1 := med("swiftlane-critical", "probe_idle_avg_us")
	loaded, ok2 := med("swiftlane-critical", "probe_loaded_avg_us")
	add("critical probe under saturation <= 1.5x its idle average", ok1 && ok2 && idle > 0,
		fmt.Sprintf("%.2fx", loaded/idle), loaded <= 1.5*idle)
	for _, key := range []string{"probe_loaded_avg_us", "probe_loaded_p99_us"} {
		crit, ok := med("swiftlane-critical", key)
		var worse []string
		var others []string
		for _, other := range rep.Order {
			if other == "swiftlane-critical" || other == "eevdf" {
				continue
			}
			if x, ok := med(other, key); ok {
				others = append(others, fmt.Sprintf("%s %.0f", other, x))
				if crit >= x {
					worse = append(worse, other)
				}
			}
		}
		value := fmt.Sprintf("%.0f µs against %s", crit, strings.Join(others, ", "))
		if len(worse) > 0 {
			value += "; not below " + strings.Join(worse, ", ")
		}
		add(fmt.Sprintf("critical probe %s below every peer's and swiftlane without strategies", strings.TrimPrefix(key, "probe_loaded_")),
			ok && len(others) > 0, value, len(worse) == 0)
	}
	idle, ok1 = med("swiftlane-critical", "nginx_idle_p99_us")
	loaded, ok2 = med("swiftlane-critical", "nginx_p99_us")
	add("nginx critical p99 under saturation <= 2x its idle p99", ok1 && ok2 && idle > 0,
		fmt.Sprintf("%.2fx", loaded/idle), loaded <= 2*idle)
	if rep.Settings.Profile == "heavy" {
		// Issue #39's: the profile saturates EEVDF, and the critical class
		// keeps the probe well ahead of it.
		idle, ok1 = med("eevdf", "probe_idle_avg_us")
		loaded, ok2 = med("eevdf", "probe_loaded_avg_us")
		add("heavy profile: EEVDF's loaded probe average >= 5x its idle one", ok1 && ok2 && idle > 0,
			fmt.Sprintf("%.2fx", loaded/idle), loaded >= 5*idle)
		r, ok = ratio("eevdf", "swiftlane-critical", "probe_loaded_avg_us")
		add("heavy profile: critical probe average >= 5x better than EEVDF's loaded", ok,
			fmt.Sprintf("%.2fx better", r), r >= 5)
	}
	return gs
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
