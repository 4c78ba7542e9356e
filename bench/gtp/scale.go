// SPDX-License-Identifier: Apache-2.0

package main

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cilium/ebpf"

	"github.com/swiftlane/swiftlane/bench/internal/benchlab"
	"github.com/swiftlane/swiftlane/internal/gtplab"
)

// The tracer's cost at scale (issue 38): N UEs, each at a fixed packet
// rate, with and without the GTP-U tracer, in rounds with the order
// rotated. The tracer runs alone (`swiftlane trace gtp`, EEVDF schedules):
// its cost is then the only difference. Automatic mode adds the operator,
// whose work is per event (at most one per process and function per
// second), not per packet.

// tracerPrograms are the tracer's BPF programs (internal/trace/bpf): one
// gtp_fentry per traced function and the sender marks on every IP send.
var tracerPrograms = []string{"gtp_fentry", "mark_ip4", "mark_ip6"}

// ScaleRun is one measurement: one UE count, one variant, one round.
type ScaleRun struct {
	UEs     int     `json:"ues"`
	Variant string  `json:"variant"`        // "no-tracer" or "tracer"
	Boot    int     `json:"boot,omitempty"` // -boot; runs pair up by boot and round
	Round   int     `json:"round"`
	Result  *Result `json:"rtt"`
	// Packets through the UPF's device (received + sent) during the UE's
	// pings, and their rate.
	Packets          uint64  `json:"packets"`
	PacketsPerSecond float64 `json:"packets_per_second"`
	// The tracer's programs, from the kernel's BPF statistics
	// (kernel.bpf_stats_enabled): total run time, runs, and run time per
	// packet through the UPF (every program's runs, marks included).
	TracerNs          uint64  `json:"tracer_ns,omitempty"`
	TracerRuns        uint64  `json:"tracer_runs,omitempty"`
	TracerNsPerPacket float64 `json:"tracer_ns_per_packet,omitempty"`
	// The guest's CPU time spent outside its idle loop during the pings
	// (/proc/stat, all CPUs), in percent: how full the machine was.
	CPUBusyPct float64 `json:"cpu_busy_pct"`
	Error      string  `json:"error,omitempty"`
}

// ScaleSummary is one UE count's comparison: each figure's median and
// spread over the rounds (Stat.Boots holds each value's boot, or its round
// in a report of one boot).
type ScaleSummary struct {
	UEs               int            `json:"ues"`
	PacketsPerSecond  *benchlab.Stat `json:"packets_per_second"`
	TracerNsPerPacket *benchlab.Stat `json:"tracer_ns_per_packet"`
	TracerCPUPct      *benchlab.Stat `json:"tracer_cpu_pct"` // of one CPU, at that packet rate
	NoTracerAvgMs     *benchlab.Stat `json:"no_tracer_avg_ms"`
	TracerAvgMs       *benchlab.Stat `json:"tracer_avg_ms"`
	NoTracerP99Ms     *benchlab.Stat `json:"no_tracer_p99_ms"`
	TracerP99Ms       *benchlab.Stat `json:"tracer_p99_ms"`
	AvgOverheadPct    *benchlab.Stat `json:"avg_overhead_pct"` // tracer's average RTT against the same round's no-tracer one
	// The median overhead's 95 % distribution-free confidence interval over
	// the rounds' paired differences (null with fewer than 6 pairs): what
	// the goal is judged on when there are enough rounds.
	AvgOverheadCI *benchlab.CI `json:"avg_overhead_ci"`
	// Whether the guest was saturated without the tracer (see saturation):
	// an overhead measured there is mostly the queueing that any added CPU
	// work causes in a full machine, not the tracer's own cost.
	NoTracerCPUBusyPct *benchlab.Stat `json:"no_tracer_cpu_busy_pct"`
	TracerCPUBusyPct   *benchlab.Stat `json:"tracer_cpu_busy_pct"`
	// The no-tracer average RTT's median over the 1-UE one's (0: no 1-UE
	// runs in this report).
	NoTracerAvgVs1UE float64 `json:"no_tracer_avg_vs_1ue,omitempty"`
	Saturated        bool    `json:"saturated"`
	Saturation       string  `json:"saturation"`
	Finding          string  `json:"finding"`
}

type ScaleReport struct {
	Kernel   string `json:"kernel"`
	UPF      string `json:"upf"`
	CPUs     int    `json:"cpus"`
	Date     string `json:"date"`
	Note     string `json:"note"`
	PPSPerUE int    `json:"pps_per_ue"`
	// TracerEvery is the tracer's --every (empty in reports before it was
	// recorded: 1s).
	TracerEvery string         `json:"tracer_every,omitempty"`
	Rounds      int            `json:"rounds"`          // per UE count and boot
	Boots       []int          `json:"boots,omitempty"` // the boots whose runs this report pools
	Runs        []ScaleRun     `json:"runs"`
	Summary     []ScaleSummary `json:"summary"`
}

// runScale measures each UE count in ueCounts for rounds rounds.
func runScale(ueCounts []int, rounds int) (*ScaleReport, error) {
	rel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	rep := &ScaleReport{
		Kernel: strings.TrimSpace(string(rel)), UPF: *upf, CPUs: runtime.NumCPU(), Date: time.Now().UTC().Format(time.RFC3339),
		PPSPerUE: *pps, Rounds: rounds, TracerEvery: scaleEvery.String(),
		Note: fmt.Sprintf("QEMU TCG guest: compare variants within this run only. UE 1 pings the N6 address every %v "+
			"(%d pings a run); the other UEs send %d echo requests/s each through the gNB. \"tracer\": `swiftlane trace gtp "+
			"--every %v` alone (EEVDF schedules); its programs' run time from kernel.bpf_stats_enabled (which itself adds two "+
			"clock reads per program run). Per packet: every tracer program run (GTP-U functions and the sender marks on "+
			"every IP send) over the packets the UPF device received and sent. cpu_busy_pct: the guest's CPU time outside the idle "+
			"loop during the pings; a UE count is saturated when, without the tracer, that is >= %d %% or UE 1's average RTT >= %dx "+
			"the 1-UE figure: its overhead is then mostly queueing in a full machine.", *interval, *samples, *pps, *scaleEvery, saturatedBusyPct, saturatedRTTRatio),
	}
	if err := os.WriteFile("/proc/sys/kernel/bpf_stats_enabled", []byte("1"), 0); err != nil {
		return nil, fmt.Errorf("enable BPF run-time statistics: %w", err)
	}
	defer os.WriteFile("/proc/sys/kernel/bpf_stats_enabled", []byte("0"), 0)
	for _, n := range ueCounts {
		runs, err := scaleOne(n, rounds)
		rep.Runs = append(rep.Runs, runs...)
		if err != nil {
			judgeSaturation(rep.Summary)
			return rep, fmt.Errorf("%d UEs: %w", n, err)
		}
		rep.Summary = append(rep.Summary, summarise(n, runs))
	}
	judgeSaturation(rep.Summary)
	return rep, nil
}

// When the guest counts as saturated without the tracer: its CPUs busy at
// least this much of the time, or UE 1's average RTT at least this many
// times the 1-UE figure (the pings then wait behind the other UEs' work).
const (
	saturatedBusyPct  = 80
	saturatedRTTRatio = 2
)

// judgeSaturation says for each UE count whether the no-tracer runs had the
// guest saturated, and if so marks the finding: the RTT overhead measured
// there is not what the tracer costs on a machine with room to spare.
func judgeSaturation(sums []ScaleSummary) {
	var one float64
	for _, s := range sums {
		if s.UEs == 1 && s.NoTracerAvgMs != nil {
			one = s.NoTracerAvgMs.Median
		}
	}
	for i := range sums {
		s := &sums[i]
		var why []string
		if one > 0 && s.NoTracerAvgMs != nil {
			s.NoTracerAvgVs1UE = benchlab.Round(s.NoTracerAvgMs.Median / one)
			if s.NoTracerAvgVs1UE >= saturatedRTTRatio {
				why = append(why, fmt.Sprintf("UE 1's RTT %.1fx the 1-UE figure", s.NoTracerAvgVs1UE))
			}
		}
		if b := s.NoTracerCPUBusyPct; b != nil && b.Median >= saturatedBusyPct {
			why = append(why, fmt.Sprintf("CPUs %.0f %% busy", b.Median))
		}
		s.Saturated = len(why) > 0
		switch {
		case s.Saturated:
			s.Saturation = "saturated without the tracer: " + strings.Join(why, ", ")
			s.Finding = fmt.Sprintf("measured in a saturated guest (without the tracer %s; saturated: >= %d %% busy or >= %dx), "+
				"so the overhead is mostly queueing behind any added work, not the tracer's cost at a rate the guest can carry: %s",
				strings.Join(why, ", "), saturatedBusyPct, saturatedRTTRatio, s.Finding)
		case s.NoTracerCPUBusyPct == nil && one == 0:
			s.Saturation = "not judged: no CPU figures and no 1-UE runs"
		default:
			var seen []string
			if b := s.NoTracerCPUBusyPct; b != nil {
				seen = append(seen, fmt.Sprintf("CPUs %.0f %% busy", b.Median))
			}
			if s.NoTracerAvgVs1UE > 0 {
				seen = append(seen, fmt.Sprintf("UE 1's RTT %.1fx the 1-UE figure", s.NoTracerAvgVs1UE))
			}
			s.Saturation = "not saturated without the tracer: " + strings.Join(seen, ", ")
			if s.NoTracerCPUBusyPct == nil {
				s.Saturation += " (judged on the RTT alone: no CPU figures)"
			}
		}
	}
}

// scaleOne brings a lab with n UEs up, with its gNB and the other UEs'
// traffic, and measures both variants in each round.
func scaleOne(n, rounds int) ([]ScaleRun, error) {
	ues := fmt.Sprint(n)
	exec := func(args ...string) (*proc, error) {
		return start(*swiftlane, append([]string{"lab", "--ues", ues}, args...)...)
	}
	lab, err := exec("up", "--upf", *upf)
	if err != nil {
		return nil, err
	}
	defer lab.stop(syscall.SIGINT)
	if _, err := lab.waitFor(regexp.MustCompile(`lab up:`), 300*time.Second); err != nil {
		return nil, err
	}
	gnb, err := exec("gnb")
	if err != nil {
		return nil, err
	}
	defer gnb.stop(syscall.SIGTERM)
	if _, err := gnb.waitFor(regexp.MustCompile(`gnb ready`), 120*time.Second); err != nil {
		return nil, err
	}
	if n > 1 {
		tr, err := exec("traffic", "--pps", fmt.Sprint(*pps))
		if err != nil {
			return nil, err
		}
		defer tr.stop(syscall.SIGTERM)
	}
	t := gtplab.Default()
	t.UEs = n
	var runs []ScaleRun
	for r := 1; r <= rounds; r++ {
		order := []string{"no-tracer", "tracer"}
		if (r+*boot)%2 == 0 { // odd boots start with the tracer, even ones (0: no -boot) without
			slices.Reverse(order)
		}
		for _, v := range order {
			run := ScaleRun{UEs: n, Variant: v, Boot: *boot, Round: r}
			if err := scaleRun(&run, t); err != nil {
				run.Error = err.Error()
				runs = append(runs, run)
				return runs, err
			}
			fmt.Fprintf(os.Stderr, "bench-scale: %d UEs round %d %-9s avg %.3f ms p99 %.3f ms, %.0f packets/s, tracer %.0f ns/packet\n",
				n, r, v, run.Result.AvgMs, run.Result.P99Ms, run.PacketsPerSecond, run.TracerNsPerPacket)
			runs = append(runs, run)
		}
	}
	return runs, nil
}

// scaleRun measures one variant: the UE's pings, the UPF's packets in that
// window and, with the tracer, its programs' run time.
func scaleRun(run *ScaleRun, t gtplab.Topology) error {
	if run.Variant == "tracer" {
		tr, err := start(*swiftlane, "trace", "gtp", "--every", scaleEvery.String())
		if err != nil {
			return err
		}
		defer tr.stop(syscall.SIGINT)
		if _, err := tr.waitFor(regexp.MustCompile(`swiftlane: tracing`), 120*time.Second); err != nil {
			return err
		}
	}
	lab := &gtplab.Lab{T: t}
	st0, err := lab.Stats()
	if err != nil {
		return err
	}
	ns0, runs0, err := tracerStats()
	if err != nil {
		return err
	}
	cpu0, err := readCPUTimes()
	if err != nil {
		return err
	}
	t0 := time.Now()
	res, err := measure()
	if err != nil {
		return err
	}
	secs := time.Since(t0).Seconds()
	cpu1, err := readCPUTimes()
	if err != nil {
		return err
	}
	st1, err := lab.Stats()
	if err != nil {
		return err
	}
	ns1, runs1, err := tracerStats()
	if err != nil {
		return err
	}
	run.CPUBusyPct = round3(cpu1.busyPctSince(cpu0))
	run.Result = res
	run.Result.RTTMs = nil // the summary keeps the figures; the samples would be 36 lists
	run.Packets = st1.RxPackets + st1.TxPackets - st0.RxPackets - st0.TxPackets
	run.PacketsPerSecond = round3(float64(run.Packets) / secs)
	run.TracerNs, run.TracerRuns = ns1-ns0, runs1-runs0
	if run.Variant == "tracer" {
		if run.TracerRuns == 0 {
			return errors.New("the tracer's programs did not run: is the UPF module traced?")
		}
		if run.Packets > 0 {
			run.TracerNsPerPacket = round3(float64(run.TracerNs) / float64(run.Packets))
		}
	}
	return nil
}

// tracerStats sums the run time and run count of every loaded program
// named like one of the tracer's.
func tracerStats() (ns, runs uint64, err error) {
	var id ebpf.ProgramID
	for {
		id, err = ebpf.ProgramGetNextID(id)
		if errors.Is(err, os.ErrNotExist) {
			return ns, runs, nil
		}
		if err != nil {
			return 0, 0, fmt.Errorf("list BPF programs: %w", err)
		}
		p, err := ebpf.NewProgramFromID(id)
		if err != nil {
			continue // unloaded in between
		}
		info, err := p.Info()
		if err != nil || !slices.Contains(tracerPrograms, info.Name) {
			p.Close()
			continue
		}
		st, err := p.Stats()
		p.Close()
		if err != nil {
			return 0, 0, fmt.Errorf("BPF program %s statistics: %w", info.Name, err)
		}
		ns += uint64(st.Runtime.Nanoseconds())
		runs += st.RunCount
	}
}

// cpuTimes are /proc/stat's totals over all CPUs, in clock ticks.
type cpuTimes struct{ total, idle uint64 }

func readCPUTimes() (cpuTimes, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}, err
	}
	return parseCPUTimes(string(b))
}

// parseCPUTimes reads the "cpu" line: user nice system idle iowait irq
// softirq steal ...; idle and iowait are the idle loop's time.
func parseCPUTimes(stat string) (cpuTimes, error) {
	line, _, _ := strings.Cut(stat, "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return cpuTimes{}, fmt.Errorf("/proc/stat: first line %q is not the CPUs' total", line)
	}
	var t cpuTimes
	// guest and guest_nice (fields 9 and 10) are inside user and nice already.
	for i, v := range f[1:min(len(f), 9)] {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return cpuTimes{}, fmt.Errorf("/proc/stat: field %d of %q: %w", i+1, line, err)
		}
		t.total += n
		if i == 3 || i == 4 {
			t.idle += n
		}
	}
	return t, nil
}

// busyPctSince is the share of CPU time outside the idle loop since c0.
func (c cpuTimes) busyPctSince(c0 cpuTimes) float64 {
	total := c.total - c0.total
	if total == 0 {
		return 0
	}
	return 100 * float64(total-(c.idle-c0.idle)) / float64(total)
}

// summarise compares the variants of one UE count, round by round.
func summarise(n int, runs []ScaleRun) ScaleSummary {
	type key struct{ boot, round int }
	by := map[string]map[key]*ScaleRun{"no-tracer": {}, "tracer": {}}
	var keys []key
	boots := map[int]bool{}
	for i := range runs {
		if r := &runs[i]; r.Result != nil {
			k := key{r.Boot, r.Round}
			if by["no-tracer"][k] == nil && by["tracer"][k] == nil {
				keys = append(keys, k)
			}
			by[r.Variant][k] = r
			boots[r.Boot] = true
		}
	}
	slices.SortFunc(keys, func(a, b key) int { return cmp.Or(a.boot-b.boot, a.round-b.round) })
	vals := map[string][]float64{}
	label := map[string][]int{}
	add := func(name string, k key, v float64) {
		vals[name] = append(vals[name], v)
		if len(boots) > 1 {
			label[name] = append(label[name], k.boot)
		} else {
			label[name] = append(label[name], k.round)
		}
	}
	for _, k := range keys {
		off, on := by["no-tracer"][k], by["tracer"][k]
		if off != nil {
			add("off_avg", k, off.Result.AvgMs)
			add("off_p99", k, off.Result.P99Ms)
			if off.CPUBusyPct > 0 {
				add("off_busy", k, off.CPUBusyPct)
			}
		}
		if on == nil {
			continue
		}
		if on.CPUBusyPct > 0 {
			add("on_busy", k, on.CPUBusyPct)
		}
		add("pps", k, on.PacketsPerSecond)
		add("ns", k, on.TracerNsPerPacket)
		add("cpu", k, on.TracerNsPerPacket*on.PacketsPerSecond/1e7) // ns per s over 1e9, in percent
		add("on_avg", k, on.Result.AvgMs)
		add("on_p99", k, on.Result.P99Ms)
		if off != nil {
			add("over", k, 100*(on.Result.AvgMs/off.Result.AvgMs-1))
		}
	}
	stat := func(k string) *benchlab.Stat { return benchlab.NewStat(vals[k], label[k]) }
	s := ScaleSummary{
		UEs: n, PacketsPerSecond: stat("pps"), TracerNsPerPacket: stat("ns"), TracerCPUPct: stat("cpu"),
		NoTracerAvgMs: stat("off_avg"), TracerAvgMs: stat("on_avg"), NoTracerP99Ms: stat("off_p99"), TracerP99Ms: stat("on_p99"),
		AvgOverheadPct: stat("over"), NoTracerCPUBusyPct: stat("off_busy"), TracerCPUBusyPct: stat("on_busy"),
	}
	if ci, ok := benchlab.MedianCI(vals["over"], 0.95); ok {
		s.AvgOverheadCI = &ci
	}
	s.Finding = scaleFinding(s.AvgOverheadPct, s.AvgOverheadCI)
	return s
}

// scaleFinding says whether the tracer's RTT cost is beyond the noise and
// whether it meets the goal (< 5 % of the UE's average RTT). With 6 or
// more paired rounds it judges on the median overhead's confidence
// interval (ci): the goal holds when the whole interval is under 5 %, a
// cost shows when the whole interval is above 0. With fewer, on the
// rounds' range: a sign that holds in every round.
func scaleFinding(o *benchlab.Stat, ci *benchlab.CI) string {
	switch {
	case o == nil:
		return "no round measured both variants"
	case ci != nil:
		ival := fmt.Sprintf("median %+.1f %% over %d paired rounds, %.0f %% confidence interval %+.1f to %+.1f; rounds %+.1f to %+.1f",
			o.Median, ci.N, 100*ci.Level, ci.Lo, ci.Hi, o.Min, o.Max)
		switch {
		case ci.Lo >= 5:
			return "the tracer adds a cost above the goal: " + ival + "; goal < 5 %: false"
		case ci.Hi < 5 && ci.Lo > 0:
			return "the tracer adds a cost, under the goal: " + ival + "; goal < 5 %: true"
		case ci.Hi < 5:
			return "no cost beyond the noise, and the interval is under the goal: " + ival + "; goal < 5 %: true"
		default:
			return "not settled, the interval reaches 5 %: " + ival + "; goal < 5 %: not shown"
		}
	case len(o.Values) < 3:
		return fmt.Sprintf("%d round(s) only, too few to judge against a spread: the tracer's average RTT %+.1f %% (%.1f to %.1f)", len(o.Values), o.Median, o.Min, o.Max)
	case o.Min > 0:
		return fmt.Sprintf("the tracer adds %.1f %% to the UE's average RTT (%.1f to %.1f, higher in every round); goal < 5 %%: %v",
			o.Median, o.Min, o.Max, o.Median < 5)
	case o.Max < 0:
		return fmt.Sprintf("the tracer's runs had a lower average RTT in every round (%.1f %%, %.1f to %.1f): no cost measurable; goal < 5 %%: true", o.Median, o.Min, o.Max)
	default:
		return fmt.Sprintf("no difference beyond the spread (median %+.1f %%, rounds %.1f to %.1f); goal < 5 %%: %v", o.Median, o.Min, o.Max, o.Max < 5)
	}
}

// scaleTable renders the summary as docs/gtp.md's markdown table.
func scaleTable(rep *ScaleReport) string {
	var b strings.Builder
	b.WriteString("| UEs | packets/s | guest CPU busy, no tracer | RTT vs 1 UE, no tracer | UE RTT avg, no tracer | with tracer | overhead | tracer per packet | tracer CPU | saturated |\n")
	b.WriteString("|----:|----------:|--------------------------:|-----------------------:|----------------------:|------------:|---------:|------------------:|-----------:|:----------|\n")
	med := func(s *benchlab.Stat, format string) string {
		if s == nil {
			return "n/a"
		}
		return fmt.Sprintf(format, s.Median)
	}
	for _, s := range rep.Summary {
		over := "n/a"
		if o, ci := s.AvgOverheadPct, s.AvgOverheadCI; ci != nil {
			over = fmt.Sprintf("%+.1f %% (%.0f %% CI %+.1f to %+.1f, %d pairs)", o.Median, 100*ci.Level, ci.Lo, ci.Hi, ci.N)
		} else if o != nil {
			over = fmt.Sprintf("%+.1f %% (%+.1f to %+.1f)", o.Median, o.Min, o.Max)
		}
		vs1 := "n/a"
		if s.NoTracerAvgVs1UE > 0 {
			vs1 = fmt.Sprintf("%.1fx", s.NoTracerAvgVs1UE)
		}
		perPacket := "n/a"
		if s.TracerNsPerPacket != nil {
			perPacket = fmt.Sprintf("%.1f µs", s.TracerNsPerPacket.Median/1000)
		}
		sat := "no"
		if s.Saturated {
			sat = "**yes**"
		} else if strings.HasPrefix(s.Saturation, "not judged") {
			sat = "not judged"
		}
		fmt.Fprintf(&b, "| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", s.UEs, med(s.PacketsPerSecond, "%.0f"),
			med(s.NoTracerCPUBusyPct, "%.0f %%"), vs1, med(s.NoTracerAvgMs, "%.1f ms"), med(s.TracerAvgMs, "%.1f ms"), over,
			perPacket, med(s.TracerCPUPct, "%.1f %%"), sat)
	}
	return b.String()
}

// rescore summarises a report's runs again (a report written before a
// summary field existed gets it from the runs it has) and judges saturation.
func rescore(rep *ScaleReport) {
	byUEs := map[int][]ScaleRun{}
	var order []int
	for _, r := range rep.Runs {
		if _, ok := byUEs[r.UEs]; !ok {
			order = append(order, r.UEs)
		}
		byUEs[r.UEs] = append(byUEs[r.UEs], r)
	}
	rep.Summary = nil
	for _, n := range order {
		rep.Summary = append(rep.Summary, summarise(n, byUEs[n]))
	}
	judgeSaturation(rep.Summary)
}

// mergeScale pools per-boot -scale reports (each made with its own -boot)
// into one: the runs of every boot, summarised again over all paired
// rounds. The boots must have measured the same thing.
func mergeScale(files []string) (*ScaleReport, error) {
	reps, err := benchlab.ReadBoots[ScaleReport](files)
	if err != nil {
		return nil, err
	}
	out := reps[0]
	out.Runs, out.Boots = nil, nil
	seen := map[int]string{}
	for i, r := range reps {
		if r.UPF != out.UPF || r.PPSPerUE != out.PPSPerUE || r.Kernel != out.Kernel || r.TracerEvery != out.TracerEvery {
			return nil, fmt.Errorf("%s: UPF %s, %d packets/s per UE on %s, tracer --every %q, but %s has %s, %d on %s, %q: merge only boots of one setup",
				files[i], r.UPF, r.PPSPerUE, r.Kernel, r.TracerEvery, files[0], out.UPF, out.PPSPerUE, out.Kernel, out.TracerEvery)
		}
		b := 0
		if len(r.Runs) > 0 {
			b = r.Runs[0].Boot
		}
		if b == 0 {
			return nil, fmt.Errorf("%s: its runs carry no boot number: measure each boot with -boot N to merge them", files[i])
		}
		if f, dup := seen[b]; dup {
			return nil, fmt.Errorf("%s and %s are both boot %d", f, files[i], b)
		}
		seen[b] = files[i]
		out.Boots = append(out.Boots, b)
		out.Runs = append(out.Runs, r.Runs...)
		out.Date = max(out.Date, r.Date)
	}
	rescore(&out)
	return &out, nil
}
