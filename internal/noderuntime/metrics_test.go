// SPDX-License-Identifier: Apache-2.0

package noderuntime

import (
	"errors"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/swiftlane/swiftlane/internal/sched"
	"github.com/swiftlane/swiftlane/internal/strategy"
	"github.com/swiftlane/swiftlane/usersched"
)

// gather collects c as a registry serves it: "name{label=value}" → value
// (histograms by their count), and each name's help text.
func gather(t *testing.T, c prometheus.Collector) (map[string]float64, map[string]string) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	values, help := map[string]float64{}, map[string]string{}
	for _, f := range fams {
		help[f.GetName()] = f.GetHelp()
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			key := f.GetName()
			if len(labels) > 0 {
				sort.Strings(labels)
				key += "{" + strings.Join(labels, ",") + "}"
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				values[key] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				values[key] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				values[key] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return values, help
}

// matchedApplier is an Applier whose one critical strategy matches one
// running process.
func matchedApplier(t *testing.T) *strategy.Applier {
	t.Helper()
	marker := "swiftlane-test-" + t.Name()
	proc := exec.Command("sh", "-c", "read _; : "+marker)
	stdin, err := proc.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := proc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); proc.Process.Kill(); proc.Wait() })
	critical := strategy.Critical
	set, err := strategy.Compile([]strategy.Strategy{{Name: "m", Class: &critical, CommandRegex: marker}})
	if err != nil {
		t.Fatal(err)
	}
	a := strategy.NewApplier(strategy.NewRecorder(), "/proc", "/sys/fs/cgroup", nil)
	if err := a.SetStrategies(set); err != nil {
		t.Fatal(err)
	}
	return a
}

func wantValues(t *testing.T, got map[string]float64, want map[string]float64) {
	t.Helper()
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
}

func TestKernelMetrics(t *testing.T) {
	var st sched.Stats
	st.Enqueued[strategy.High] = 7
	st.DirectDispatch, st.HandoffDispatch, st.PreemptKicks, st.EventsDropped = 11, 3, 2, 1
	st.WaitCount[strategy.Normal], st.WaitHist[strategy.Normal][4] = 5, 5
	st.WaitMaxNs, st.QueuedShared = 250_000_000, 9
	c := kernelCollector{read: func() (sched.Stats, error) { return st, nil }, a: matchedApplier(t)}
	got, _ := gather(t, c)
	wantValues(t, got, map[string]float64{
		"swiftlane_enqueued_total{class=high}":          7,
		"swiftlane_dispatch_total{path=direct}":         11,
		"swiftlane_dispatch_total{path=handoff}":        3,
		"swiftlane_preempt_kicks_total":                 2,
		"swiftlane_events_dropped_total":                1,
		"swiftlane_runqueue_wait_seconds{class=normal}": 5,
		"swiftlane_runqueue_wait_max_seconds":           0.25,
		"swiftlane_queue_depth{queue=shared}":           9,
		"swiftlane_strategy_processes{class=critical}":  1,
		"swiftlane_strategy_processes{class=normal}":    0,
	})
	if problems, err := testutil.CollectAndLint(c); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %+v", err, problems)
	}
}

func TestUserMetrics(t *testing.T) {
	st := usersched.Stats{Sent: 20, Applied: 15, Stale: 2, Fallback: 4, SchedThread: 6, RoundTrips: 10, RoundTripSumNs: 5_000_000,
		PreemptKicks: 2, CriticalDemoted: 1, Loop: usersched.LoopStats{Iterations: 99}}
	c := userCollector{read: func() (usersched.Stats, error) { return st, nil }, a: matchedApplier(t)}
	got, _ := gather(t, c)
	wantValues(t, got, map[string]float64{
		"swiftlane_dispatch_total{path=user}":          15,
		"swiftlane_dispatch_total{path=fallback}":      4,
		"swiftlane_dispatch_total{path=scheduler}":     6,
		"swiftlane_user_queued_total":                  20,
		"swiftlane_user_decisions_total{result=stale}": 2,
		"swiftlane_user_round_trip_seconds_total":      0.005,
		"swiftlane_user_loop_iterations_total":         99,
		"swiftlane_preempt_kicks_total":                2,
		"swiftlane_critical_demoted_total":             1,
		"swiftlane_strategy_processes{class=critical}": 1,
	})
	if problems, err := testutil.CollectAndLint(c); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %+v", err, problems)
	}
}

// The names both modes export are one definition: same help text, so one
// dashboard (and `swiftlane stats`) reads either.
func TestSharedMetricsAreDefinedOnce(t *testing.T) {
	_, kernel := gather(t, kernelCollector{read: func() (sched.Stats, error) { return sched.Stats{}, nil }, a: matchedApplier(t)})
	_, user := gather(t, userCollector{read: func() (usersched.Stats, error) { return usersched.Stats{}, nil }, a: matchedApplier(t)})
	shared := 0
	for name, h := range kernel {
		if uh, ok := user[name]; ok {
			shared++
			if uh != h {
				t.Errorf("%s: help differs between the modes:\n kernel: %s\n user:   %s", name, h, uh)
			}
		}
	}
	if shared < 6 {
		t.Errorf("%d names shared between the modes, want at least 6 (dispatch, preempt kicks, demotions, dropped events, longest wait, processes)", shared)
	}
}

// A failed read is reported as an invalid metric, not as a panic or a gap.
func TestMetricsReadError(t *testing.T) {
	for _, c := range []prometheus.Collector{
		kernelCollector{read: func() (sched.Stats, error) { return sched.Stats{}, errors.New("map gone") }},
		userCollector{read: func() (usersched.Stats, error) { return usersched.Stats{}, errors.New("map gone") }},
	} {
		reg := prometheus.NewRegistry()
		reg.MustRegister(c)
		if _, err := reg.Gather(); err == nil || !strings.Contains(err.Error(), "map gone") {
			t.Errorf("%T: gather error %v", c, fmt.Sprint(err))
		}
	}
}
