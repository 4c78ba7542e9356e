// SPDX-License-Identifier: Apache-2.0

// Command sched is the scheduler benchmark behind `make bench-sched` and
// `make demo`. It runs as root inside the VM lab, in one boot, and measures
// the UDP echo probe (the shape of a UE ping through a gNB) under each
// variant: the kernel's default scheduler idle and saturated, swiftlane
// saturated with and without a critical strategy for the probe, and peer
// sched_ext schedulers saturated. It writes bench/results/sched.json.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"gopkg.in/yaml.v3"

	"github.com/swiftlane/swiftlane/bench/internal/benchlab"
)

// Variant result, as issue "Scheduler core" specifies the JSON.
type Variant struct {
	AvgUs      float64   `json:"avg_us,omitempty"`
	P50Us      float64   `json:"p50_us,omitempty"`
	P90Us      float64   `json:"p90_us,omitempty"`
	P99Us      float64   `json:"p99_us,omitempty"`
	MaxUs      float64   `json:"max_us,omitempty"`
	Samples    int       `json:"samples,omitempty"`
	Timeouts   int       `json:"timeouts,omitempty"`
	HogOpsPerS float64   `json:"hog_ops_per_s,omitempty"`
	Error      string    `json:"error,omitempty"`
	RTTUs      []float64 `json:"rtt_us,omitempty"`
	// SchedCounters are swiftlane's own counters over the run, to explain it.
	SchedCounters map[string]float64 `json:"sched_counters,omitempty"`
	Description   string             `json:"description"`
}

type Report struct {
	Kernel   string              `json:"kernel"`
	CPUs     int                 `json:"cpus"`
	Date     string              `json:"date"`
	Note     string              `json:"note"`
	Order    []string            `json:"order"`
	Variants map[string]*Variant `json:"variants"`
}

var (
	swiftlane = flag.String("swiftlane", "build/swiftlane", "swiftlane binary")
	peersDir  = flag.String("peers", ".cache/peers/bin", "directory with scx_bpfland and scx_rustland")
	peerErrs  = flag.String("peer-errors", ".cache/peers/errors.json", "why a peer could not be built (written by lab/peers.sh)")
	out       = flag.String("out", "bench/results/sched.json", "JSON output")
	samples   = flag.Int("samples", 1000, "probe round trips per variant (at most)")
	duration  = flag.Duration("duration", 15*time.Second, "probe time budget per variant")
	interval  = flag.Duration("interval", time.Millisecond, "pause between round trips")
	only      = flag.String("variants", "", "comma-separated subset of variants (default: all)")
)

var all = []string{"eevdf-idle", "eevdf-loaded", "swiftlane-loaded", "swiftlane-critical-loaded", "scx_bpfland-loaded", "scx_rustland-loaded"}

func main() {
	flag.Parse()
	names := all
	if *only != "" {
		names = strings.Split(*only, ",")
	}
	rel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	rep := Report{
		Kernel: strings.TrimSpace(string(rel)), CPUs: runtime.NumCPU(), Date: time.Now().UTC().Format(time.RFC3339),
		Note:     "QEMU TCG guest: absolute times are inflated 20-50x and noisy; compare variants within this run only.",
		Order:    names,
		Variants: map[string]*Variant{},
	}
	for _, name := range names {
		fmt.Fprintf(os.Stderr, "bench: %s ...\n", name)
		v, err := runVariant(name)
		if err != nil {
			v = &Variant{Error: err.Error()}
			fmt.Fprintf(os.Stderr, "bench: %s: %v\n", name, err)
		}
		v.Description = describe[name]
		rep.Variants[name] = v
	}
	printTable(os.Stdout, rep)
	if err := benchlab.WriteJSON(*out, rep); err != nil {
		fail(err)
	}
}

var describe = map[string]string{
	"eevdf-idle":                "kernel default scheduler, idle machine",
	"eevdf-loaded":              "kernel default scheduler, stress-ng --cpu 2xCPUs",
	"swiftlane-loaded":          "swiftlane, no strategies, stress-ng --cpu 2xCPUs",
	"swiftlane-critical-loaded": "swiftlane, probe processes class critical, stress-ng --cpu 2xCPUs",
	"scx_bpfland-loaded":        "scx_bpfland (crates.io), stress-ng --cpu 2xCPUs",
	"scx_rustland-loaded":       "scx_rustland (crates.io), stress-ng --cpu 2xCPUs",
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench:", err)
	os.Exit(1)
}

func runVariant(name string) (*Variant, error) {
	loaded := strings.HasSuffix(name, "-loaded")
	var stop func() error
	var err error
	switch {
	case strings.HasPrefix(name, "eevdf"):
		stop = func() error { return nil }
	case name == "swiftlane-loaded":
		stop, err = startScheduler(*swiftlane, "run", "--metrics-addr", metricsAddr, "--config", writeConfig("strategies: []\n"))
	case name == "swiftlane-critical-loaded":
		stop, err = startScheduler(*swiftlane, "run", "--metrics-addr", metricsAddr, "--config",
			writeConfig("strategies:\n  - name: probe\n    class: critical\n    command_regex: 'swiftlane probe'\n"))
	case strings.HasPrefix(name, "scx_"):
		peer := strings.TrimSuffix(name, "-loaded")
		bin := filepath.Join(*peersDir, peer)
		if _, serr := os.Stat(bin); serr != nil {
			return nil, fmt.Errorf("%s not built: %s", peer, peerError(peer))
		}
		stop, err = startScheduler(bin)
	default:
		return nil, fmt.Errorf("unknown variant %q", name)
	}
	if err != nil {
		return nil, err
	}
	defer stop()

	var hog *exec.Cmd
	hogYAML := filepath.Join(os.TempDir(), "hog-"+name+".yaml")
	if loaded {
		total := *duration + 4*time.Second
		// Not --quiet: that also drops the metrics from the YAML report.
		hog = exec.Command("stress-ng", "--temp-path", os.TempDir(), "--cpu", fmt.Sprint(2*runtime.NumCPU()),
			"--timeout", fmt.Sprintf("%ds", int(total.Seconds())), "--metrics-brief", "--yaml", hogYAML)
		if err := hog.Start(); err != nil {
			return nil, fmt.Errorf("stress-ng: %w", err)
		}
		defer hog.Process.Kill()
		time.Sleep(2 * time.Second) // let the hogs fill every CPU's queue
	}
	v, err := probe()
	if err != nil {
		return nil, err
	}
	if strings.HasPrefix(name, "swiftlane") {
		v.SchedCounters = scrapeCounters()
	}
	if hog != nil {
		if err := hog.Wait(); err != nil {
			return v, fmt.Errorf("stress-ng: %w", err)
		}
		v.HogOpsPerS = hogRate(hogYAML)
	}
	if err := stop(); err != nil {
		return v, fmt.Errorf("scheduler stopped badly: %w", err)
	}
	return v, nil
}

const metricsAddr = "127.0.0.1:9462"

// scrapeCounters reads swiftlane's counters and run-queue wait per class.
func scrapeCounters() map[string]float64 {
	resp, err := http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil
	}
	out := map[string]float64{}
	for name, f := range fams {
		if !strings.HasPrefix(name, "swiftlane_") {
			continue
		}
		for _, m := range f.Metric {
			key := strings.TrimPrefix(name, "swiftlane_")
			for _, l := range m.Label {
				key += "." + l.GetValue()
			}
			switch {
			case m.Counter != nil:
				out[key] = m.Counter.GetValue()
			case m.Gauge != nil:
				out[key] = m.Gauge.GetValue()
			case m.Histogram != nil && m.Histogram.GetSampleCount() > 0:
				out[key+".avg_us"] = m.Histogram.GetSampleSum() / float64(m.Histogram.GetSampleCount()) * 1e6
				out[key+".count"] = float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return out
}

func writeConfig(s string) string {
	f, err := benchlab.WriteConfig(s)
	if err != nil {
		fail(err)
	}
	return f
}

func peerError(peer string) string { return benchlab.PeerError(*peerErrs, peer) }

// startScheduler starts a sched_ext scheduler and waits until the kernel
// reports it enabled; stop detaches it and waits for the default scheduler.
func startScheduler(bin string, args ...string) (func() error, error) {
	cmd := exec.Command(bin, args...)
	logf, _ := os.CreateTemp("", "sched-*.log")
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group, with default signal dispositions.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	tail := func() string {
		b, _ := os.ReadFile(logf.Name())
		if len(b) > 600 {
			b = b[len(b)-600:]
		}
		return strings.TrimSpace(string(b))
	}
	err := benchlab.WaitState("enabled", 90*time.Second, func() error {
		select {
		case err := <-exited:
			return fmt.Errorf("%s exited before enabling (%v): %s", filepath.Base(bin), err, tail())
		default:
			return nil
		}
	})
	if err != nil {
		cmd.Process.Kill()
		return nil, fmt.Errorf("%s: %w: %s", filepath.Base(bin), err, tail())
	}
	stopped := false
	return func() error {
		if stopped {
			return nil
		}
		stopped = true
		cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(15 * time.Second):
				cmd.Process.Kill()
				<-exited
			}
		}
		return benchlab.WaitState("disabled", 30*time.Second, nil)
	}, nil
}

// probe runs the UDP echo pair as two swiftlane processes.
func probe() (*Variant, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	echo := exec.CommandContext(ctx, *swiftlane, "probe", "echo", "--listen", "127.0.0.1:7777")
	if err := echo.Start(); err != nil {
		return nil, err
	}
	defer func() { cancel(); echo.Wait() }()
	res := filepath.Join(os.TempDir(), fmt.Sprintf("rtt-%d.json", time.Now().UnixNano()))
	cmd := exec.Command(*swiftlane, "probe", "rtt", "--target", "127.0.0.1:7777",
		"--samples", fmt.Sprint(*samples), "--duration", duration.String(), "--interval", interval.String(),
		"--timeout", "2s", "--raw", "--json", res)
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("probe: %v: %s", err, b)
	}
	b, err := os.ReadFile(res)
	if err != nil {
		return nil, err
	}
	var v Variant
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, err
	}
	if v.Samples == 0 {
		return nil, fmt.Errorf("probe got no replies (%d timeouts)", v.Timeouts)
	}
	return &v, nil
}

// hogRate reads stress-ng's bogo ops/s (real time) from its YAML report.
func hogRate(path string) float64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	var doc struct {
		Metrics []map[string]any `yaml:"metrics"`
	}
	if yaml.Unmarshal(b, &doc) != nil {
		return 0
	}
	var sum float64
	for _, m := range doc.Metrics {
		for _, k := range []string{"bogo-ops-per-second-real-time", "bogo-ops-per-second-usr-sys-time"} {
			if v, ok := m[k].(float64); ok {
				sum += v
				break
			}
		}
	}
	return sum
}

func printTable(w *os.File, rep Report) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "variant\tsamples\tavg µs\tp50 µs\tp90 µs\tp99 µs\tmax µs\thog ops/s\tvs eevdf-loaded avg\t\n")
	base := rep.Variants["eevdf-loaded"]
	for _, name := range rep.Order {
		v := rep.Variants[name]
		if v == nil {
			continue
		}
		if v.Error != "" {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t-\t-\t%s\t\n", name, v.Error)
			continue
		}
		ratio := "-"
		if base != nil && base.Error == "" && v.AvgUs > 0 {
			ratio = fmt.Sprintf("%.1fx better", base.AvgUs/v.AvgUs)
		}
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%s\t\n", name, v.Samples, v.AvgUs, v.P50Us, v.P90Us, v.P99Us, v.MaxUs, v.HogOpsPerS, ratio)
	}
	tw.Flush()
}
