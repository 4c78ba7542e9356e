// SPDX-License-Identifier: Apache-2.0

package main

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The demo's own CPU time is root's tree, comm names with spaces and
// parentheses included; other processes are the host's other work.
func TestTreeTicks(t *testing.T) {
	proc := t.TempDir()
	// pid: ppid, utime stime cutime cstime
	for pid, stat := range map[string]string{
		"100":  "100 (bash) S 1 100 100 0 -1 0 0 0 0 0 10 5 30 0 20 0",           // root: 10+5+30 (a reaped child)
		"101":  "101 (vng) S 100 100 100 0 -1 0 0 0 0 0 2 1 0 0 20 0",            // 3
		"102":  "102 (qemu (x) y) R 101 100 100 0 -1 0 0 0 0 0 700 100 0 0 20 0", // 800
		"200":  "200 (go build) R 1 200 200 0 -1 0 0 0 0 0 5000 100 0 0 20 0",    // not ours
		"201":  "201 (compile) R 200 200 200 0 -1 0 0 0 0 0 900 0 0 0 20 0",      // not ours
		"self": "should be skipped",
	} {
		if err := os.MkdirAll(filepath.Join(proc, pid), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(proc, pid, "stat"), []byte(stat+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got := treeTicks(proc, 100); got != 848 {
		t.Errorf("tree of 100: %v ticks, want 848", got)
	}
	if got := treeTicks(proc, 200); got != 6000 {
		t.Errorf("tree of 200: %v ticks, want 6000", got)
	}
}

func TestParseCPUTimes(t *testing.T) {
	c, err := parseCPUTimes([]byte("cpu  100 5 50 800 20 3 2 10 40 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c != (cpuTimes{total: 990, idle: 820, steal: 10}) {
		t.Errorf("%+v", c)
	}
	if _, err := parseCPUTimes([]byte("intr 1 2 3\n")); err == nil {
		t.Error("want an error for a file without the cpu line")
	}
}

// Over a window the host was busy 1.5 CPUs, of which the demo's tree used
// 1.0: the other work is 0.5 CPUs; the window widens to the samples around it.
func TestHostLoad(t *testing.T) {
	t0 := time.Unix(1000, 0)
	sample := func(s float64, busy, own, load float64) hostSample {
		// 2 CPUs: 200 ticks a second in all.
		total := 200 * s
		return hostSample{at: t0.Add(time.Duration(s * float64(time.Second))),
			cpu: cpuTimes{total: total, idle: total - busy}, own: own, load1: load}
	}
	ss := []hostSample{
		sample(0, 0, 0, 1),
		sample(1, 150, 100, 2), // the window starts at 1.2 s: this sample opens it
		sample(2, 300, 200, 4),
		sample(3, 450, 300, 3), // and ends at 2.5 s: this one closes it
		sample(4, 800, 400, 9),
	}
	h := hostLoad(ss, t0.Add(1200*time.Millisecond), t0.Add(2500*time.Millisecond))
	if h == nil {
		t.Fatal("no load")
	}
	if math.Abs(h.OtherCPUs-0.5) > 1e-9 || math.Abs(h.DemoCPUs-1) > 1e-9 || h.Load1Min != 2 || h.Load1Max != 4 {
		t.Errorf("%+v", h)
	}
	if hostLoad(ss[:1], t0, t0.Add(time.Second)) != nil {
		t.Error("one sample cannot give a rate")
	}
}

// demoReport builds rounds from per-round probe averages (idle, saturated)
// for eevdf and swiftlane-critical and the host's other work per round.
func demoReport(eevdf, critical [][2]float64, other []float64) *DemoReport {
	rep := &DemoReport{CPUs: 2, Variants: []string{"eevdf", "swiftlane-critical"},
		Host: &HostLoad{CPUs: 2, OtherCPUs: slices.Max(other)}}
	for i := range other {
		rep.Rounds = append(rep.Rounds, DemoRound{Round: i + 1, Host: &HostLoad{CPUs: 2, OtherCPUs: other[i]},
			Runs: map[string]*DemoRun{
				"eevdf":              {Idle: &ProbeResult{AvgUs: eevdf[i][0]}, Loaded: &ProbeResult{AvgUs: eevdf[i][1]}},
				"swiftlane-critical": {Idle: &ProbeResult{AvgUs: critical[i][0]}, Loaded: &ProbeResult{AvgUs: critical[i][1]}},
			}})
	}
	return rep
}

func verdict(t *testing.T, rep *DemoReport, phase string) string {
	t.Helper()
	rep.analyse()
	for _, v := range rep.Verdicts {
		if v.Phase == phase && v.Cand == "swiftlane-critical" && v.Base == "eevdf" {
			return v.Verdict
		}
	}
	t.Fatalf("no %s verdict for critical against eevdf in %+v", phase, rep.Verdicts)
	return ""
}

func TestDemoVerdicts(t *testing.T) {
	eevdf := [][2]float64{{880, 3400}, {900, 3900}, {860, 3100}, {910, 4200}, {870, 3600}}
	critical := [][2]float64{{950, 520}, {840, 610}, {990, 480}, {870, 700}, {930, 560}}
	quiet := []float64{0.1, 0.2, 0.0, 0.3, 0.1}

	// Quiet host: the saturated gain is clear, the idle difference is
	// inside the rounds' spread.
	rep := demoReport(eevdf, critical, quiet)
	if v := verdict(t, rep, "saturated"); !strings.HasPrefix(v, "swiftlane-critical 6.4x faster than eevdf") {
		t.Errorf("saturated, quiet host: %q", v)
	}
	if v := verdict(t, rep, "idle"); !strings.HasPrefix(v, "not measurable here: the rounds overlap") {
		t.Errorf("idle, quiet host: %q", v)
	}

	// A build on the host in three rounds of five: two quiet rounds are
	// too few for any ratio, whatever the rounds say.
	rep = demoReport(eevdf, critical, []float64{1.2, 0.2, 1.4, 0.9, 0.1})
	v := verdict(t, rep, "saturated")
	for _, want := range []string{"not measurable here", "only 2 round(s)", "3 of 5 rounds set aside", "other work on 1.4 of its 2 CPUs"} {
		if !strings.Contains(v, want) {
			t.Errorf("busy host: verdict %q lacks %q", v, want)
		}
	}

	// The busy host, as one round would have put it (critical
	// slower) and with the spread of a loaded host: no ratio either way.
	busyCrit := [][2]float64{{3300, 5506}, {2900, 2600}, {4100, 4100}, {3000, 3000}, {5000, 7000}}
	busyEEVDF := [][2]float64{{3000, 3401}, {3500, 5200}, {3300, 2900}, {3900, 6100}, {4300, 4000}}
	rep = demoReport(busyEEVDF, busyCrit, []float64{0.4, 0.3, 0.5, 0.2, 0.4})
	if v := verdict(t, rep, "saturated"); !strings.HasPrefix(v, "not measurable here: the rounds overlap") {
		t.Errorf("spread swamps the difference: %q", v)
	}

	// The table names every round, the medians and the host's load.
	var b strings.Builder
	printDemo(&b, rep)
	for _, want := range []string{"round 5", "swiftlane-critical saturated", "4100 [2600–7000]", "host: other work, CPUs", "== verdict"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("printout lacks %q:\n%s", want, b.String())
		}
	}
}
