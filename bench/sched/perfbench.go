// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/swiftlane/swiftlane/bench/internal/benchlab"
)

// Throughput of tasks that wake each other, on the otherwise idle machine:
// what every other process on the node pays for the scheduler.

// runTimeout bounds one run of a throughput tool: minutes under TCG at most.
const runTimeout = 5 * time.Minute

// messagingWorkload runs `perf bench sched messaging` (groups of 20 sender
// and 20 receiver processes over socketpairs) -runs times, each under
// `perf stat -a` counting context switches and migrations system-wide:
// those explain the throughput.
func messagingWorkload(*VariantRun) (map[string]float64, error) {
	var rates, ctxs, migs []float64
	m := map[string]float64{}
	defer func() {
		if len(rates) > 0 {
			m["messaging_msgs_per_s"] = benchlab.Median(rates)
		}
		if len(ctxs) > 0 {
			m["ctx_switches_per_s"] = benchlab.Median(ctxs)
		}
		if len(migs) > 0 {
			m["migrations_per_s"] = benchlab.Median(migs)
		}
	}()
	// Every sender sends -loops messages to every receiver of its group.
	msgs := float64(*groups * 20 * 20 * *loops)
	for i := 0; i < *runs; i++ {
		stat := filepath.Join(os.TempDir(), fmt.Sprintf("perf-stat-%d.csv", time.Now().UnixNano()))
		ctxt0 := procCtxt()
		began := time.Now()
		out, err := run(runTimeout, "perf", "stat", "-a", "-x,", "-o", stat, "-e", "context-switches,cpu-migrations", "--",
			"perf", "bench", "sched", "messaging", "-g", strconv.Itoa(*groups), "-l", strconv.Itoa(*loops))
		// The rates are over perf stat's whole span (the groups' start-up
		// and exit included), as its counts are.
		wall := time.Since(began).Seconds()
		if err != nil {
			return m, err
		}
		secs, err := totalTime(out)
		if err != nil {
			return m, fmt.Errorf("perf bench sched messaging: %w", err)
		}
		rates = append(rates, msgs/secs)
		b, _ := os.ReadFile(stat)
		counts := parsePerfStat(b)
		if n, ok := counts["context-switches"]; ok {
			ctxs = append(ctxs, n/wall)
		} else if ctxt1 := procCtxt(); ctxt0 > 0 && ctxt1 > ctxt0 {
			ctxs = append(ctxs, (ctxt1-ctxt0)/wall) // no perf events: the kernel's own count
		}
		if n, ok := counts["cpu-migrations"]; ok {
			migs = append(migs, n/wall)
		}
	}
	return m, nil
}

// pipeWorkload runs `perf bench sched pipe`: two processes passing a token
// through a pipe, a wakeup each way per operation.
func pipeWorkload(*VariantRun) (map[string]float64, error) {
	var rates []float64
	m := map[string]float64{}
	defer func() {
		if len(rates) > 0 {
			m["pipe_ops_per_s"] = benchlab.Median(rates)
		}
	}()
	for i := 0; i < *runs; i++ {
		out, err := run(runTimeout, "perf", "bench", "sched", "pipe", "-l", strconv.Itoa(*pipeLoops))
		if err != nil {
			return m, err
		}
		r, err := opsPerSec(out)
		if err != nil {
			return m, fmt.Errorf("perf bench sched pipe: %w", err)
		}
		rates = append(rates, r)
	}
	return m, nil
}

// hackbenchWorkload runs rt-tests' hackbench with threads over pipes (perf's
// messaging above covers processes over sockets), same groups and loops.
func hackbenchWorkload(*VariantRun) (map[string]float64, error) {
	var times []float64
	m := map[string]float64{}
	defer func() {
		if len(times) > 0 {
			m["hackbench_s"] = benchlab.Median(times)
		}
	}()
	for i := 0; i < *runs; i++ {
		out, err := run(runTimeout, "hackbench", "--threads", "--pipe", "-g", strconv.Itoa(*groups), "-l", strconv.Itoa(*loops))
		if err != nil {
			return m, err
		}
		t, err := hackbenchTime(out)
		if err != nil {
			return m, fmt.Errorf("hackbench: %w", err)
		}
		times = append(times, t)
	}
	return m, nil
}

var (
	totalTimeRE = regexp.MustCompile(`Total time: ([0-9.]+) \[sec\]`)
	opsPerSecRE = regexp.MustCompile(`(?m)^\s*([0-9.]+) ops/sec`)
	hackbenchRE = regexp.MustCompile(`(?m)^Time: ([0-9.]+)`)
)

func totalTime(out []byte) (float64, error) { return positive(totalTimeRE, out) }
func opsPerSec(out []byte) (float64, error) { return positive(opsPerSecRE, out) }
func hackbenchTime(out []byte) (float64, error) {
	return positive(hackbenchRE, out)
}

// positive is re's first group in out as a number above zero.
func positive(re *regexp.Regexp, out []byte) (float64, error) {
	m := re.FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("no %q in %q", re, tail(out, 300))
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("bad %q in %q", m[0], tail(out, 300))
	}
	return v, nil
}

// parsePerfStat reads `perf stat -x,` output: value,unit,event,... per
// line. Events perf could not count ("<not counted>", "<not supported>")
// are left out.
func parsePerfStat(b []byte) map[string]float64 {
	counts := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Split(sc.Text(), ",")
		if len(f) < 3 || strings.HasPrefix(f[0], "#") {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue
		}
		// Modifiers (":u", ":k") are not part of the name asked for.
		counts[strings.SplitN(f[2], ":", 2)[0]] = v
	}
	return counts
}

// procCtxt is the kernel's count of context switches since boot.
func procCtxt() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "ctxt "); ok {
			n, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return n
		}
	}
	return 0
}
