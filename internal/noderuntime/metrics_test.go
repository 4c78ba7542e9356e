// SPDX-License-Identifier: Apache-2.0

package noderuntime

import (
	"errors"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/swiftlane/swiftlane/internal/apitypes"
	"github.com/swiftlane/swiftlane/internal/applier"
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

// matchedApplier is an Applier whose one critical strategy matches this
// test's own process.
func matchedApplier(t *testing.T) *applier.Applier {
	t.Helper()
	critical := strategy.Critical
	set, err := strategy.Compile([]strategy.Strategy{{Name: "me", Class: &critical, PID: os.Getpid()}})
	if err != nil {
		t.Fatal(err)
	}
	a := applier.New(applier.NewRecorder(), "/proc", "/sys/fs/cgroup", nil)
	if err := a.SetStrategies(set); err != nil {
		t.Fatal(err)
	}
	return a
}

func kernelStats(st sched.Stats, err error, a *applier.Applier) prometheus.Collector {
	return statsCollector[sched.Stats]{read: func() (sched.Stats, error) { return st, err }, export: exportKernel, a: a}
}

func userStats(st usersched.Stats, err error, a *applier.Applier) prometheus.Collector {
	return statsCollector[usersched.Stats]{read: func() (usersched.Stats, error) { return st, err }, export: exportUser, a: a}
}

// checkCollector compares what c exports with want and lints its names.
func checkCollector(t *testing.T, c prometheus.Collector, want map[string]float64) {
	t.Helper()
	got, _ := gather(t, c)
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
	if problems, err := testutil.CollectAndLint(c); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %+v", err, problems)
	}
}

func TestKernelMetrics(t *testing.T) {
	var st sched.Stats
	st.Enqueued[strategy.High] = 7
	st.DirectDispatch, st.HandoffDispatch, st.PreemptKicks, st.EventsDropped = 11, 3, 2, 1
	st.WaitCount[strategy.Normal], st.WaitHist[strategy.Normal][4] = 5, 5
	st.WaitMaxNs, st.QueuedShared = 250_000_000, 9
	checkCollector(t, kernelStats(st, nil, matchedApplier(t)), map[string]float64{
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
}

func TestUserMetrics(t *testing.T) {
	st := usersched.Stats{Sent: 20, Applied: 15, Stale: 2, Fallback: 4, SchedThread: 6, RoundTrips: 10, RoundTripSumNs: 5_000_000,
		PreemptKicks: 2, CriticalDemoted: 1, Loop: usersched.LoopStats{Iterations: 99}}
	checkCollector(t, userStats(st, nil, matchedApplier(t)), map[string]float64{
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
}

func TestCarrierMetrics(t *testing.T) {
	last := time.Unix(1_800_000_000, 500_000_000)
	list := []apitypes.Carrier{
		{PID: 4242, Command: "nr-gnb", Class: "critical", LastPacket: last, Packets: 9000},
		{PID: 77, Command: "upf", Class: "critical", LastPacket: last.Add(-time.Second), Packets: 10},
	}
	carriers := carrierCollector{func() ([]apitypes.Carrier, error) { return list, nil }}
	checkCollector(t, carriers, map[string]float64{
		"swiftlane_gtp_carriers": 2,
		"swiftlane_gtp_carrier_packets_total{class=critical,command=nr-gnb,pid=4242}":                 9000,
		"swiftlane_gtp_carrier_packets_total{class=critical,command=upf,pid=77}":                      10,
		"swiftlane_gtp_carrier_last_packet_timestamp_seconds{class=critical,command=nr-gnb,pid=4242}": 1_800_000_000.5,
	})
	// Counts unreadable: no packet counters (zeros would read as a reset),
	// the carriers still listed.
	got, _ := gather(t, carrierCollector{func() ([]apitypes.Carrier, error) { return list, errors.New("counts map gone") }})
	if _, ok := got["swiftlane_gtp_carrier_packets_total{class=critical,command=nr-gnb,pid=4242}"]; ok || got["swiftlane_gtp_carriers"] != 2 {
		t.Errorf("with unreadable counts: %v, want 2 carriers and no packet counters", got)
	}
	list = nil // a carrier that went idle leaves no series behind
	got, _ = gather(t, carriers)
	if len(got) != 1 || got["swiftlane_gtp_carriers"] != 0 {
		t.Errorf("without carriers: %v, want only swiftlane_gtp_carriers 0", got)
	}
}

// The names both modes export are one definition: same help text, so one
// dashboard (and `swiftlane stats`) reads either.
func TestSharedMetricsAreDefinedOnce(t *testing.T) {
	_, kernel := gather(t, kernelStats(sched.Stats{}, nil, matchedApplier(t)))
	_, user := gather(t, userStats(usersched.Stats{}, nil, matchedApplier(t)))
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
	gone := errors.New("map gone")
	for _, c := range []prometheus.Collector{kernelStats(sched.Stats{}, gone, nil), userStats(usersched.Stats{}, gone, nil)} {
		reg := prometheus.NewRegistry()
		reg.MustRegister(c)
		if _, err := reg.Gather(); err == nil || !strings.Contains(err.Error(), "map gone") {
			t.Errorf("%T: gather error %v", c, err)
		}
	}
}
