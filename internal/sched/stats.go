// SPDX-License-Identifier: Apache-2.0

package sched

import (
	"fmt"
	"math"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/swiftlane/swiftlane/internal/strategy"
)

// NrClasses and HistBuckets mirror enum swl_class and SWL_HIST_BUCKETS.
const (
	NrClasses   = 4
	HistBuckets = 28
)

// Stats are the scheduler's counters summed over CPUs.
type Stats struct {
	Enqueued          [NrClasses]uint64
	DirectDispatch    uint64
	SharedDispatch    uint64
	CriticalDispatch  uint64
	KthreadDispatch   uint64
	OverdueDispatch   uint64
	HandoffDispatch   uint64
	PreemptKicks      uint64
	WakeupPreempts    uint64
	CriticalDemoted   uint64
	StarvationRescues uint64
	EventsDropped     uint64
	CPUHotplug        uint64
	WaitCount         [NrClasses]uint64
	WaitSumNs         [NrClasses]uint64
	// WaitHist[c][i] counts run-queue waits in [2^(i-1), 2^i) µs (bucket 0: < 1 µs).
	WaitHist       [NrClasses][HistBuckets]uint64
	WaitMaxNs      uint64 // longest run-queue wait of any task so far
	QueuedCritical uint64
	QueuedShared   uint64
}

// BucketUpperSeconds is the upper bound of wait histogram bucket i.
func BucketUpperSeconds(i int) float64 {
	return math.Ldexp(1, i) * 1e-6
}

// ReadStats sums the per-CPU counters.
func (s *Scheduler) ReadStats() (Stats, error) {
	var per []swiftlaneSwlStats
	if err := s.objs.Stats.Lookup(uint32(0), &per); err != nil {
		return Stats{}, fmt.Errorf("read stats: %w", err)
	}
	var t Stats
	for _, c := range per {
		for i := range NrClasses {
			t.Enqueued[i] += c.Enqueued[i]
			t.WaitCount[i] += c.WaitCount[i]
			t.WaitSumNs[i] += c.WaitSumNs[i]
			for b := range HistBuckets {
				t.WaitHist[i][b] += c.WaitHist[i][b]
			}
		}
		t.DirectDispatch += c.DirectDispatch
		t.SharedDispatch += c.SharedDispatch
		t.CriticalDispatch += c.CriticalDispatch
		t.KthreadDispatch += c.KthreadDispatch
		t.OverdueDispatch += c.OverdueDispatch
		t.HandoffDispatch += c.HandoffDispatch
		t.PreemptKicks += c.PreemptKicks
		t.WakeupPreempts += c.WakeupPreempts
		t.CriticalDemoted += c.CriticalDemoted
		t.StarvationRescues += c.StarvationRescues
		t.EventsDropped += c.EventsDropped
		t.CPUHotplug += c.CpuHotplug
		t.WaitMaxNs = max(t.WaitMaxNs, c.WaitMaxNs)
	}
	_ = s.objs.QueuedCritical.Get(&t.QueuedCritical)
	_ = s.objs.QueuedShared.Get(&t.QueuedShared)
	return t, nil
}

// Metric descriptions: the one place names and help texts are defined.
var (
	descEnqueued = prometheus.NewDesc("swiftlane_enqueued_total", "Tasks queued, by scheduling class.", []string{"class"}, nil)
	descDispatch = prometheus.NewDesc("swiftlane_dispatch_total", "Tasks handed to a CPU, by path: direct (idle CPU at wakeup), critical, shared, kthread, overdue (waited longer than the starvation bound), handoff (critical wakee queued on its critical waker's CPU).", []string{"path"}, nil)
	descPreempt  = prometheus.NewDesc("swiftlane_preempt_kicks_total", "CPUs preempted to run a critical task.", nil, nil)
	descWakePre  = prometheus.NewDesc("swiftlane_wakeup_preempts_total", "Woken tasks that preempted a later-deadline task on their CPU.", nil, nil)
	descDemoted  = prometheus.NewDesc("swiftlane_critical_demoted_total", "Critical tasks queued as normal because they used up their CPU budget.", nil, nil)
	descStarve   = prometheus.NewDesc("swiftlane_starvation_rescues_total", "Times the shared queue was served ahead of critical work to avoid starvation.", nil, nil)
	descDropped  = prometheus.NewDesc("swiftlane_events_dropped_total", "Process events lost because the ring buffer was full.", nil, nil)
	descHotplug  = prometheus.NewDesc("swiftlane_cpu_hotplug_total", "CPU online/offline transitions.", nil, nil)
	descQueued   = prometheus.NewDesc("swiftlane_queue_depth", "Tasks waiting in a shared queue, as last seen by a dispatching CPU.", []string{"queue"}, nil)
	descWait     = prometheus.NewDesc("swiftlane_runqueue_wait_seconds", "Time from runnable to running, by scheduling class.", []string{"class"}, nil)
	// DescWaitMax is shared with the user-space mode's collector.
	DescWaitMax   = prometheus.NewDesc("swiftlane_runqueue_wait_max_seconds", "Longest time any task waited from runnable to running since the scheduler attached.", nil, nil)
	descProcesses = prometheus.NewDesc("swiftlane_strategy_processes", "Processes a strategy currently applies to, by class.", []string{"class"}, nil)
)

// Collector exports the scheduler's statistics to Prometheus.
type Collector struct {
	S *Scheduler
	A *strategy.Applier // optional
}

func (c Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descEnqueued, descDispatch, descPreempt, descWakePre, descDemoted, descStarve, descDropped, descHotplug, descQueued, descWait, DescWaitMax, descProcesses} {
		ch <- d
	}
}

func (c Collector) Collect(ch chan<- prometheus.Metric) {
	st, err := c.S.ReadStats()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(descEnqueued, err)
		return
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	for i := range NrClasses {
		cls := strategy.Class(i).String()
		counter(descEnqueued, st.Enqueued[i], cls)
		buckets := make(map[float64]uint64, HistBuckets)
		var cum uint64
		for b := range HistBuckets {
			cum += st.WaitHist[i][b]
			buckets[BucketUpperSeconds(b)] = cum
		}
		ch <- prometheus.MustNewConstHistogram(descWait, st.WaitCount[i], float64(st.WaitSumNs[i])/1e9, buckets, cls)
	}
	counter(descDispatch, st.DirectDispatch, "direct")
	counter(descDispatch, st.CriticalDispatch, "critical")
	counter(descDispatch, st.SharedDispatch, "shared")
	counter(descDispatch, st.KthreadDispatch, "kthread")
	counter(descDispatch, st.OverdueDispatch, "overdue")
	counter(descDispatch, st.HandoffDispatch, "handoff")
	counter(descPreempt, st.PreemptKicks)
	counter(descWakePre, st.WakeupPreempts)
	counter(descDemoted, st.CriticalDemoted)
	counter(descStarve, st.StarvationRescues)
	counter(descDropped, st.EventsDropped)
	counter(descHotplug, st.CPUHotplug)
	ch <- prometheus.MustNewConstMetric(DescWaitMax, prometheus.GaugeValue, float64(st.WaitMaxNs)/1e9)
	ch <- prometheus.MustNewConstMetric(descQueued, prometheus.GaugeValue, float64(st.QueuedCritical), "critical")
	ch <- prometheus.MustNewConstMetric(descQueued, prometheus.GaugeValue, float64(st.QueuedShared), "shared")
	if c.A != nil {
		var per [NrClasses]int
		for _, ap := range c.A.Applied() {
			if int(ap.Class) < NrClasses {
				per[ap.Class]++
			}
		}
		for i := range NrClasses {
			ch <- prometheus.MustNewConstMetric(descProcesses, prometheus.GaugeValue, float64(per[i]), strategy.Class(i).String())
		}
	}
}
