// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"
)

// workload is one benchmark every variant runs. run returns the metrics it
// measured (merge.go's keys), partial ones too when it fails midway.
type workload struct {
	name string
	run  func(r *VariantRun) (map[string]float64, error)
}

// workloads in the order each variant runs them: latency first (the probe,
// a periodic timer), then throughput of tasks that wake each other
// (messaging, pipe, hackbench), then a real server. Only the probe, the
// timer and nginx share the CPUs with hogs.
var workloads = []workload{
	{"probe", probeWorkload},
	{"cyclictest", cyclictestWorkload},
	{"messaging", messagingWorkload},
	{"pipe", pipeWorkload},
	{"hackbench", hackbenchWorkload},
	{"nginx", nginxWorkload},
}

func workloadNames() []string {
	var names []string
	for _, w := range workloads {
		names = append(names, w.name)
	}
	return names
}

// errorKeys are the keys of VariantRun.Errors: the workloads', and the
// scx_layered check's.
func errorKeys() []string { return append(workloadNames(), "layered") }

func selectWorkloads(list string) ([]workload, error) {
	if list == "" {
		return workloads, nil
	}
	var ws []workload
	for _, name := range strings.Split(list, ",") {
		i := slices.IndexFunc(workloads, func(w workload) bool { return w.name == name })
		if i < 0 {
			return nil, fmt.Errorf("unknown workload %q (have %s)", name, strings.Join(workloadNames(), ","))
		}
		ws = append(ws, workloads[i])
	}
	return ws, nil
}

// run runs a tool to completion, or kills it (and whatever it forked) after
// timeout, and returns its combined output.
func run(timeout time.Duration, name string, args ...string) ([]byte, error) {
	if _, err := exec.LookPath(name); err != nil {
		return nil, fmt.Errorf("%s not found (make deps installs it): %w", name, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		err = fmt.Errorf("killed after %v", timeout)
	}
	if err != nil {
		return out, fmt.Errorf("%s: %w: %s", name, err, tail(out, 400))
	}
	return out, nil
}

func tail(b []byte, n int) string {
	return strings.TrimSpace(string(b[max(0, len(b)-n):]))
}
