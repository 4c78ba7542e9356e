// SPDX-License-Identifier: Apache-2.0

// Command sched is the scheduler's benchmark suite behind `make bench-sched`
// (and `make demo`). It has these modes:
//
//   - by default it runs as root inside the VM lab, one boot: every variant
//     (the kernel's default scheduler, swiftlane without and with critical
//     strategies, and the peer sched_ext schedulers) in turn, in an order
//     rotated by -boot, each through the same workloads (workloads.go), and
//     writes that boot's JSON;
//   - -merge BOOT.json... computes per-variant medians and spread over the
//     boots into bench/results/sched.json (merge.go);
//   - -torture-logs DIR tallies the `make bench-torture` runs into
//     bench/results/torture.json (torture.go);
//   - -demo N (in the VM) and -demo-host (on the host, around the VM) are
//     `make demo`'s rounds and their verdicts (demo.go).
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/swiftlane/swiftlane/bench/internal/benchlab"
	"github.com/swiftlane/swiftlane/bench/sched/floor"
)

var (
	swiftlane = flag.String("swiftlane", "build/swiftlane", "swiftlane binary")
	trialBin  = flag.String("trial", "", "the optional variant `trial`: this swiftlane binary (a build under trial), no strategies, -trial-config added to its config")
	trialCfg  = flag.String("trial-config", "", "YAML added to the trial variant's config (e.g. \"queued_wakeup: true\")")
	trial2Bin = flag.String("trial2", "", "the optional variant `trial2`: a second build under trial, as -trial")
	trial2Cfg = flag.String("trial2-config", "", "YAML added to the trial2 variant's config")
	peersDir  = flag.String("peers", ".cache/peers/bin", "directory with the scx_* peers (built by lab/peers.sh)")
	peerErrs  = flag.String("peer-errors", ".cache/peers/errors.json", "why a peer could not be built (written by lab/peers.sh)")
	layered   = flag.String("layered-config", "", "scx_layered layer config (default: bench/sched/layered.json, built in)")
	layeredSt = flag.String("layered-stats", "/var/run/scx/root/stats", "scx_layered's stats socket: read through the probe's loaded phase to check the probe's tasks are in the critical layer")
	out       = flag.String("out", "", "JSON output (default: bench/results/sched-boots/boot-N.json, sched-NAME-boots/ with -profile NAME; with -merge bench/results/sched.json or sched-NAME.json after the boots' profile; with -torture-logs bench/results/torture.json)")
	boot      = flag.Int("boot", 1, "boot number: the variant order is rotated by boot-1")
	only      = flag.String("variants", "", "comma-separated subset of variants (default: all)")
	onlyWork  = flag.String("workloads", "", "comma-separated subset of workloads (default: all): "+strings.Join(workloadNames(), ","))
	profileFl = flag.String("profile", profiles[0].name, "saturation profile beside the hogs: "+strings.Join(profileNames(), ", ")+" (results in bench/results/sched.json, sched-NAME.json for the others; see profile.go)")
	bgScale   = flag.Int("background-scale", 1, "the heavy profile's background workers per CPU times this (for calibrating it; recorded in the settings)")
	quick     = flag.Bool("quick", false, "smoke run: 3 s phases and cyclictest, 20 loops, 2000 pipe round trips, one run each (flags given explicitly still win)")

	phase      = flag.Duration("phase", 15*time.Second, "length of a timed phase: probe budget, hogs, wrk")
	samples    = flag.Int("samples", 100000, "probe round trips per phase at most (by default -phase bounds it)")
	interval   = flag.Duration("interval", time.Millisecond, "pause between probe round trips")
	cycDur     = flag.Duration("cyclictest", 20*time.Second, "cyclictest duration")
	runs       = flag.Int("runs", 9, "runs of messaging, pipe and hackbench per variant, the median counts (a hackbench run lasts ~0.25 s: with 3, two variants with the same policy for it came out 13 % apart)")
	groups     = flag.Int("groups", 2, "messaging and hackbench: groups of 20 senders + 20 receivers")
	loops      = flag.Int("loops", 100, "messaging and hackbench: messages each sender sends each receiver")
	pipeLoops  = flag.Int("pipe-loops", 20000, "perf bench sched pipe: round trips")
	hogMethod  = flag.String("hog-method", "int64", "stress-ng --cpu-method of the hogs (one fixed method: 'all' cycles through methods of very different cost per bogo op)")
	wrkConns   = flag.Int("wrk-connections", 8, "wrk: open connections")
	nginxRate  = flag.Int("nginx-rate", 400, "requests/s wrk offers nginx in the paced phases that give the p99 (well under what nginx serves idle)")
	wrkRT      = flag.Bool("wrk-rt", true, "run wrk SCHED_FIFO, above every variant: it stands for a remote client, so only nginx's own scheduling is measured")
	merge      = flag.Bool("merge", false, "merge the boot reports given as arguments into -out")
	tortureIn  = flag.String("torture", "bench/results/torture.json", "with -merge: the torture tally to copy into the report")
	tortureDir = flag.String("torture-logs", "", "tally the bench-torture logs in this directory into -out")
	demoRounds = flag.Int("demo", 0, "`make demo` in the VM: this many rounds of the probe (idle, saturated) under -variants, the order rotated each round, into -out (default build/demo-rounds.json)")
	demoHost   = flag.Bool("demo-host", false, "`make demo` on the host: run the command after the flags (the VM running lab/demo.sh) while sampling the host's load, then print -in's rounds with medians, ranges and verdicts and write them to -out (default bench/results/demo.json)")
	demoIn     = flag.String("in", "build/demo-rounds.json", "with -demo-host: the rounds the guest's -demo wrote")
	floorRun   = flag.Bool("floor-scheduler", false, "attach the sched_ext floor (a scheduler with no callbacks, package floor) until SIGINT or SIGTERM: the optional variant sched_ext-floor runs this, lab scripts too")
)

// progress receives which workload each variant is on (the demo's rounds
// print their own).
var progress io.Writer = os.Stderr

// variants in their canonical order; a boot rotates it.
var variants = []variant{
	{"eevdf", "kernel default scheduler (EEVDF), no sched_ext scheduler", nil},
	{"swiftlane", "swiftlane, no strategies", startSwiftlane(noStrategies)},
	{"swiftlane-critical", "swiftlane, the probe's and nginx's processes class critical (command_regex)", startSwiftlane(criticalStrategies)},
	{"scx_bpfland", "scx_bpfland (crates.io), defaults", startPeer("scx_bpfland")},
	{"scx_rustland", "scx_rustland (crates.io), defaults", startPeer("scx_rustland")},
	{"scx_layered", "scx_layered (crates.io), bench/sched/layered.json: the probe's and nginx's processes in a preempting layer", startLayered},
	{"scx_lavd", "scx_lavd (crates.io), defaults: finds latency-critical tasks by itself", startPeer("scx_lavd")},
}

// optional variants run only when -variants names them: diagnostics beside
// the suite, not columns of its table.
var optional = []variant{
	{"swiftlane-builtin-idle", "swiftlane, no strategies, builtin_idle: wakeups placed by the kernel's idle-CPU selection", startSwiftlane("builtin_idle: true\n" + noStrategies)},
	{"swiftlane-queued-wakeup", "swiftlane, no strategies, queued_wakeup: wakeups handed to the wakee's CPU", startSwiftlane("queued_wakeup: true\n" + noStrategies)},
	{"swiftlane-queued-wakeup-builtin-idle", "swiftlane, no strategies, queued_wakeup and builtin_idle", startSwiftlane("queued_wakeup: true\nbuiltin_idle: true\n" + noStrategies)},
	{"trial", "-trial's swiftlane binary, no strategies, -trial-config added", startTrial("trial", trialBin, trialCfg)},
	{"trial2", "-trial2's swiftlane binary, no strategies, -trial2-config added", startTrial("trial2", trial2Bin, trial2Cfg)},
	{"sched_ext-floor", "a sched_ext scheduler with no callbacks: the kernel's idle-CPU selection and one global FIFO, no BPF run on any event (what sched_ext itself costs)", startFloor},
}

type variant struct {
	name, describe string
	// start attaches the variant's scheduler; nil runs the kernel's own.
	start func() (*scheduler, error)
}

// BootReport is one boot's results, every variant in the order it ran.
type BootReport struct {
	Boot     int                    `json:"boot"`
	Kernel   string                 `json:"kernel"`
	CPUs     int                    `json:"cpus"`
	Date     string                 `json:"date"`
	Note     string                 `json:"note"`
	Settings Settings               `json:"settings"`
	Order    []string               `json:"order"`
	Variants map[string]*VariantRun `json:"variants"`
}

// Settings say how a boot was run; the merge refuses to mix different ones.
type Settings struct {
	Quick bool `json:"quick,omitempty"`
	// Profile is the saturation profile (omitted for the default, as in the
	// reports from before profiles); Background its stress-ng beside the hogs.
	Profile     string  `json:"profile,omitempty"`
	Background  string  `json:"background,omitempty"`
	Workloads   string  `json:"workloads"`
	PhaseS      float64 `json:"phase_s"`
	Samples     int     `json:"probe_samples"`
	IntervalMs  float64 `json:"probe_interval_ms"`
	CyclictestS float64 `json:"cyclictest_s"`
	Runs        int     `json:"runs"`
	Groups      int     `json:"groups"`
	Loops       int     `json:"loops"`
	PipeLoops   int     `json:"pipe_loops"`
	HogMethod   string  `json:"hog_method"`
	Hogs        int     `json:"hogs"`
	WrkConns    int     `json:"wrk_connections"`
	WrkRT       bool    `json:"wrk_rt"`
	NginxRate   int     `json:"nginx_rate"`
}

// VariantRun is one variant's results in one boot.
type VariantRun struct {
	Description string `json:"description"`
	// Ops is the sched_ext scheduler the kernel reported attached.
	Ops string `json:"ops,omitempty"`
	// Metrics are the numbers the merge takes the median of (keys in
	// merge.go's metrics table), only from workloads that ran to the end
	// with the variant's scheduler still attached.
	Metrics     map[string]float64 `json:"metrics"`
	ProbeIdle   *ProbeResult       `json:"probe_idle,omitempty"`
	ProbeLoaded *ProbeResult       `json:"probe_loaded,omitempty"`
	// Errors by workload; Error when the variant could not run (on) at all.
	Errors map[string]string `json:"errors,omitempty"`
	Error  string            `json:"error,omitempty"`
	// Layered is scx_layered's own account of the layer the probe's tasks
	// ran in during the loaded phase (its variant only); a probe outside
	// the critical layer is also an error under "layered".
	Layered *LayeredCheck `json:"layered,omitempty"`
	// watchLoaded, if set, watches the scheduler through the probe's loaded
	// phase; the func it returns ends the watch and records what it saw.
	watchLoaded func(r *VariantRun) (end func())
	// SchedCounters are swiftlane's own counters over all workloads.
	SchedCounters map[string]float64 `json:"sched_counters,omitempty"`
	Seconds       float64            `json:"seconds"`
}

func main() {
	flag.Parse()
	var err error
	if *bgScale < 1 {
		fmt.Fprintf(os.Stderr, "bench: -background-scale %d: must be 1 or more\n", *bgScale)
		os.Exit(2)
	}
	if loadProfile, err = selectProfile(*profileFl); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	switch {
	case *floorRun:
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err = floor.Run(ctx)
		stop()
	case *merge:
		err = mergeBoots(flag.Args(), *tortureIn, *out)
	case *demoHost:
		err = runDemoHost(flag.Args(), *demoIn, cmp.Or(*out, "bench/results/demo.json"))
	case *demoRounds > 0:
		err = runDemo(*demoRounds, cmp.Or(*out, "build/demo-rounds.json"))
	case *tortureDir != "":
		err = tallyTorture(*tortureDir, cmp.Or(*out, "bench/results/torture.json"))
	default:
		applyQuick()
		err = runBoot(cmp.Or(*out, fmt.Sprintf("bench/results/%s-boots/boot-%d.json", resultName(loadProfile.name), *boot)))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// applyQuick shortens everything the command line did not set itself.
func applyQuick() {
	if !*quick {
		return
	}
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for name, v := range map[string]string{
		"phase": "3s", "cyclictest": "3s", "runs": "1",
		"loops": "20", "pipe-loops": "2000",
	} {
		if !set[name] {
			flag.Set(name, v)
		}
	}
}

func runBoot(out string) error {
	order, err := bootOrder(*boot, *only)
	if err != nil {
		return err
	}
	work, err := selectWorkloads(*onlyWork)
	if err != nil {
		return err
	}
	rel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	rep := BootReport{
		Boot: *boot, Kernel: strings.TrimSpace(string(rel)), CPUs: runtime.NumCPU(),
		Date:     time.Now().UTC().Format(time.RFC3339),
		Note:     "QEMU TCG guest: absolute numbers are inflated 20-50x and noisy, and anything else running on the host skews them; compare variants within a run.",
		Settings: settings(work),
		Variants: map[string]*VariantRun{},
	}
	for _, v := range order {
		rep.Order = append(rep.Order, v.name)
		fmt.Fprintf(os.Stderr, "bench: boot %d: %s ...\n", *boot, v.name)
		r := runVariant(v, work)
		if r.Error != "" {
			fmt.Fprintf(os.Stderr, "bench: %s: %s\n", v.name, r.Error)
		}
		rep.Variants[v.name] = r
	}
	printBoot(os.Stdout, rep)
	return benchlab.WriteJSON(out, rep)
}

// selectable is what a -variants list may name: the optional variants too.
func selectable(list string) []variant {
	if list == "" {
		return variants
	}
	return slices.Concat(variants, optional)
}

// bootOrder is the order boot runs the variants list names in: the
// variants picked first, then rotated, so a subset rotates through every
// position too (rotating all of them first left three picked ones in the
// same order in boots 3 and 4).
func bootOrder(boot int, list string) ([]variant, error) {
	vs, err := pick(list)
	return rotate(vs, boot-1), err
}

// rotate returns vs starting at index n (mod len): boot b runs the variants
// in the order rotated by b-1, so none is always first or last after boot.
func rotate[T any](vs []T, n int) []T {
	if len(vs) == 0 {
		return nil
	}
	n = ((n % len(vs)) + len(vs)) % len(vs)
	return append(slices.Clone(vs[n:]), vs[:n]...)
}

func settings(work []workload) Settings {
	var names []string
	for _, w := range work {
		names = append(names, w.name)
	}
	prof := loadProfile.name
	if prof == profiles[0].name {
		prof = ""
	}
	return Settings{
		Profile: prof, Background: loadProfile.backgroundArgs(runtime.NumCPU()),
		Quick: *quick, Workloads: strings.Join(names, ","), PhaseS: phase.Seconds(), Samples: *samples,
		IntervalMs: float64(*interval) / float64(time.Millisecond), CyclictestS: cycDur.Seconds(), Runs: *runs,
		Groups: *groups, Loops: *loops, PipeLoops: *pipeLoops, HogMethod: *hogMethod, Hogs: nHogs(),
		WrkConns: *wrkConns, WrkRT: *wrkRT, NginxRate: *nginxRate,
	}
}

// runVariant attaches the variant's scheduler, runs every workload under it
// and detaches it. A workload's numbers count only if the scheduler is still
// attached after it: one ejected midway measured the kernel's default.
func runVariant(v variant, work []workload) *VariantRun {
	r := &VariantRun{Description: v.describe, Metrics: map[string]float64{}, Errors: map[string]string{}}
	began := time.Now()
	defer func() { r.Seconds = time.Since(began).Round(time.Second).Seconds() }()
	// "" is a kernel without sched_ext: only eevdf can run there.
	if state, ops := benchlab.SchedState(); state != "disabled" && state != "" {
		r.Error = fmt.Sprintf("sched_ext is %q (%s) before the variant started: a previous scheduler did not detach", state, ops)
		return r
	}
	var s *scheduler
	if v.start != nil {
		var err error
		if s, err = v.start(); err != nil {
			r.Error = err.Error()
			return r
		}
		defer s.Stop()
		r.Ops = s.ops
		r.watchLoaded = s.watchLoaded
	}
	for _, w := range work {
		fmt.Fprintf(progress, "bench:   %s: %s\n", v.name, w.name)
		m, err := w.run(r)
		if err != nil {
			r.Errors[w.name] = err.Error()
			fmt.Fprintf(os.Stderr, "bench:   %s: %s: %v\n", v.name, w.name, err)
		}
		if s != nil {
			if err := s.attached(); err != nil {
				r.Error = fmt.Sprintf("during %s: %v", w.name, err)
				return r
			}
		}
		for k, x := range m {
			r.Metrics[k] = x
		}
	}
	if s != nil {
		if s.metrics {
			r.SchedCounters = scrapeCounters()
		}
		if err := s.Stop(); err != nil {
			r.Error = fmt.Sprintf("scheduler stopped badly: %v", err)
		}
	}
	return r
}
