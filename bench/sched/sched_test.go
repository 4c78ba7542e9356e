// SPDX-License-Identifier: Apache-2.0

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/swiftlane/swiftlane/internal/config"
	"github.com/swiftlane/swiftlane/internal/strategy"
)

func TestRotate(t *testing.T) {
	names := []string{"a", "b", "c"}
	for boot, want := range map[int][]string{1: {"a", "b", "c"}, 2: {"b", "c", "a"}, 3: {"c", "a", "b"}, 4: {"a", "b", "c"}} {
		if got := rotate(names, boot-1); !slices.Equal(got, want) {
			t.Errorf("boot %d: %v, want %v", boot, got, want)
		}
	}
}

// A subset of the variants rotates through every position: each boot of
// three starts with a different one, and the fourth repeats the first.
func TestBootOrderRotatesSubset(t *testing.T) {
	var orders [][]string
	for boot := 1; boot <= 4; boot++ {
		vs, err := bootOrder(boot, "eevdf,swiftlane,swiftlane-builtin-idle")
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, v := range vs {
			names = append(names, v.name)
		}
		orders = append(orders, names)
	}
	if orders[0][0] == orders[1][0] || orders[1][0] == orders[2][0] || orders[0][0] == orders[2][0] ||
		!slices.Equal(orders[3], orders[0]) {
		t.Errorf("boots 1-4 ran %v: want each of three first once, then the first order again", orders)
	}
}

// The critical variant must match nginx and both probe processes, and
// nothing else the benchmark runs.
func TestCriticalStrategies(t *testing.T) {
	cfg, err := config.Parse([]byte(criticalStrategies))
	if err != nil {
		t.Fatal(err)
	}
	set, err := strategy.Compile(cfg.Strategies)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []struct {
		p    strategy.Process
		want bool
	}{
		{strategy.Process{Cmdline: "/repo/build/swiftlane probe echo --listen 127.0.0.1:7777", Exe: "/repo/build/swiftlane"}, true},
		{strategy.Process{Cmdline: "/repo/build/swiftlane probe rtt --target 127.0.0.1:7777", Exe: "/repo/build/swiftlane"}, true},
		{strategy.Process{Cmdline: "nginx: worker process", Exe: "/usr/sbin/nginx"}, true},
		{strategy.Process{Cmdline: "nginx: master process /usr/sbin/nginx -p /tmp/nginx-1 -c /tmp/nginx-1/nginx.conf", Exe: "/usr/sbin/nginx"}, true},
		{strategy.Process{Cmdline: "/usr/sbin/nginx -p /tmp/nginx-1 -c /tmp/nginx-1/nginx.conf", Exe: "/usr/sbin/nginx"}, true},
		{strategy.Process{Cmdline: "/repo/build/swiftlane run --metrics-addr 127.0.0.1:9462 --config /tmp/c.yaml", Exe: "/repo/build/swiftlane"}, false},
		{strategy.Process{Cmdline: "/repo/build/bench-sched -boot 1 -swiftlane /repo/build/swiftlane -out x.json", Exe: "/repo/build/bench-sched"}, false},
		{strategy.Process{Cmdline: "wrk -t1 -c8 -d15s --latency --timeout 10s http://127.0.0.1:8088/", Exe: "/usr/bin/wrk"}, false},
		{strategy.Process{Cmdline: "stress-ng-cpu [run]", Exe: "/usr/bin/stress-ng"}, false},
		{strategy.Process{Cmdline: "cyclictest --quiet --threads=1", Exe: "/usr/bin/cyclictest"}, false},
	} {
		if _, got := set.Match(p.p); got != p.want {
			t.Errorf("%q matched %v, want %v", p.p.Cmdline, got, p.want)
		}
	}
}

// scx_layered's config: its critical layer matches the same processes by
// comm and preempts; the last layer catches everything else.
func TestLayeredConfig(t *testing.T) {
	var layers []struct {
		Name    string                    `json:"name"`
		Matches [][]map[string]any        `json:"matches"`
		Kind    map[string]map[string]any `json:"kind"`
	}
	if err := json.Unmarshal(layeredConfig, &layers); err != nil {
		t.Fatal(err)
	}
	if len(layers) != 2 {
		t.Fatalf("%d layers, want critical and normal", len(layers))
	}
	var comms []string
	for _, and := range layers[0].Matches {
		for _, m := range and {
			if c, ok := m["CommPrefix"].(string); ok {
				comms = append(comms, c)
			}
		}
	}
	slices.Sort(comms)
	if !slices.Equal(comms, []string{"nginx", "swiftlane"}) {
		t.Errorf("critical layer matches comms %v, want nginx and swiftlane", comms)
	}
	if layers[0].Kind["Open"]["preempt"] != true {
		t.Errorf("critical layer does not preempt: %v", layers[0].Kind)
	}
	last := layers[len(layers)-1].Matches
	if len(last) != 1 || len(last[0]) != 0 {
		t.Errorf("last layer must match everything ([[]]), has %v", last)
	}
}

func TestParseCyclictest(t *testing.T) {
	// rt-tests 2.x --json, trimmed: 1000 periods, 10 of them late past the
	// histogram, so the p99 is the 990th fastest.
	doc := `{
  "file_version": 1,
  "num_threads": 1,
  "resolution_in_ns": 0,
  "thread": {
    "0": {
      "histogram": {
        "12": 500,
        "40": 480,
        "3000": 10
      },
      "cycles": 1000,
      "min": 9,
      "max": 2500000,
      "avg": 2600.50,
      "cpu": -1,
      "node": -1
    }
  }
}`
	m, err := parseCyclictest([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"cyclictest_periods": 1000, "cyclictest_avg_us": 2600.5, "cyclictest_p99_us": 3000, "cyclictest_max_us": 2500000}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %v, want %v", k, m[k], v)
		}
	}
	// The p99 among the overflows: only the maximum is known.
	if q := histQuantile(map[string]uint64{"5": 900}, 1000, 0.99, 1234567); q != 1234567 {
		t.Errorf("p99 in the overflow = %v, want the max", q)
	}
	if _, err := parseCyclictest([]byte(`{"thread": {"0": {"cycles": 0}}}`)); err == nil {
		t.Error("no periods: want an error")
	}
}

func TestParsePerf(t *testing.T) {
	messaging := `# Running 'sched/messaging' benchmark:
# 20 sender and receiver processes per group
# 2 groups == 80 processes run

     Total time: 3.241 [sec]
`
	if v, err := totalTime([]byte(messaging)); err != nil || v != 3.241 {
		t.Errorf("messaging: %v, %v", v, err)
	}
	pipe := `# Running 'sched/pipe' benchmark:
# Executed 20000 pipe operations between two processes

     Total time: 4.512 [sec]

     225.600000 usecs/op
           4432 ops/sec
`
	if v, err := opsPerSec([]byte(pipe)); err != nil || v != 4432 {
		t.Errorf("pipe: %v, %v", v, err)
	}
	hb := "Running in threaded mode with 2 groups using 40 file descriptors each (== 80 tasks)\nEach sender will pass 100 messages of 100 bytes\nTime: 2.875\n"
	if v, err := hackbenchTime([]byte(hb)); err != nil || v != 2.875 {
		t.Errorf("hackbench: %v, %v", v, err)
	}
	if _, err := totalTime([]byte("perf: 'bench' is not a perf-command")); err == nil {
		t.Error("no total time: want an error")
	}
	stat := `# started on Mon Nov 23 10:00:00 2026

123456,,context-switches,8011223344,100.00,15.41,K/sec
789,,cpu-migrations,8011223344,100.00,98.5,/sec
<not supported>,,page-faults,0,100.00,,
`
	c := parsePerfStat([]byte(stat))
	if c["context-switches"] != 123456 || c["cpu-migrations"] != 789 {
		t.Errorf("perf stat: %v", c)
	}
	if _, ok := c["page-faults"]; ok {
		t.Error("an event perf could not count must be left out")
	}
}

func TestParseWrk(t *testing.T) {
	out := `Running 15s test @ http://127.0.0.1:8088/
  1 threads and 8 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     2.10ms    3.30ms  61.20ms   93.10%
    Req/Sec     4.20k   512.00     5.01k    70.00%
  Latency Distribution
     50%  812.00us
     75%    1.51ms
     90%    4.02ms
     99%   17.35ms
  62891 requests in 15.01s, 80.12MB read
  Socket errors: connect 0, read 0, write 0, timeout 2
Requests/sec:   4190.07
Transfer/sec:      5.34MB
`
	r, err := parseWrk([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	if r.rps != 4190.07 || r.p50Us != 812 || r.p99Us != 17350 || r.socketErrors != 2 {
		t.Errorf("wrk: %+v", r)
	}
	if _, err := parseWrk([]byte(strings.Replace(out, "  Socket", "  Non-2xx or 3xx responses: 5\n  Socket", 1))); err == nil {
		t.Error("error statuses: want an error")
	}
}

func TestParseHogYAML(t *testing.T) {
	doc := `---
system-info:
      stress-ng-version: 0.15.06
metrics:
    - stressor: cpu
      bogo-ops: 4000
      bogo-ops-per-second-usr-sys-time: 1.000000e+02
      bogo-ops-per-second-real-time: 2.000000e+02
      wall-clock-time: 2.000000e+01
      user-time: 3.900000e+01
      system-time: 1.000000e+00
...
`
	perReal, perCPU, err := parseHogYAML([]byte(doc))
	if err != nil || perReal != 200 || perCPU != 100 {
		t.Errorf("got %v, %v, %v", perReal, perCPU, err)
	}
	// Without the rate, from the ops and the CPU time.
	doc = strings.Replace(doc, "      bogo-ops-per-second-usr-sys-time: 1.000000e+02\n", "", 1)
	if _, perCPU, err := parseHogYAML([]byte(doc)); err != nil || perCPU != 100 {
		t.Errorf("derived: %v, %v", perCPU, err)
	}
}

func TestMerge(t *testing.T) {
	set := Settings{Workloads: "probe", PhaseS: 15}
	boot := func(n int, order []string, eevdf, crit map[string]float64) BootReport {
		return BootReport{Boot: n, Kernel: "7.3.4", CPUs: 2, Settings: set, Order: order, Variants: map[string]*VariantRun{
			"eevdf":              {Description: "e", Metrics: eevdf},
			"swiftlane-critical": {Description: "c", Metrics: crit, Errors: map[string]string{"nginx": "boom"}, ProbeLoaded: &ProbeResult{RTTUs: []float64{float64(n)}}},
		}}
	}
	boots := []BootReport{
		boot(1, []string{"eevdf", "swiftlane-critical"}, map[string]float64{"probe_loaded_avg_us": 3000}, map[string]float64{"probe_idle_avg_us": 1000, "probe_loaded_avg_us": 1400}),
		boot(2, []string{"swiftlane-critical", "eevdf"}, map[string]float64{"probe_loaded_avg_us": 2000}, map[string]float64{"probe_idle_avg_us": 1200, "probe_loaded_avg_us": 1300}),
		boot(3, []string{"eevdf", "swiftlane-critical"}, map[string]float64{"probe_loaded_avg_us": 4000}, map[string]float64{"probe_idle_avg_us": 1100}),
	}
	rep, err := mergeReports(boots)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rep.Order, []string{"eevdf", "swiftlane-critical"}) || rep.Boots != 3 {
		t.Errorf("order %v, boots %d", rep.Order, rep.Boots)
	}
	s := rep.Variants["eevdf"]["probe_loaded_avg_us"].(*Stat)
	if s.Median != 3000 || s.Min != 2000 || s.Max != 4000 || !slices.Equal(s.Values, []float64{3000, 2000, 4000}) {
		t.Errorf("eevdf loaded avg: %+v", s)
	}
	// Measured in two boots of three: the median of those two.
	if s := rep.Variants["swiftlane-critical"]["probe_loaded_avg_us"].(*Stat); s.Median != 1350 || !slices.Equal(s.Boots, []int{1, 2}) {
		t.Errorf("critical loaded avg: %+v", s)
	}
	// Every metric key is there, null when never measured.
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		Variants map[string]map[string]json.RawMessage `json:"variants"`
	}
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	for _, m := range metrics {
		raw, ok := back.Variants["eevdf"][m.Key]
		if !ok {
			t.Errorf("key %s missing", m.Key)
		}
		if m.Key == "nginx_rps" && string(raw) != "null" {
			t.Errorf("nginx_rps never measured: %s, want null", raw)
		}
	}
	if errs := rep.Variants["swiftlane-critical"]["errors"].([]string); len(errs) != 3 || errs[0] != "boot 1: nginx: boom" {
		t.Errorf("errors: %v", errs)
	}
	if rtt := rep.Variants["swiftlane-critical"]["rtt_us"].([]float64); !slices.Equal(rtt, []float64{1, 2, 3}) {
		t.Errorf("pooled rtt: %v", rtt)
	}

	rep.Goals = goals(rep)
	for _, g := range rep.Goals {
		if strings.HasPrefix(g.Goal, "critical probe under saturation") {
			if g.Met == nil || !*g.Met || g.Value != "1.23x" {
				t.Errorf("goal %q: %q %v", g.Goal, g.Value, g.Met)
			}
		}
		if strings.HasPrefix(g.Goal, "cyclictest") && g.Met != nil {
			t.Errorf("goal %q without numbers must be unknown", g.Goal)
		}
	}

	boots[1].Settings.PhaseS = 3
	if _, err := mergeReports(boots); err == nil {
		t.Error("boots with different settings merged")
	}
}

func TestQuantiles(t *testing.T) {
	var xs []float64
	for i := 1000; i >= 0; i-- {
		xs = append(xs, float64(i))
	}
	q := quantiles(xs, 11)
	if !slices.Equal(q, []float64{0, 100, 200, 300, 400, 500, 600, 700, 800, 900, 1000}) {
		t.Errorf("quantiles: %v", q)
	}
}

func TestTallyTorture(t *testing.T) {
	dir := t.TempDir()
	write := func(alias, name, s string) {
		if err := os.MkdirAll(filepath.Join(dir, alias), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, alias, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pass := `torture-kernel: 7.3.4+deb13-amd64
=== RUN   TestTorture
=== RUN   TestTorture/kernel/none
    torture_test.go:180: kernel: stress-ng ran 20s
--- PASS: TestTorture (80.00s)
    --- PASS: TestTorture/kernel/none (20.00s)
    --- PASS: TestTorture/kernel/strategies (20.00s)
PASS
lab-exit: 0
`
	fail := `torture-kernel: 7.3.4+deb13-amd64
=== RUN   TestTorture
=== RUN   TestTorture/kernel/none
    torture_test.go:190: the scheduler exited under torture:
--- FAIL: TestTorture (80.00s)
    --- FAIL: TestTorture/kernel/none (20.00s)
    --- PASS: TestTorture/kernel/strategies (20.00s)
FAIL
lab-exit: 1
`
	write("newest", "run-01.log", pass)
	write("newest", "run-02.log", fail)
	write("newest", "run-03.log", "lab: error: the VM did not run the command to completion\nlab-exit: 125\n")
	write("older", "run-01.log", strings.ReplaceAll(pass, "7.3.4", "6.18.15"))
	write("6.18.15", "run-01.log", strings.ReplaceAll(pass, "7.3.4", "6.18.15")) // same kernel by its version
	out := filepath.Join(dir, "torture.json")
	if err := tallyTorture(dir, out); err != nil {
		t.Fatal(err)
	}
	tor := readTorture(out)
	if tor.Runs != 4 || tor.Survived != 3 {
		t.Errorf("totals %d/%d, want 3 of 4", tor.Survived, tor.Runs)
	}
	k := tor.Kernels["7.3.4+deb13-amd64"]
	if k.Alias != "newest" || k.Runs != 2 || k.Survived != 1 || k.LabErrors != 1 || len(k.Failures) != 1 {
		t.Errorf("newest: %+v", k)
	}
	if c := k.Cases["kernel/none"]; c.Runs != 2 || c.Survived != 1 {
		t.Errorf("kernel/none: %+v", c)
	}
	if !strings.Contains(k.Failures[0], "failed: kernel/none") {
		t.Errorf("failure: %q", k.Failures[0])
	}
	if k := tor.Kernels["6.18.15+deb13-amd64"]; k.Runs != 2 || k.Survived != 2 || k.Alias != "6.18.15,older" {
		t.Errorf("older: %+v", k)
	}
}

// The tables print whatever a boot got, failed variants included.
func TestPrint(t *testing.T) {
	boot := BootReport{Settings: Settings{Workloads: "probe,hackbench"}, Order: []string{"eevdf", "swiftlane", "scx_lavd"}, Variants: map[string]*VariantRun{
		"eevdf": {Metrics: map[string]float64{"probe_loaded_avg_us": 3000, "hackbench_s": 2.5},
			ProbeIdle: &ProbeResult{AvgUs: 1500, Samples: 10}, ProbeLoaded: &ProbeResult{AvgUs: 3000, Samples: 10, HogOpsPerCPUS: 1200}},
		"swiftlane": {Metrics: map[string]float64{}, Errors: map[string]string{"probe": "probe got no replies"}},
		"scx_lavd":  {Error: "scx_lavd not built: cargo not found"},
	}}
	var b strings.Builder
	printBoot(&b, boot)
	for _, want := range []string{"1.0x better", "probe got no replies", "scx_lavd: scx_lavd not built", "hackbench_s"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("boot table lacks %q:\n%s", want, b.String())
		}
	}
	rep, err := mergeReports([]BootReport{boot})
	if err != nil {
		t.Fatal(err)
	}
	rep.Goals = goals(rep)
	b.Reset()
	printReport(&b, rep)
	if !strings.Contains(b.String(), "2.5 ±0%") || !strings.Contains(b.String(), "not measured") {
		t.Errorf("report:\n%s", b.String())
	}
}

func TestTortureCoversModes(t *testing.T) {
	k := TortureKernel{Runs: 20, Survived: 20, Cases: map[string]TortureCase{
		"kernel/none": {Runs: 20, Survived: 20}, "kernel/strategies": {Runs: 20, Survived: 20},
	}}
	if k.coversModes(tortureModes, 20) {
		t.Error("a kernel-mode tally passed for both modes")
	}
	k.Cases["userspace/none"] = TortureCase{Runs: 19, Survived: 19}
	if k.coversModes(tortureModes, 20) {
		t.Error("19 user-space runs passed for 20")
	}
	k.Cases["userspace/none"] = TortureCase{Runs: 20, Survived: 20}
	if !k.coversModes(tortureModes, 20) {
		t.Error("20 runs in each mode did not pass")
	}
}
