// SPDX-License-Identifier: Apache-2.0

// Command userspace is the benchmark behind `make bench-userspace`. It runs
// as root inside the VM lab, every variant in one boot: the kernel's default
// scheduler (EEVDF), swiftlane in kernel mode, swiftlane in user-space mode
// (the vruntime policy in Go) and scx_rustland (the Rust user-space
// scheduler). For each it measures
//
//   - throughput of a message-passing workload that saturates the CPUs
//     (perf bench sched messaging: groups of processes over socketpairs),
//   - for swiftlane: scheduling decisions per second and the scheduler
//     process's CPU use during that workload,
//   - for swiftlane: the critical probe's round trip (a critical strategy
//     for `swiftlane probe`) under stress-ng --cpu 2xCPUs,
//   - for every variant: the probe's round trip on the idle machine, and
//     under the same stress-ng as a plain process (run through a link
//     named plainprobe, which the critical strategy does not match): what
//     a scheduler gives a task that nobody prioritised.
//
// -base BINARY adds swiftlane-user-base: user-space mode run from another
// build (e.g. the commit before a change), measured in the same boot.
//
// One run is one boot (-boot N sets the variant order: benchlab.MirroredOrder runs
// every pair of variants both ways over two boots); -merge
// takes the boots' reports to bench/results/userspace.json: the medians
// under the keys of one boot's report, and each number's spread (merge.go).
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/swiftlane/swiftlane/bench/internal/benchlab"
)

// Variant is one scheduler's results.
type Variant struct {
	// Throughput is messages per second (median run).
	Throughput float64   `json:"throughput"`
	RunsSec    []float64 `json:"runs_s,omitempty"`
	// DecisionsPerS are tasks the scheduler placed per second during the
	// workload: user-space decisions applied (user mode) or BPF dispatches
	// (kernel mode).
	DecisionsPerS float64 `json:"decisions_per_s,omitempty"`
	// LoopCPUPct is the scheduler process's CPU time during the workload,
	// in % of one CPU (in user mode, mostly the Go loop).
	LoopCPUPct    float64 `json:"loop_cpu_pct,omitempty"`
	CriticalAvgUs float64 `json:"critical_avg_us,omitempty"`
	CriticalP99Us float64 `json:"critical_p99_us,omitempty"`
	// IdleAvgUs and IdleP99Us: the probe on the idle machine (-idle-samples).
	IdleAvgUs float64 `json:"idle_avg_us,omitempty"`
	IdleP99Us float64 `json:"idle_p99_us,omitempty"`
	// PlainAvgUs and PlainP99Us: the probe without a strategy under stress-ng.
	PlainAvgUs float64 `json:"plain_loaded_avg_us,omitempty"`
	PlainP99Us float64 `json:"plain_loaded_p99_us,omitempty"`
	// Counters of user-space mode over the workload, to explain it.
	Counters map[string]float64 `json:"counters,omitempty"`
	// Threads is where the scheduler process's CPU went during the
	// workload, per thread (the busiest first; those under 1 % left out).
	Threads     []ThreadCPU `json:"threads,omitempty"`
	Error       string      `json:"error,omitempty"`
	Description string      `json:"description"`
}

type Report struct {
	Kernel string `json:"kernel"`
	CPUs   int    `json:"cpus"`
	// Boots is how many boots of the lab the numbers come from: one per
	// run of this command, which runs every variant in one boot.
	Boots int `json:"boots"`
	// Boot is which boot this run was (-boot); 0 in a merged report.
	Boot           int                 `json:"boot,omitempty"`
	Date           string              `json:"date"`
	Note           string              `json:"note"`
	Workload       string              `json:"workload"`
	ThroughputUnit string              `json:"throughput_unit"`
	Order          []string            `json:"order"`
	Variants       map[string]*Variant `json:"variants"`
	// UserVsKernelPct is swiftlane-user's throughput in % of swiftlane-kernel's (target >= 95).
	UserVsKernelPct float64 `json:"user_vs_kernel_throughput_pct,omitempty"`
	// CriticalAvgRatio is swiftlane-user's critical probe average over swiftlane-kernel's (target <= 1.2).
	CriticalAvgRatio float64 `json:"critical_avg_ratio_user_vs_kernel,omitempty"`
	// In a merged report (merge.go): the spread over boots and the goals.
	Spread *Spread `json:"spread,omitempty"`
	Goals  []Goal  `json:"goals,omitempty"`
}

var (
	swiftlane = flag.String("swiftlane", "build/swiftlane", "swiftlane binary")
	peersDir  = flag.String("peers", ".cache/peers/bin", "directory with scx_rustland")
	peerErrs  = flag.String("peer-errors", ".cache/peers/errors.json", "why a peer could not be built (written by lab/peers.sh)")
	out       = flag.String("out", "bench/results/userspace.json", "JSON output")
	groups    = flag.Int("groups", 2, "perf bench sched messaging: groups of 20 senders + 20 receivers")
	loops     = flag.Int("loops", 100, "perf bench sched messaging: messages each sender sends each receiver")
	runs      = flag.Int("runs", 3, "workload runs per variant (the median counts)")
	samples   = flag.Int("samples", 500, "critical probe round trips per swiftlane variant")
	idleN     = flag.Int("idle-samples", 2000, "probe round trips on the idle machine per variant (0: skip)")
	base      = flag.String("base", "", "another swiftlane binary: adds variant swiftlane-user-base (user-space mode from that build, same boot)")
	only      = flag.String("variants", "", "comma-separated subset of variants (default: all)")
	boot      = flag.Int("boot", 0, "boot number (1, 2, ...): sets the variant order (benchlab.MirroredOrder: mirrored pairs of boots, rotated by pair) and is recorded")
	pprofDir  = flag.String("pprof", "", "diagnostics: a Go CPU profile of the scheduler process (swiftlane run --profiling) over the first -pprof-seconds of the messaging runs, into DIR/VARIANT.pprof (not for swiftlane-user-base)")
	pprofSecs = flag.Int("pprof-seconds", 5, "length of the -pprof profile")
	merge     = flag.Bool("merge", false, "merge the per-boot JSON files given as arguments into -out (medians and spread)")
)

var all = []string{"eevdf", "swiftlane-kernel", "swiftlane-user", "scx_rustland"}

var describe = map[string]string{
	"eevdf":               "kernel default scheduler",
	"swiftlane-kernel":    "swiftlane run (policy in BPF), probe class critical",
	"swiftlane-user":      "swiftlane run --mode userspace --policy vruntime (policy in Go), probe class critical",
	"scx_rustland":        "scx_rustland (crates.io; policy in Rust, user space)",
	"swiftlane-user-base": "swiftlane-user from the -base build, for a same-boot comparison",
}

const metricsAddr = "127.0.0.1:9463"

func main() {
	flag.Parse()
	if *merge {
		if err := mergeBoots(flag.Args(), *out); err != nil {
			fail(err)
		}
		return
	}
	names := slices.Clone(all)
	if *only != "" {
		names = strings.Split(*only, ",")
	}
	if *base != "" && !slices.Contains(names, "swiftlane-user-base") {
		names = append(names, "swiftlane-user-base")
	}
	names = benchlab.MirroredOrder(names, *boot)
	if _, err := exec.LookPath("perf"); err != nil {
		fail(fmt.Errorf("perf not found: install linux-perf (perf bench sched messaging is the workload)"))
	}
	rel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	rep := Report{
		Kernel: strings.TrimSpace(string(rel)), CPUs: runtime.NumCPU(), Boots: 1, Boot: *boot, Date: time.Now().UTC().Format(time.RFC3339),
		Note:           "QEMU TCG guest: absolute numbers are inflated 20-50x and noisy, and anything else running on the host skews them; compare variants within this run only.",
		Workload:       fmt.Sprintf("perf bench sched messaging -g %d -l %d (processes over socketpairs), median of %d runs", *groups, *loops, *runs),
		ThroughputUnit: "messages/s",
		Order:          names,
		Variants:       map[string]*Variant{},
	}
	for _, name := range names {
		fmt.Fprintf(os.Stderr, "bench: %s ...\n", name)
		v, err := runVariant(name)
		if err != nil {
			if v == nil {
				v = &Variant{}
			}
			v.Error = err.Error()
			fmt.Fprintf(os.Stderr, "bench: %s: %v\n", name, err)
		}
		v.Description = describe[name]
		rep.Variants[name] = v
	}
	k, u := rep.Variants["swiftlane-kernel"], rep.Variants["swiftlane-user"]
	if k != nil && u != nil && k.Throughput > 0 && u.Throughput > 0 {
		rep.UserVsKernelPct = math.Round(1000*u.Throughput/k.Throughput) / 10
	}
	if k != nil && u != nil && k.CriticalAvgUs > 0 && u.CriticalAvgUs > 0 {
		rep.CriticalAvgRatio = math.Round(100*u.CriticalAvgUs/k.CriticalAvgUs) / 100
	}
	printTable(rep)
	if err := benchlab.WriteJSON(*out, rep); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench:", err)
	os.Exit(1)
}

const probeConfig = "strategies:\n  - name: probe\n    class: critical\n    command_regex: 'swiftlane probe'\n"

func runVariant(name string) (*Variant, error) {
	var sched *scheduler
	var err error
	switch name {
	case "eevdf":
	case "swiftlane-kernel", "swiftlane-user", "swiftlane-user-base":
		cfg, err := benchlab.WriteConfig(probeConfig)
		if err != nil {
			return nil, err
		}
		args := []string{"run", "--metrics-addr", metricsAddr, "--config", cfg}
		if name != "swiftlane-kernel" {
			args = append(args, "--mode", "userspace", "--policy", "vruntime")
		}
		if *pprofDir != "" && name != "swiftlane-user-base" {
			args = append(args, "--profiling")
		}
		bin := *swiftlane
		if name == "swiftlane-user-base" {
			if bin = *base; bin == "" {
				return nil, fmt.Errorf("variant %s needs -base BINARY", name)
			}
		}
		sched, err = startScheduler(bin, args...)
	case "scx_rustland":
		bin := filepath.Join(*peersDir, name)
		if _, serr := os.Stat(bin); serr != nil {
			return nil, fmt.Errorf("%s not built: %s", name, benchlab.PeerError(*peerErrs, name))
		}
		sched, err = startScheduler(bin)
	default:
		return nil, fmt.Errorf("unknown variant %q", name)
	}
	if err != nil {
		return nil, err
	}
	if sched != nil {
		defer sched.Stop()
	}

	v := &Variant{}
	swift := strings.HasPrefix(name, "swiftlane")
	// Idle first: nothing else has run under this scheduler yet.
	if *idleN > 0 {
		r, err := probe(*swiftlane, *idleN, "10s")
		if err != nil {
			return v, fmt.Errorf("idle probe: %w", err)
		}
		v.IdleAvgUs, v.IdleP99Us = r.AvgUs, r.P99Us
	}
	var before map[string]float64
	var cpuBefore time.Duration
	var threadsBefore map[int]threadSample
	if swift {
		before = scrape()
		cpuBefore = sched.cpuTime()
		threadsBefore = threadSamples(sched.Cmd.Process.Pid)
	}
	var profiled func() error
	if swift && *pprofDir != "" {
		var err error
		if profiled, err = startProfile(*pprofDir, name, *pprofSecs); err != nil {
			return v, err
		}
	}
	start := time.Now()
	for i := 0; i < *runs; i++ {
		sec, err := messaging()
		if err != nil {
			return v, err
		}
		v.RunsSec = append(v.RunsSec, sec)
	}
	wall := time.Since(start)
	if profiled != nil {
		if err := profiled(); err != nil {
			return v, err
		}
	}
	sorted := slices.Clone(v.RunsSec)
	slices.Sort(sorted)
	msgs := float64(*groups * 20 * 20 * *loops)
	v.Throughput = math.Round(msgs / sorted[len(sorted)/2])
	if swift {
		after := scrape()
		delta := func(k string) float64 { return after[k] - before[k] }
		if name != "swiftlane-kernel" {
			v.DecisionsPerS = delta("user_decisions_total.applied") / wall.Seconds()
			v.Counters = map[string]float64{}
			for _, k := range []string{"user_queued_total", "user_decisions_total.applied", "user_decisions_total.stale",
				"user_decisions_total.bounced", "dispatch_total.fallback", "dispatch_total.kthread", "dispatch_total.scheduler",
				"user_loop_iterations_total", "user_round_trips_total", "user_round_trip_seconds_total"} {
				v.Counters[k] = delta(k)
			}
			if n := v.Counters["user_round_trips_total"]; n > 0 {
				v.Counters["user_round_trip_avg_us"] = 1e6 * v.Counters["user_round_trip_seconds_total"] / n
			}
		} else {
			for _, p := range []string{"direct", "critical", "shared", "kthread"} {
				v.DecisionsPerS += delta("dispatch_total." + p)
			}
			v.DecisionsPerS /= wall.Seconds()
		}
		v.DecisionsPerS = math.Round(v.DecisionsPerS)
		v.LoopCPUPct = math.Round(1000*(sched.cpuTime()-cpuBefore).Seconds()/wall.Seconds()) / 10
		v.Threads = threadCPU(threadsBefore, threadSamples(sched.Cmd.Process.Pid), wall)

	}
	crit, plain, err := probeUnderLoad(swift)
	if err != nil {
		return v, err
	}
	v.CriticalAvgUs, v.CriticalP99Us = crit.AvgUs, crit.P99Us
	v.PlainAvgUs, v.PlainP99Us = plain.AvgUs, plain.P99Us
	if sched != nil {
		if err := sched.Stop(); err != nil {
			return v, fmt.Errorf("scheduler stopped badly: %w", err)
		}
	}
	return v, nil
}

// startProfile takes a Go CPU profile of the scheduler process over its
// --profiling endpoint for the next seconds, into DIR/VARIANT.pprof; wait
// returns once it is written. perf did not work here: under TCG its
// sampling took the emulated CPUs inside the profiled process and left
// files without samples. Go's profiler counts each thread's CPU time, user
// and system, and charges it to the Go stack that spent it (a system call
// shows under its caller), at 100 Hz.
func startProfile(dir, variant string, seconds int) (wait func() error, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	file := filepath.Join(dir, variant+".pprof")
	done := make(chan error, 1)
	go func() {
		url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", metricsAddr, seconds)
		resp, err := http.Get(url)
		if err != nil {
			done <- fmt.Errorf("-pprof: %w", err)
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("%s: %s: %s", url, resp.Status, b)
		}
		if err == nil {
			err = os.WriteFile(file, b, 0o644)
		}
		if err != nil {
			err = fmt.Errorf("-pprof: %w", err)
		} else {
			fmt.Fprintf(os.Stderr, "bench-userspace: profile in %s (go tool pprof -top %s %s)\n", file, *swiftlane, file)
		}
		done <- err
	}()
	return func() error { return <-done }, nil
}

var totalRE = regexp.MustCompile(`Total time: ([0-9.]+) \[sec\]`)

// messaging runs the workload once and returns its time in seconds.
func messaging() (float64, error) {
	out, err := exec.Command("perf", "bench", "sched", "messaging", "-g", strconv.Itoa(*groups), "-l", strconv.Itoa(*loops)).CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("perf bench sched messaging: %v: %s", err, out)
	}
	m := totalRE.FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("perf bench sched messaging: no total time in %q", out)
	}
	return strconv.ParseFloat(string(m[1]), 64)
}

type probeResult struct {
	Samples int     `json:"samples"`
	AvgUs   float64 `json:"avg_us"`
	P99Us   float64 `json:"p99_us"`
}

// probeUnderLoad times the UDP echo probe while stress-ng keeps every CPU
// busy: as the critical strategy's process (swiftlane variants only), then
// as a plain one.
func probeUnderLoad(critical bool) (crit, plain probeResult, err error) {
	link := filepath.Join(os.TempDir(), fmt.Sprintf("plain-%d", time.Now().UnixNano()), "plainprobe")
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		return crit, plain, err
	}
	if err := os.Symlink(*swiftlane, link); err != nil {
		return crit, plain, err
	}
	hog := exec.Command("stress-ng", "--temp-path", os.TempDir(), "--quiet", "--cpu", fmt.Sprint(2*runtime.NumCPU()))
	if err := hog.Start(); err != nil {
		return crit, plain, fmt.Errorf("stress-ng: %w", err)
	}
	defer func() { hog.Process.Signal(syscall.SIGTERM); hog.Wait() }()
	if err := benchlab.WaitChildren(hog.Process.Pid, 2*runtime.NumCPU(), 30*time.Second); err != nil {
		return crit, plain, err
	}
	if critical {
		if crit, err = probe(*swiftlane, *samples, "20s"); err != nil {
			return crit, plain, err
		}
	}
	if plain, err = probe(link, *samples, "20s"); err != nil {
		return crit, plain, fmt.Errorf("plain probe: %w", err)
	}
	return crit, plain, nil
}

// probe runs the UDP echo server and n round trips at 1 ms intervals
// against it (at most d, plus the probe's timeout), both from bin.
func probe(bin string, n int, d string) (probeResult, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	echo := exec.CommandContext(ctx, bin, "probe", "echo", "--listen", "127.0.0.1:7779")
	if err := echo.Start(); err != nil {
		return probeResult{}, err
	}
	defer func() { cancel(); echo.Wait() }()
	res := filepath.Join(os.TempDir(), fmt.Sprintf("rtt-%d.json", time.Now().UnixNano()))
	cmd := exec.Command(bin, "probe", "rtt", "--target", "127.0.0.1:7779", "--samples", fmt.Sprint(n),
		"--duration", d, "--interval", "1ms", "--timeout", "2s", "--json", res)
	if b, err := cmd.CombinedOutput(); err != nil {
		return probeResult{}, fmt.Errorf("probe: %v: %s", err, b)
	}
	var r probeResult
	b, err := os.ReadFile(res)
	if err == nil {
		err = json.Unmarshal(b, &r)
	}
	if err == nil && r.Samples == 0 {
		err = fmt.Errorf("probe got no replies")
	}
	return r, err
}

// scrape reads swiftlane's metrics (benchlab.Scrape).
func scrape() map[string]float64 { return benchlab.Scrape(metricsAddr) }

type scheduler struct{ *benchlab.Scheduler }

// startScheduler starts a sched_ext scheduler and waits until the kernel
// reports it enabled. User-space mode locks all its memory before
// attaching: in the lab that reads the whole binary over 9p, tens of
// seconds under TCG.
func startScheduler(bin string, args ...string) (*scheduler, error) {
	s, err := benchlab.StartScheduler(3*time.Minute, bin, args...)
	if err != nil {
		return nil, err
	}
	return &scheduler{s}, nil
}

// cpuTime is the scheduler process's user+system CPU time so far.
func (s *scheduler) cpuTime() time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.Cmd.Process.Pid))
	if err != nil {
		return 0
	}
	utime, stime, _ := statTicks(string(b))
	return time.Duration((utime + stime) / 100 * float64(time.Second)) // USER_HZ is 100 on Linux
}

// statTicks reads utime and stime (USER_HZ ticks) from a /proc stat line,
// whose comm may hold spaces and parentheses.
func statTicks(stat string) (utime, stime float64, ok bool) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(stat[i+1:]) // f[0] is the state, so utime is f[11]
	if len(f) < 13 {
		return 0, 0, false
	}
	utime, err1 := strconv.ParseFloat(f[11], 64)
	stime, err2 := strconv.ParseFloat(f[12], 64)
	return utime, stime, err1 == nil && err2 == nil
}

// ThreadCPU is one thread's share of the workload's wall time: in user
// and system mode (from /proc's tick counts), how often it got a CPU and
// how long it waited for one (schedstat).
type ThreadCPU struct {
	TID      int     `json:"tid"`
	UserPct  float64 `json:"user_pct"`
	SysPct   float64 `json:"sys_pct"`
	RunsPerS float64 `json:"runs_per_s"` // times it was switched in
	WaitPct  float64 `json:"wait_pct"`   // runnable but not running
}

type threadSample struct {
	utime, stime  float64 // USER_HZ ticks
	runNs, waitNs float64
	runs          float64
}

// threadSamples reads every thread of pid; threads that end in between are
// skipped.
func threadSamples(pid int) map[int]threadSample {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	ents, _ := os.ReadDir(dir)
	out := map[int]threadSample{}
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err1 := os.ReadFile(dir + "/" + e.Name() + "/stat")
		sched, err2 := os.ReadFile(dir + "/" + e.Name() + "/schedstat")
		if err1 != nil || err2 != nil {
			continue
		}
		if ts, ok := parseThread(string(stat), string(sched)); ok {
			out[tid] = ts
		}
	}
	return out
}

func parseThread(stat, schedstat string) (threadSample, bool) {
	var t threadSample
	var ok bool
	ss := strings.Fields(schedstat)
	if t.utime, t.stime, ok = statTicks(stat); !ok || len(ss) < 3 {
		return threadSample{}, false
	}
	var errs [3]error
	t.runNs, errs[0] = strconv.ParseFloat(ss[0], 64)
	t.waitNs, errs[1] = strconv.ParseFloat(ss[1], 64)
	t.runs, errs[2] = strconv.ParseFloat(ss[2], 64)
	return t, errors.Join(errs[:]...) == nil
}

// threadCPU is the change from a to b per thread over wall, busiest first.
func threadCPU(a, b map[int]threadSample, wall time.Duration) []ThreadCPU {
	var out []ThreadCPU
	sec := wall.Seconds()
	for tid, y := range b {
		x := a[tid] // a thread started in between counts from zero
		t := ThreadCPU{TID: tid,
			UserPct:  benchlab.Round((y.utime - x.utime) / 100 / sec * 100), // USER_HZ is 100
			SysPct:   benchlab.Round((y.stime - x.stime) / 100 / sec * 100),
			RunsPerS: benchlab.Round((y.runs - x.runs) / sec),
			WaitPct:  benchlab.Round((y.waitNs - x.waitNs) / 1e9 / sec * 100),
		}
		if t.UserPct+t.SysPct >= 1 {
			out = append(out, t)
		}
	}
	slices.SortFunc(out, func(p, q ThreadCPU) int { return cmp.Compare(q.UserPct+q.SysPct, p.UserPct+p.SysPct) })
	return out
}

func printTable(rep Report) {
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "variant\tmsgs/s\tdecisions/s\tsched CPU %%\tcritical avg µs\tcritical p99 µs\tidle avg µs\tidle p99 µs\tplain loaded avg µs\tplain loaded p99 µs\t\n")
	for _, name := range rep.Order {
		v := rep.Variants[name]
		if v == nil {
			continue
		}
		if v.Throughput == 0 {
			fmt.Fprintf(tw, "%s\t%s\t\t\t\t\t\t\t\t\t\n", name, v.Error)
			continue
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.1f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t\n", name, v.Throughput, v.DecisionsPerS, v.LoopCPUPct,
			v.CriticalAvgUs, v.CriticalP99Us, v.IdleAvgUs, v.IdleP99Us, v.PlainAvgUs, v.PlainP99Us)
	}
	tw.Flush()
	for _, name := range rep.Order {
		if v := rep.Variants[name]; v != nil && v.Error != "" && v.Throughput > 0 {
			fmt.Printf("%s: %s\n", name, v.Error)
		}
	}
	for _, name := range rep.Order {
		if v := rep.Variants[name]; v != nil && len(v.Threads) > 0 {
			fmt.Printf("%s: its threads during messaging (%% of one CPU user/sys, switched in /s, %% waiting):", name)
			for _, t := range v.Threads {
				fmt.Printf(" %d %.1f/%.1f %.0f/s %.1f;", t.TID, t.UserPct, t.SysPct, t.RunsPerS, t.WaitPct)
			}
			fmt.Println()
		}
	}
	fmt.Printf("user-space throughput: %.1f %% of kernel mode (target >= 95); critical avg: %.2fx kernel mode (target <= 1.2)\n",
		rep.UserVsKernelPct, rep.CriticalAvgRatio)
}
