// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/swiftlane/swiftlane/bench/internal/benchlab"
)

// ProbeResult is `swiftlane probe rtt --json`'s report of one phase.
type ProbeResult struct {
	AvgUs    float64   `json:"avg_us,omitempty"`
	P50Us    float64   `json:"p50_us,omitempty"`
	P90Us    float64   `json:"p90_us,omitempty"`
	P99Us    float64   `json:"p99_us,omitempty"`
	MaxUs    float64   `json:"max_us,omitempty"`
	Samples  int       `json:"samples,omitempty"`
	Timeouts int       `json:"timeouts,omitempty"`
	RTTUs    []float64 `json:"rtt_us,omitempty"`
	// Where each round trip's reply was sent and read (internal/probe).
	SameCPUPct float64 `json:"same_cpu_pct"`
	ClientCPU  []int   `json:"client_cpu,omitempty"`
	ServerCPU  []int   `json:"server_cpu,omitempty"`
	// Hog rates of the loaded phase, from stress-ng's metrics.
	HogOpsPerS    float64 `json:"hog_ops_per_s,omitempty"`
	HogOpsPerCPUS float64 `json:"hog_ops_per_cpu_s,omitempty"`
}

// probeWorkload times the UDP echo probe (two processes over loopback, the
// shape of a UE ping through a gNB) on the idle machine, then beside CPU
// hogs; the hogs' work per CPU-second over that phase says what the
// latency cost them.
func probeWorkload(r *VariantRun) (map[string]float64, error) { return probePhases(r, true) }

// probePhases is probeWorkload; without hogMetrics it stops the hogs when
// the probe ends instead of waiting out their margin for stress-ng's
// metrics (the demo's rounds need only the latency).
func probePhases(r *VariantRun, hogMetrics bool) (map[string]float64, error) {
	m := map[string]float64{}
	if loadProfile.serverFirst && !sharedEcho {
		stop, err := startEcho()
		if err != nil {
			return m, err
		}
		sharedEcho = true
		defer func() { stop(); sharedEcho = false }()
	}
	idle, err := probe(false)
	if err != nil {
		return m, fmt.Errorf("idle: %w", err)
	}
	idle.RTTUs, idle.ClientCPU, idle.ServerCPU = nil, nil, nil // the plot shows the loaded phase; keep the file small
	r.ProbeIdle = idle
	m["probe_idle_avg_us"], m["probe_idle_p99_us"] = idle.AvgUs, idle.P99Us

	// Longer than the probe's phase: starting the probe's two processes
	// beside the hogs takes a while under TCG. Without the metrics the hogs
	// are stopped when the probe ends, so a margin for a starved guest
	// (a busy host) costs nothing.
	margin := 5 * time.Second
	if !hogMetrics {
		margin = time.Minute
	}
	hog, err := startHogs(*phase + margin)
	if err != nil {
		return m, err
	}
	defer hog.stop()
	end := func() {}
	if r.watchLoaded != nil {
		end = r.watchLoaded(r)
	}
	loaded, err := probe(true)
	end()
	if err != nil {
		return m, fmt.Errorf("loaded: %w", err)
	}
	r.ProbeLoaded = loaded
	m["probe_loaded_avg_us"], m["probe_loaded_p99_us"] = loaded.AvgUs, loaded.P99Us
	m["probe_idle_same_cpu_pct"], m["probe_loaded_same_cpu_pct"] = idle.SameCPUPct, loaded.SameCPUPct
	if !hogMetrics {
		return m, nil
	}
	// stress-ng writes its metrics when its timeout ends it.
	perReal, perCPU, err := hog.wait()
	if err != nil {
		return m, err
	}
	loaded.HogOpsPerS, loaded.HogOpsPerCPUS = perReal, perCPU
	m["hog_ops_per_s"], m["hog_ops_per_cpu_s"] = perReal, perCPU
	return m, nil
}

// sharedEcho: an echo server started by startEcho serves every phase (the
// demo's rounds: starting a 40 MB Go binary under a starved TCG guest took
// up to 30 s).
var sharedEcho bool

// probe runs the UDP echo pair as two swiftlane processes.
func probe(raw bool) (*ProbeResult, error) {
	if !sharedEcho {
		stop, err := startEcho()
		if err != nil {
			return nil, err
		}
		defer stop()
	}
	res := filepath.Join(os.TempDir(), fmt.Sprintf("rtt-%d.json", time.Now().UnixNano()))
	args := []string{"probe", "rtt", "--target", "127.0.0.1:7777",
		"--samples", fmt.Sprint(*samples), "--duration", phase.String(), "--interval", interval.String(),
		"--timeout", "2s", "--json", res}
	if raw {
		args = append(args, "--raw")
	}
	if b, err := exec.Command(*swiftlane, args...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("probe: %v: %s", err, b)
	}
	b, err := os.ReadFile(res)
	if err != nil {
		return nil, err
	}
	var v ProbeResult
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, err
	}
	if v.Samples == 0 {
		return nil, fmt.Errorf("probe got no replies (%d timeouts)", v.Timeouts)
	}
	return &v, nil
}

// startEcho starts the probe's echo server and returns once it listens,
// so the first round trips do not time out against a server still starting.
func startEcho() (stop func(), err error) {
	ctx, cancel := context.WithCancel(context.Background())
	echo := exec.CommandContext(ctx, *swiftlane, "probe", "echo", "--listen", "127.0.0.1:7777")
	stderr, err := echo.StderrPipe()
	if err != nil {
		cancel()
		return nil, err
	}
	if err := echo.Start(); err != nil {
		cancel()
		return nil, err
	}
	stop = func() { cancel(); echo.Wait() }
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "probe echo: listening on") {
			// Drain the rest, or a write to a full pipe would block it.
			go io.Copy(io.Discard, stderr)
			return stop, nil
		}
	}
	stop()
	return nil, fmt.Errorf("probe echo exited before listening")
}

// nHogs is how many CPU hogs saturate the machine: two per CPU, so every
// CPU always has one waiting.
func nHogs() int { return 2 * runtime.NumCPU() }

// hogArgs is stress-ng's command line for nHogs CPU hogs for d seconds,
// their metrics into yamlPath.
func hogArgs(d time.Duration, yamlPath string) []string {
	// Not --quiet: that also drops the metrics from the YAML report.
	return []string{"--temp-path", os.TempDir(), "--cpu", fmt.Sprint(nHogs()),
		"--cpu-method", *hogMethod, "--timeout", stressTimeout(d),
		"--metrics-brief", "--yaml", yamlPath}
}

func stressTimeout(d time.Duration) string {
	return fmt.Sprintf("%ds", int(d.Round(time.Second).Seconds()))
}

// hogs is stress-ng keeping every CPU busy for a while, and the profile's
// background beside it (none in the default profile).
type hogs struct {
	cpu, background *stressNG
	yaml            string
}

// stressNG is one running stress-ng process.
type stressNG struct {
	cmd  *exec.Cmd
	done chan error
}

// startHogs starts nHogs CPU hogs and the profile's background for d and
// returns once all of their workers run.
func startHogs(d time.Duration) (*hogs, error) {
	h := &hogs{yaml: filepath.Join(os.TempDir(), fmt.Sprintf("hogs-%d.yaml", time.Now().UnixNano()))}
	var err error
	if h.cpu, err = startStressNG(hogArgs(d, h.yaml), nHogs()); err != nil {
		return nil, err
	}
	if loadProfile.background != nil {
		args, workers := loadProfile.background(runtime.NumCPU())
		args = append([]string{"--temp-path", os.TempDir(), "--quiet", "--timeout", stressTimeout(d)}, args...)
		if h.background, err = startStressNG(args, workers); err != nil {
			h.stop()
			return nil, fmt.Errorf("profile %s's background: %w", loadProfile.name, err)
		}
	}
	return h, nil
}

// startStressNG starts stress-ng with args and returns once its workers
// (the main process's children) run.
func startStressNG(args []string, workers int) (*stressNG, error) {
	s := &stressNG{cmd: exec.Command("stress-ng", args...), done: make(chan error, 1)}
	// A group of its own, so stop reaches every worker and what they fork.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("stress-ng: %w", err)
	}
	go func() { s.done <- s.cmd.Wait() }()
	if err := benchlab.WaitChildren(s.cmd.Process.Pid, workers, 30*time.Second); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

// wait waits for the hogs' timeout and returns their bogo ops per second of
// real time and per second of the CPU time they got (user + system).
func (h *hogs) wait() (perReal, perCPU float64, err error) {
	select {
	case err = <-h.cpu.done:
		h.cpu.done <- err
	case <-time.After(time.Minute + time.Duration(float64(*phase)*2)):
		return 0, 0, fmt.Errorf("stress-ng did not end at its timeout")
	}
	if err != nil {
		return 0, 0, fmt.Errorf("stress-ng: %w", err)
	}
	b, err := os.ReadFile(h.yaml)
	if err != nil {
		return 0, 0, fmt.Errorf("stress-ng metrics: %w", err)
	}
	return parseHogYAML(b)
}

// stop ends the hogs and their background if they still run.
func (h *hogs) stop() {
	if h.background != nil {
		h.background.stop()
	}
	h.cpu.stop()
}

// stop ends stress-ng if it still runs (SIGTERM to the group, then SIGKILL).
func (s *stressNG) stop() {
	select {
	case err := <-s.done:
		s.done <- err
		return
	default:
	}
	syscall.Kill(-s.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case err := <-s.done:
		s.done <- err
	case <-time.After(10 * time.Second):
		syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		s.done <- <-s.done
	}
}

// parseHogYAML reads the cpu stressor's rates from stress-ng's YAML report.
func parseHogYAML(b []byte) (perReal, perCPU float64, err error) {
	var doc struct {
		Metrics []map[string]any `yaml:"metrics"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return 0, 0, fmt.Errorf("stress-ng metrics: %w", err)
	}
	num := func(m map[string]any, k string) float64 {
		switch v := m[k].(type) {
		case float64:
			return v
		case int:
			return float64(v)
		}
		return 0
	}
	for _, m := range doc.Metrics {
		if m["stressor"] != "cpu" {
			continue
		}
		perReal, perCPU = num(m, "bogo-ops-per-second-real-time"), num(m, "bogo-ops-per-second-usr-sys-time")
		if cpu := num(m, "user-time") + num(m, "system-time"); perCPU == 0 && cpu > 0 {
			perCPU = num(m, "bogo-ops") / cpu
		}
		if perCPU > 0 {
			return perReal, perCPU, nil
		}
	}
	return 0, 0, fmt.Errorf("no cpu stressor rate in stress-ng's metrics: %.200q", b)
}
