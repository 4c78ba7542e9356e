// SPDX-License-Identifier: Apache-2.0

package main

import (
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/swiftlane/swiftlane/bench/internal/benchlab"
)

const noStrategies = "strategies: []\n"

// criticalStrategies make the latency-sensitive side of each workload
// critical: both probe processes, and nginx (the master and its workers; a
// worker's command line is "nginx: worker process", the master's executable
// /usr/sbin/nginx). Only those two workloads run these processes.
const criticalStrategies = `strategies:
  - name: probe
    class: critical
    command_regex: 'swiftlane probe'
  - name: nginx
    class: critical
    command_regex: '^nginx: |/nginx$'
    inherit: true
`

// layeredConfig is scx_layered's closest equivalent of criticalStrategies:
// the same processes (by comm) in a layer that preempts the other one.
//
//go:embed layered.json
var layeredConfig []byte

const metricsAddr = "127.0.0.1:9462"

// scheduler is a running sched_ext scheduler process.
type scheduler struct {
	*benchlab.Scheduler
	ops     string // as the kernel names it in /sys/kernel/sched_ext/root/ops
	metrics bool   // serves swiftlane's metrics on metricsAddr
	// watchLoaded watches the scheduler's own stats through the probe's
	// loaded phase (VariantRun.watchLoaded).
	watchLoaded func(r *VariantRun) (end func())
}

func startSwiftlane(config string) func() (*scheduler, error) {
	return func() (*scheduler, error) { return startSwiftlaneBin(*swiftlane, config) }
}

// startTrial is an optional variant "trial" or "trial2": the binary its
// flag names (a build under trial beside the tree's), with the config its
// -config flag adds.
func startTrial(name string, bin, config *string) func() (*scheduler, error) {
	return func() (*scheduler, error) {
		if *bin == "" {
			return nil, fmt.Errorf("variant %s needs -%s BIN", name, name)
		}
		return startSwiftlaneBin(*bin, *config+"\n"+noStrategies)
	}
}

// startFloor is the optional variant "sched_ext-floor": this binary with
// -floor-scheduler.
func startFloor() (*scheduler, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return startScheduler(self, "-floor-scheduler")
}

func startSwiftlaneBin(bin, config string) (*scheduler, error) {
	cfg, err := benchlab.WriteConfig(config)
	if err != nil {
		return nil, err
	}
	s, err := startScheduler(bin, "run", "--metrics-addr", metricsAddr, "--config", cfg)
	if s != nil {
		s.metrics = true
	}
	return s, err
}

func startPeer(peer string, args ...string) func() (*scheduler, error) {
	return func() (*scheduler, error) {
		bin := filepath.Join(*peersDir, peer)
		if _, err := os.Stat(bin); err != nil {
			return nil, fmt.Errorf("%s not built: %s", peer, benchlab.PeerError(*peerErrs, peer))
		}
		return startScheduler(bin, args...)
	}
}

func startLayered() (*scheduler, error) {
	path, config := *layered, layeredConfig
	if path != "" {
		var err error
		if config, err = os.ReadFile(path); err != nil {
			return nil, fmt.Errorf("-layered-config: %w", err)
		}
	} else {
		f, err := os.CreateTemp("", "layered-*.json")
		if err != nil {
			return nil, err
		}
		_, err = f.Write(layeredConfig)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, err
		}
		path = f.Name()
	}
	// "f:" makes scx_layered read the specification from a file.
	s, err := startPeer("scx_layered", "f:"+path)()
	if s != nil {
		s.watchLoaded = func(r *VariantRun) func() {
			end := watchLayered(*layeredSt, config, time.Second)
			return func() {
				r.Layered = end()
				if !r.Layered.ProbeInCritical {
					r.Errors["layered"] = r.Layered.Verdict
				}
			}
		}
	}
	return s, err
}

// startScheduler starts a sched_ext scheduler and waits until the kernel
// reports it enabled.
func startScheduler(bin string, args ...string) (*scheduler, error) {
	b, err := benchlab.StartScheduler(90*time.Second, bin, args...)
	if err != nil {
		return nil, err
	}
	s := &scheduler{Scheduler: b}
	_, s.ops = benchlab.SchedState()
	return s, nil
}

// attached says why the scheduler is no longer the kernel's, if it is not:
// the kernel ejected it (watchdog, error) or the process died.
func (s *scheduler) attached() error {
	select {
	case err := <-s.Exited:
		s.Exited <- err
		return fmt.Errorf("%s exited (%v): %s", s.Name, err, s.Tail())
	default:
	}
	if state, ops := benchlab.SchedState(); state != "enabled" || ops != s.ops {
		return fmt.Errorf("sched_ext is %q (%s), not %s: the kernel ejected it: %s", state, ops, s.ops, s.Tail())
	}
	return nil
}

// scrapeCounters reads swiftlane's counters and run-queue wait per class
// (count and average; the buckets stay out of the JSON).
func scrapeCounters() map[string]float64 {
	out := benchlab.Scrape(metricsAddr)
	for k := range out {
		if strings.Contains(k, ".le.") {
			delete(out, k)
		}
	}
	return out
}
