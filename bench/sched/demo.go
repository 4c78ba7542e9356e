// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"cmp"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/swiftlane/swiftlane/bench/internal/benchlab"
)

// `make demo` runs this command twice. In the guest, -demo N runs N rounds
// of the probe (idle, then beside CPU hogs) under each variant, the order
// rotated every round, and writes them to -out. On the host, -demo-host
// runs the VM (the command after the flags) while it samples the host's
// own load, then prints the rounds' medians and ranges, the host's load per
// round and a verdict per comparison. A single run in a fixed order on a
// busy host once put critical behind EEVDF; rounds give a spread, and a
// ratio is stated only when it is larger than that spread.

// DemoReport is the demo's rounds (from the guest) and the host's load
// while they ran (added on the host).
type DemoReport struct {
	Kernel     string      `json:"kernel"`
	CPUs       int         `json:"cpus"`
	Date       string      `json:"date"`
	PhaseS     float64     `json:"phase_s"`
	IntervalMs float64     `json:"probe_interval_ms"`
	Variants   []string    `json:"variants"`
	Rounds     []DemoRound `json:"rounds"`
	// Host is the host's load from the first round's start to the last
	// one's end; Seconds the whole `make demo` run (boot included).
	Host     *HostLoad        `json:"host,omitempty"`
	Seconds  float64          `json:"seconds,omitempty"`
	Verdicts []DemoComparison `json:"verdicts,omitempty"`
}

// DemoRound is every variant once. Start and End are guest time: the TCG
// guest's clock follows the host's (lab/vm.sh), to within its boot-time
// second, so the host matches them to its samples.
type DemoRound struct {
	Round int                 `json:"round"`
	Order []string            `json:"order"`
	Start time.Time           `json:"start"`
	End   time.Time           `json:"end"`
	Runs  map[string]*DemoRun `json:"runs"`
	// GuestStealPct is the guest's own steal time; a TCG guest has no
	// steal clock, so it stays 0 there and the host's figures say it.
	GuestStealPct float64   `json:"guest_steal_pct"`
	Host          *HostLoad `json:"host,omitempty"`
}

// DemoRun is one variant's probe phases in one round.
type DemoRun struct {
	Idle   *ProbeResult `json:"idle,omitempty"`
	Loaded *ProbeResult `json:"loaded,omitempty"`
	Error  string       `json:"error,omitempty"`
	// Seconds from attach to detach: what a round costs under TCG.
	Seconds float64 `json:"seconds"`
}

// DemoComparison is one verdict line.
type DemoComparison struct {
	Phase   string `json:"phase"`
	Cand    string `json:"cand"`
	Base    string `json:"base"`
	Verdict string `json:"verdict"`
	benchlab.Comparison
}

// demoComparisons: the headline (critical under saturation) and the idle
// cost, for swiftlane with and without a strategy, against EEVDF.
var demoComparisons = []struct{ phase, cand, base string }{
	{"saturated", "swiftlane-critical", "eevdf"},
	{"saturated", "swiftlane", "eevdf"},
	{"idle", "swiftlane", "eevdf"},
	{"idle", "swiftlane-critical", "eevdf"},
}

// runDemo is the guest side: rounds of the probe workload, without the
// hogs' metrics (waiting for them would add seconds to every run).
func runDemo(rounds int, out string) error {
	all, err := pick(*only)
	if err != nil {
		return err
	}
	rel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	rep := DemoReport{
		Kernel: strings.TrimSpace(string(rel)), CPUs: runtime.NumCPU(), Date: time.Now().UTC().Format(time.RFC3339),
		PhaseS: phase.Seconds(), IntervalMs: float64(*interval) / float64(time.Millisecond),
	}
	for _, v := range all {
		rep.Variants = append(rep.Variants, v.name)
	}
	work := []workload{{"probe", func(r *VariantRun) (map[string]float64, error) { return probePhases(r, false) }}}
	progress = io.Discard
	sharedEcho = true
	stopEcho, err := startEcho()
	if err != nil {
		return err
	}
	defer stopEcho()
	began := time.Now()
	for i := range rounds {
		rd := DemoRound{Round: i + 1, Start: time.Now(), Runs: map[string]*DemoRun{}}
		cpu0, _ := readCPUTimes("/proc/stat")
		for _, v := range rotate(all, i) {
			rd.Order = append(rd.Order, v.name)
			r := runVariant(v, work)
			run := &DemoRun{Idle: r.ProbeIdle, Loaded: r.ProbeLoaded, Error: cmp.Or(r.Error, r.Errors["probe"]), Seconds: r.Seconds}
			if run.Loaded != nil {
				run.Loaded.RTTUs, run.Loaded.ClientCPU, run.Loaded.ServerCPU = nil, nil, nil
			}
			rd.Runs[v.name] = run
		}
		rd.End = time.Now()
		if cpu1, err := readCPUTimes("/proc/stat"); err == nil {
			rd.GuestStealPct = cpu1.sub(cpu0).stealPct()
		}
		rep.Rounds = append(rep.Rounds, rd)
		fmt.Fprintf(os.Stderr, "demo: round %d of %d done (%s), %.0f s so far\n", i+1, rounds,
			strings.Join(rd.Order, ", "), time.Since(began).Seconds())
	}
	return benchlab.WriteJSON(out, rep)
}

// pick keeps the variants list names (all canonical ones if empty), in
// their canonical order.
func pick(list string) ([]variant, error) {
	vs := selectable(list)
	if list == "" {
		return vs, nil
	}
	want := strings.Split(list, ",")
	for _, w := range want {
		if !slices.ContainsFunc(vs, func(v variant) bool { return v.name == w }) {
			return nil, fmt.Errorf("unknown variant %q", w)
		}
	}
	return slices.DeleteFunc(slices.Clone(vs), func(v variant) bool { return !slices.Contains(want, v.name) }), nil
}

// runDemoHost is the host side: it runs args (the VM) while sampling the
// host, then reads the guest's rounds from in, adds the host's load, prints
// the summary and writes it to out.
func runDemoHost(args []string, in, out string) error {
	if len(args) == 0 {
		return fmt.Errorf("-demo-host needs the command that runs the demo's VM after the flags")
	}
	// A report left by an earlier run must not pass for this one's.
	if err := os.Remove(in); err != nil && !os.IsNotExist(err) {
		return err
	}
	began := time.Now()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	samples := make(chan []hostSample)
	done := make(chan struct{})
	go func() { samples <- sampleHost(cmd.Process.Pid, 500*time.Millisecond, done) }()
	runErr := cmd.Wait()
	close(done)
	host := <-samples
	if runErr != nil {
		return fmt.Errorf("%s: %w", strings.Join(args, " "), runErr)
	}
	reps, err := benchlab.ReadJSONFiles[DemoReport]([]string{in})
	if err != nil {
		return err
	}
	rep := reps[0]
	rep.Seconds = time.Since(began).Round(time.Second).Seconds()
	rep.addHost(host)
	rep.analyse()
	printDemo(os.Stdout, &rep)
	return benchlab.WriteJSON(out, rep)
}

// addHost adds the host's load, overall and per round.
func (rep *DemoReport) addHost(host []hostSample) {
	if n := len(rep.Rounds); n > 0 {
		for i := range rep.Rounds {
			rep.Rounds[i].Host = hostLoad(host, rep.Rounds[i].Start, rep.Rounds[i].End)
		}
		rep.Host = hostLoad(host, rep.Rounds[0].Start, rep.Rounds[n-1].End)
	}
}

// analyse compares the variants over the rounds the host left alone.
func (rep *DemoReport) analyse() {
	rep.Verdicts = nil
	quiet := rep.quietRounds()
	for _, c := range demoComparisons {
		res := benchlab.Compare(pickRounds(rep.series(c.base, c.phase), quiet), pickRounds(rep.series(c.cand, c.phase), quiet))
		rep.Verdicts = append(rep.Verdicts, DemoComparison{Phase: c.phase, Cand: c.cand, Base: c.base,
			Verdict: res.Verdict(c.cand, c.base, rep.noise(quiet)), Comparison: res})
	}
}

// disturbed says whether the host's other work took CPU time the guest's
// vCPUs needed in round rd: more than half a CPU beyond the CPUs the guest
// leaves free. The vCPUs then stall at the host's will, for every variant
// but not at the same moments, and what the rounds measure is the host's
// scheduler: on a host with a build running, a single run once put
// critical 1.6x behind EEVDF. Unmeasured rounds count as quiet.
func (rep *DemoReport) disturbed(rd DemoRound) bool {
	h := rd.Host
	return h != nil && h.OtherCPUs > float64(max(0, h.CPUs-rep.CPUs))+0.5
}

// quietRounds are the indexes of the rounds the verdicts rest on.
func (rep *DemoReport) quietRounds() []int {
	var q []int
	for i, rd := range rep.Rounds {
		if !rep.disturbed(rd) {
			q = append(q, i)
		}
	}
	return q
}

func pickRounds(xs []float64, idx []int) []float64 {
	var out []float64
	for _, i := range idx {
		out = append(out, xs[i])
	}
	return out
}

// series is a variant's probe average per round (0 where it did not run).
func (rep *DemoReport) series(variant, phase string) []float64 {
	xs := make([]float64, len(rep.Rounds))
	for i, rd := range rep.Rounds {
		if r := rd.Runs[variant]; r != nil {
			p := r.Idle
			if phase == "saturated" {
				p = r.Loaded
			}
			if p != nil {
				xs[i] = p.AvgUs
			}
		}
	}
	return xs
}

// noise says how busy the host was, for a verdict the rounds could not
// support, and which rounds the host's load set aside.
func (rep *DemoReport) noise(quiet []int) string {
	h := rep.Host
	if h == nil {
		return "the host's load was not measured"
	}
	s := fmt.Sprintf("the host ran other work on %.1f of its %d CPUs on average (%.1f in the busiest round), loadavg up to %.1f, QEMU got %.1f CPUs for the guest's %d",
		h.OtherCPUs, h.CPUs, rep.maxOther(), h.Load1Max, h.DemoCPUs, rep.CPUs)
	if h.StealPct >= 1 {
		s += fmt.Sprintf(", and the host's hypervisor took %.0f %% of its CPU time", h.StealPct)
	}
	if n := len(rep.Rounds) - len(quiet); n > 0 {
		s += fmt.Sprintf("; %d of %d rounds set aside, the host's other work taking CPU from the guest's (over %.1f CPUs)",
			n, len(rep.Rounds), float64(max(0, h.CPUs-rep.CPUs))+0.5)
	}
	return s
}

func (rep *DemoReport) maxOther() float64 {
	var m float64
	for _, rd := range rep.Rounds {
		if rd.Host != nil {
			m = max(m, rd.Host.OtherCPUs)
		}
	}
	return m
}

// printDemo prints each variant's probe average per round with the median
// and range, the host's load per round, and the verdicts.
func printDemo(w io.Writer, rep *DemoReport) {
	fmt.Fprintf(w, "\n== the UDP probe's round trip (average µs) in %d rounds, %.0f s a phase, variant order rotated each round; kernel %s, %d CPUs\n",
		len(rep.Rounds), rep.PhaseS, rep.Kernel, rep.CPUs)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "\t")
	for _, rd := range rep.Rounds {
		fmt.Fprintf(tw, "round %d\t", rd.Round)
	}
	fmt.Fprintf(tw, "median [min–max]\t\n")
	for _, ph := range []string{"idle", "saturated"} {
		for _, v := range rep.Variants {
			xs := rep.series(v, ph)
			fmt.Fprintf(tw, "%s %s\t", v, ph)
			var got []float64
			for _, x := range xs {
				if x > 0 {
					got = append(got, x)
					fmt.Fprintf(tw, "%.0f\t", x)
				} else {
					fmt.Fprintf(tw, "-\t")
				}
			}
			if len(got) > 0 {
				fmt.Fprintf(tw, "%s\t\n", benchlab.NewRange(got))
			} else {
				fmt.Fprintf(tw, "-\t\n")
			}
		}
	}
	hostRow := func(name string, f func(*HostLoad) string) {
		fmt.Fprintf(tw, "%s\t", name)
		for _, rd := range rep.Rounds {
			if rd.Host == nil {
				fmt.Fprintf(tw, "?\t")
			} else {
				fmt.Fprintf(tw, "%s\t", f(rd.Host))
			}
		}
		if rep.Host == nil {
			fmt.Fprintf(tw, "?\t\n")
		} else {
			fmt.Fprintf(tw, "%s\t\n", f(rep.Host))
		}
	}
	hostRow("host: other work, CPUs", func(h *HostLoad) string { return fmt.Sprintf("%.1f", h.OtherCPUs) })
	hostRow("host: QEMU, CPUs", func(h *HostLoad) string { return fmt.Sprintf("%.1f", h.DemoCPUs) })
	hostRow("host: steal %", func(h *HostLoad) string { return fmt.Sprintf("%.0f", h.StealPct) })
	hostRow("host: loadavg max", func(h *HostLoad) string { return fmt.Sprintf("%.1f", h.Load1Max) })
	fmt.Fprintf(tw, "guest: steal %%\t")
	for _, rd := range rep.Rounds {
		fmt.Fprintf(tw, "%.0f\t", rd.GuestStealPct)
	}
	fmt.Fprintf(tw, "\t\n")
	tw.Flush()
	for _, rd := range rep.Rounds {
		for _, v := range rd.Order {
			if r := rd.Runs[v]; r != nil && r.Error != "" {
				fmt.Fprintf(w, "round %d: %s: %s\n", rd.Round, v, r.Error)
			}
		}
	}
	if h := rep.Host; h != nil {
		fmt.Fprintf(w, "host (%d CPUs) over the rounds: other work %.1f CPUs, QEMU %.1f CPUs, steal %.0f %%, loadavg %.1f–%.1f; a TCG guest has no steal clock, so its own steal stays 0\n",
			h.CPUs, h.OtherCPUs, h.DemoCPUs, h.StealPct, h.Load1Min, h.Load1Max)
	}
	fmt.Fprintf(w, "\n== verdict (a ratio only when every round of one variant is below every round of the other, %d rounds at least):\n", benchlab.MinRounds)
	for _, c := range rep.Verdicts {
		fmt.Fprintf(w, "  %s: %s\n", c.Phase, c.Verdict)
	}
	if rep.Seconds > 0 {
		fmt.Fprintf(w, "(make demo took %.0f s)\n", rep.Seconds)
	}
}

// cpuTimes are /proc/stat's aggregate "cpu" line, in clock ticks.
type cpuTimes struct{ total, idle, steal float64 }

func readCPUTimes(path string) (cpuTimes, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return cpuTimes{}, err
	}
	return parseCPUTimes(b)
}

// parseCPUTimes reads "cpu user nice system idle iowait irq softirq steal
// ..."; guest time is already inside user and nice.
func parseCPUTimes(b []byte) (cpuTimes, error) {
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 9 || f[0] != "cpu" {
		return cpuTimes{}, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var v [8]float64
	for i := range v {
		x, err := strconv.ParseFloat(f[i+1], 64)
		if err != nil {
			return cpuTimes{}, fmt.Errorf("/proc/stat: %w", err)
		}
		v[i] = x
	}
	var t cpuTimes
	for _, x := range v {
		t.total += x
	}
	t.idle, t.steal = v[3]+v[4], v[7]
	return t, nil
}

func (a cpuTimes) sub(b cpuTimes) cpuTimes {
	return cpuTimes{a.total - b.total, a.idle - b.idle, a.steal - b.steal}
}

func (a cpuTimes) stealPct() float64 {
	if a.total <= 0 {
		return 0
	}
	return 100 * a.steal / a.total
}

// hostSample is the host's CPU times, the CPU time the demo's own process
// tree (lab/vm.sh, virtme-ng, QEMU) used so far, and the 1-minute loadavg.
type hostSample struct {
	at    time.Time
	cpu   cpuTimes
	own   float64 // clock ticks
	load1 float64
}

// HostLoad is the host over a time window.
type HostLoad struct {
	CPUs int `json:"cpus"`
	// OtherCPUs: CPUs busy with anything but the demo (other builds,
	// other VMs): what takes the vCPUs' host threads away at random.
	OtherCPUs float64 `json:"other_cpus"`
	// DemoCPUs: what QEMU (and the lab's scripts) got; the guest's vCPUs
	// want one CPU each while the hogs run.
	DemoCPUs float64 `json:"demo_cpus"`
	// StealPct: the host's own hypervisor's steal, if the host is a VM.
	StealPct float64 `json:"steal_pct"`
	Load1Min float64 `json:"loadavg1_min"`
	Load1Max float64 `json:"loadavg1_max"`
}

// userHZ is the unit of /proc's CPU times (USER_HZ, 100 on every Linux ABI).
const userHZ = 100

// sampleHost samples the host every period until done is closed, and once
// more then; root is the demo's process, whose tree counts as its own.
func sampleHost(root int, period time.Duration, done <-chan struct{}) []hostSample {
	var out []hostSample
	take := func() {
		s := hostSample{at: time.Now(), own: treeTicks("/proc", root)}
		s.cpu, _ = readCPUTimes("/proc/stat")
		if b, err := os.ReadFile("/proc/loadavg"); err == nil {
			if f := strings.Fields(string(b)); len(f) > 0 {
				s.load1, _ = strconv.ParseFloat(f[0], 64)
			}
		}
		out = append(out, s)
	}
	take()
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			take()
		case <-done:
			return out
		}
	}
}

// treeTicks is the CPU time (utime+stime, plus the reaped children's
// cutime+cstime, so a process's exit does not drop its share) of root and
// every live descendant, from procfs under proc.
func treeTicks(proc string, root int) float64 {
	ents, _ := os.ReadDir(proc)
	parent := map[int]int{}
	ticks := map[int]float64{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(proc, e.Name(), "stat"))
		if err != nil {
			continue // exited meanwhile
		}
		// comm (field 2) may hold spaces and parentheses: fields start
		// after its last ')'. Then state, ppid, ...; utime is field 14.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 15 {
			continue
		}
		parent[pid], _ = strconv.Atoi(f[1])
		for _, k := range f[11:15] { // utime stime cutime cstime
			x, _ := strconv.ParseFloat(k, 64)
			ticks[pid] += x
		}
	}
	var sum float64
	for pid, t := range ticks {
		for p, hops := pid, 0; p > 1 && hops < 64; p, hops = parent[p], hops+1 {
			if p == root {
				sum += t
				break
			}
		}
	}
	return sum
}

// hostLoad is the host between from and to: from the last sample at or
// before from to the first at or after to, so the window is covered.
func hostLoad(ss []hostSample, from, to time.Time) *HostLoad {
	if len(ss) < 2 {
		return nil
	}
	i := 0
	for i+1 < len(ss) && !ss[i+1].at.After(from) {
		i++
	}
	j := len(ss) - 1
	for j-1 > i && !ss[j-1].at.Before(to) {
		j--
	}
	a, b := ss[i], ss[j]
	secs := b.at.Sub(a.at).Seconds()
	d := b.cpu.sub(a.cpu)
	if secs <= 0 || d.total <= 0 {
		return nil
	}
	busy := (d.total - d.idle - d.steal) / userHZ / secs
	own := (b.own - a.own) / userHZ / secs
	h := &HostLoad{CPUs: runtime.NumCPU(), OtherCPUs: max(0, busy-own), DemoCPUs: own, StealPct: d.stealPct(),
		Load1Min: a.load1, Load1Max: a.load1}
	for _, s := range ss[i : j+1] {
		h.Load1Min, h.Load1Max = min(h.Load1Min, s.load1), max(h.Load1Max, s.load1)
	}
	return h
}
