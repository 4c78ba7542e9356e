// SPDX-License-Identifier: Apache-2.0

package main

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"runtime"
	"slices"
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
	Variant string  `json:"variant"` // "no-tracer" or "tracer"
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
	Error             string  `json:"error,omitempty"`
}

// ScaleSummary is one UE count's comparison: each figure's median and
// spread over the rounds (Stat.Boots holds the round numbers).
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
	Finding           string         `json:"finding"`
}

type ScaleReport struct {
	Kernel   string         `json:"kernel"`
	UPF      string         `json:"upf"`
	CPUs     int            `json:"cpus"`
	Date     string         `json:"date"`
	Note     string         `json:"note"`
	PPSPerUE int            `json:"pps_per_ue"`
	Rounds   int            `json:"rounds"`
	Runs     []ScaleRun     `json:"runs"`
	Summary  []ScaleSummary `json:"summary"`
}

// runScale measures each UE count in ueCounts for rounds rounds.
func runScale(ueCounts []int, rounds int) (*ScaleReport, error) {
	rel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	rep := &ScaleReport{
		Kernel: strings.TrimSpace(string(rel)), UPF: *upf, CPUs: runtime.NumCPU(), Date: time.Now().UTC().Format(time.RFC3339),
		PPSPerUE: *pps, Rounds: rounds,
		Note: fmt.Sprintf("QEMU TCG guest: compare variants within this run only. UE 1 pings the N6 address every %v "+
			"(%d pings a run); the other UEs send %d echo requests/s each through the gNB. \"tracer\": `swiftlane trace gtp "+
			"--every 1s` alone (EEVDF schedules); its programs' run time from kernel.bpf_stats_enabled (which itself adds two "+
			"clock reads per program run). Per packet: every tracer program run (GTP-U functions and the sender marks on "+
			"every IP send) over the packets the UPF device received and sent.", *interval, *samples, *pps),
	}
	if err := os.WriteFile("/proc/sys/kernel/bpf_stats_enabled", []byte("1"), 0); err != nil {
		return nil, fmt.Errorf("enable BPF run-time statistics: %w", err)
	}
	defer os.WriteFile("/proc/sys/kernel/bpf_stats_enabled", []byte("0"), 0)
	for _, n := range ueCounts {
		runs, err := scaleOne(n, rounds)
		rep.Runs = append(rep.Runs, runs...)
		if err != nil {
			return rep, fmt.Errorf("%d UEs: %w", n, err)
		}
		rep.Summary = append(rep.Summary, summarise(n, runs))
	}
	return rep, nil
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
		if r%2 == 0 {
			slices.Reverse(order)
		}
		for _, v := range order {
			run := ScaleRun{UEs: n, Variant: v, Round: r}
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
		tr, err := start(*swiftlane, "trace", "gtp", "--every", "1s")
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
	t0 := time.Now()
	res, err := measure()
	if err != nil {
		return err
	}
	secs := time.Since(t0).Seconds()
	st1, err := lab.Stats()
	if err != nil {
		return err
	}
	ns1, runs1, err := tracerStats()
	if err != nil {
		return err
	}
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

// summarise compares the variants of one UE count, round by round.
func summarise(n int, runs []ScaleRun) ScaleSummary {
	by := map[string]map[int]*ScaleRun{"no-tracer": {}, "tracer": {}}
	maxRound := 0
	for i := range runs {
		if runs[i].Result != nil {
			by[runs[i].Variant][runs[i].Round] = &runs[i]
			maxRound = max(maxRound, runs[i].Round)
		}
	}
	vals := map[string][]float64{}
	rounds := map[string][]int{}
	add := func(k string, r int, v float64) { vals[k] = append(vals[k], v); rounds[k] = append(rounds[k], r) }
	for r := 1; r <= maxRound; r++ {
		off, on := by["no-tracer"][r], by["tracer"][r]
		if off != nil {
			add("off_avg", r, off.Result.AvgMs)
			add("off_p99", r, off.Result.P99Ms)
		}
		if on == nil {
			continue
		}
		add("pps", r, on.PacketsPerSecond)
		add("ns", r, on.TracerNsPerPacket)
		add("cpu", r, on.TracerNsPerPacket*on.PacketsPerSecond/1e7) // ns per s over 1e9, in percent
		add("on_avg", r, on.Result.AvgMs)
		add("on_p99", r, on.Result.P99Ms)
		if off != nil {
			add("over", r, 100*(on.Result.AvgMs/off.Result.AvgMs-1))
		}
	}
	stat := func(k string) *benchlab.Stat { return benchlab.NewStat(vals[k], rounds[k]) }
	s := ScaleSummary{
		UEs: n, PacketsPerSecond: stat("pps"), TracerNsPerPacket: stat("ns"), TracerCPUPct: stat("cpu"),
		NoTracerAvgMs: stat("off_avg"), TracerAvgMs: stat("on_avg"), NoTracerP99Ms: stat("off_p99"), TracerP99Ms: stat("on_p99"),
		AvgOverheadPct: stat("over"),
	}
	s.Finding = scaleFinding(s.AvgOverheadPct)
	return s
}

// scaleFinding says whether the tracer's RTT cost is beyond the rounds'
// spread (the same sign in every round), and whether it meets the goal
// (< 5 % of the UE's average RTT).
func scaleFinding(o *benchlab.Stat) string {
	switch {
	case o == nil:
		return "no round measured both variants"
	case len(o.Values) < 3:
		return fmt.Sprintf("%d round(s) only, too few to judge against a spread: the tracer's average RTT %+.1f %% (%.1f to %.1f)", len(o.Values), o.Median, o.Min, o.Max)
	case o.Min > 0:
		return fmt.Sprintf("the tracer adds %.1f %% to the UE's average RTT (%.1f to %.1f, higher in every round); goal < 5 %%: %v",
			o.Median, o.Min, o.Max, o.Median < 5)
	case o.Max < 0:
		return fmt.Sprintf("the tracer's runs had a lower average RTT in every round (%.1f %%, %.1f to %.1f): no cost measurable", o.Median, o.Min, o.Max)
	default:
		return fmt.Sprintf("no difference beyond the spread (median %+.1f %%, rounds %.1f to %.1f); goal < 5 %%: %v", o.Median, o.Min, o.Max, o.Max < 5)
	}
}
