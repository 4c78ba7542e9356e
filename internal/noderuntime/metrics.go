// SPDX-License-Identifier: Apache-2.0

package noderuntime

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/swiftlane/swiftlane/internal/apitypes"
	"github.com/swiftlane/swiftlane/internal/applier"
	"github.com/swiftlane/swiftlane/internal/sched"
	"github.com/swiftlane/swiftlane/internal/strategy"
	"github.com/swiftlane/swiftlane/usersched"
)

// The node's metrics: the one place their names and help texts are
// defined. Both modes export the names they share under one definition, so
// one dashboard reads either.
var (
	descDispatch = prometheus.NewDesc("swiftlane_dispatch_total", "Tasks handed to a CPU, by path. "+
		"Kernel mode: direct (idle CPU at wakeup), critical, shared, kthread, overdue (waited longer than the starvation bound), handoff (critical wakee queued on its critical waker's CPU), rcu_reader (preempted inside an RCU read-side section, queued first). "+
		"User-space mode: user (a user-space decision), fallback (ring to user space full), rescued (user space stalled, or a task waited over 250 ms), critical, kthread, scheduler (the user-space scheduler's own threads), rcu_reader (as in kernel mode).",
		[]string{"path"}, nil)
	descPreempt   = prometheus.NewDesc("swiftlane_preempt_kicks_total", "CPUs preempted to run a critical task.", nil, nil)
	descDemoted   = prometheus.NewDesc("swiftlane_critical_demoted_total", "Critical tasks queued as normal because they used up their CPU budget.", nil, nil)
	descDropped   = prometheus.NewDesc("swiftlane_events_dropped_total", "Process events lost because the ring buffer was full.", nil, nil)
	descWaitMax   = prometheus.NewDesc("swiftlane_runqueue_wait_max_seconds", "Longest time any task waited from runnable to running since the scheduler attached.", nil, nil)
	descProcesses = prometheus.NewDesc("swiftlane_strategy_processes", "Processes a strategy currently applies to, by class.", []string{"class"}, nil)
	descUnmatch   = prometheus.NewDesc("swiftlane_strategies_unmatchable", "1 for each strategy that can match no process on this node, with the reason "+
		"(selectors_without_pod_source, cgroup_not_found).", []string{"strategy", "reason"}, nil)

	// Kernel mode only.
	descEnqueued = prometheus.NewDesc("swiftlane_enqueued_total", "Tasks queued, by scheduling class.", []string{"class"}, nil)
	descWakePre  = prometheus.NewDesc("swiftlane_wakeup_preempts_total", "Woken tasks that preempted a later-deadline task on their CPU.", nil, nil)
	descStarve   = prometheus.NewDesc("swiftlane_starvation_rescues_total", "Times the shared queue was served ahead of critical work to avoid starvation.", nil, nil)
	descHotplug  = prometheus.NewDesc("swiftlane_cpu_hotplug_total", "CPU online/offline transitions.", nil, nil)
	descQueued   = prometheus.NewDesc("swiftlane_queue_depth", "Tasks waiting in a shared queue, as last seen by a dispatching CPU.", []string{"queue"}, nil)
	descWait     = prometheus.NewDesc("swiftlane_runqueue_wait_seconds", "Time from runnable to running, by scheduling class.", []string{"class"}, nil)

	// User-space mode only: the Go loop's work.
	descUserSent      = prometheus.NewDesc("swiftlane_user_queued_total", "Runnable tasks handed to the user-space policy.", nil, nil)
	descUserDecisions = prometheus.NewDesc("swiftlane_user_decisions_total", "Decisions from user space, by result: applied, stale (the task was queued again or left since), bounced (a CPU the task may not use; sent to any CPU).", []string{"result"}, nil)
	descUserRTT       = prometheus.NewDesc("swiftlane_user_round_trip_seconds_total", "Time from a task queued to user space to its decision applied, summed.", nil, nil)
	descUserRTTs      = prometheus.NewDesc("swiftlane_user_round_trips_total", "Decisions whose round trip is in swiftlane_user_round_trip_seconds_total.", nil, nil)
	descUserRTTMax    = prometheus.NewDesc("swiftlane_user_round_trip_max_seconds", "Longest round trip through user space so far.", nil, nil)
	descUserLoop      = prometheus.NewDesc("swiftlane_user_loop_iterations_total", "Passes of the Go dispatch loop.", nil, nil)
	descUserBeats     = prometheus.NewDesc("swiftlane_user_heartbeats_total", "Heartbeats that gave the scheduler's own threads a turn.", nil, nil)
	descUserWalks     = prometheus.NewDesc("swiftlane_user_request_walks_total", "Walks over the requests user space holds, looking for ones held past the 250 ms bound (only when one may be, or when user space stalls).", nil, nil)
	descUserIdleKicks = prometheus.NewDesc("swiftlane_user_idle_kicks_total", "Heartbeat kicks of CPUs that run none of our tasks while tasks wait on their local queue (only an idle CPU wakes).", nil, nil)
)

// Automatic mode: the processes it prioritises. Rates are PromQL's to take
// (rate() of the packets); pid and command label a handful of series.
var (
	descCarriers       = prometheus.NewDesc("swiftlane_gtp_carriers", "Processes automatic mode prioritises because they carry GTP-U packets.", nil, nil)
	descCarrierPackets = prometheus.NewDesc("swiftlane_gtp_carrier_packets_total", "GTP-U (or named TUN device) packets a prioritised process carried in its own context since the tracer loaded.", []string{"pid", "command", "class"}, nil)
	descCarrierLast    = prometheus.NewDesc("swiftlane_gtp_carrier_last_packet_timestamp_seconds", "When a prioritised process last carried a GTP-U packet (to within the tracer's emit interval).", []string{"pid", "command", "class"}, nil)
)

// carrierCollector exports automatic mode's carriers, read at each scrape.
// Without the packet counts (a failed map read) it leaves the counters out
// rather than report zeros, which rate() would take for a counter reset; the
// rest of the scrape stands (an invalid metric would fail all of it).
type carrierCollector struct {
	list func() ([]apitypes.Carrier, error)
}

func (carrierCollector) Describe(chan<- *prometheus.Desc) {} // behind a collectorSlot

func (c carrierCollector) Collect(ch chan<- prometheus.Metric) {
	cs, err := c.list()
	gauge(ch, descCarriers, float64(len(cs)))
	for _, x := range cs {
		pid := strconv.Itoa(x.PID)
		if err == nil {
			counter(ch, descCarrierPackets, x.Packets, pid, x.Command, x.Class)
		}
		gauge(ch, descCarrierLast, float64(x.LastPacket.UnixNano())/1e9, pid, x.Command, x.Class)
	}
}

// kernelPaths and userPaths are the dispatches by path (descDispatch's
// labels), for the metrics and an agent's heartbeat.
func kernelPaths(st sched.Stats) map[string]uint64 {
	return map[string]uint64{
		"direct": st.DirectDispatch, "critical": st.CriticalDispatch, "shared": st.SharedDispatch,
		"kthread": st.KthreadDispatch, "overdue": st.OverdueDispatch, "handoff": st.HandoffDispatch,
		"rcu_reader": st.RCUReaderDispatch,
	}
}

func userPaths(st usersched.Stats) map[string]uint64 {
	return map[string]uint64{
		"user": st.Applied, "fallback": st.Fallback, "rescued": st.Rescued,
		"critical": st.Critical, "kthread": st.Kthread, "scheduler": st.SchedThread,
		"rcu_reader": st.RCUReader,
	}
}

func counter(ch chan<- prometheus.Metric, d *prometheus.Desc, v uint64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
}

func gauge(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

// collectProcesses exports how many processes the strategies hold per class.
func collectProcesses(ch chan<- prometheus.Metric, a *applier.Applier) {
	if a == nil {
		return
	}
	var per [sched.NrClasses]int
	for _, ap := range a.Applied() {
		if int(ap.Class) < sched.NrClasses {
			per[ap.Class]++
		}
	}
	for i := range sched.NrClasses {
		gauge(ch, descProcesses, float64(per[i]), strategy.Class(i).String())
	}
}

// collectUnmatchable exports the strategies that match nothing here.
func collectUnmatchable(ch chan<- prometheus.Metric, a *applier.Applier) {
	for _, u := range a.Unmatchable() {
		gauge(ch, descUnmatch, 1, u.Strategy, u.Reason)
	}
}

// statsCollector exports a mode's counters, read at each scrape, and the
// processes per class. It sits behind collectorSlot, which registers
// unchecked: it describes nothing.
type statsCollector[T any] struct {
	read   func() (T, error)
	export func(chan<- prometheus.Metric, T)
	a      *applier.Applier // may be nil
}

func (statsCollector[T]) Describe(chan<- *prometheus.Desc) {}

func (c statsCollector[T]) Collect(ch chan<- prometheus.Metric) {
	st, err := c.read()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(descDispatch, err)
		return
	}
	c.export(ch, st)
	collectProcesses(ch, c.a)
}

// exportKernel exports the in-kernel scheduler's counters.
func exportKernel(ch chan<- prometheus.Metric, st sched.Stats) {
	for i := range sched.NrClasses {
		cls := strategy.Class(i).String()
		counter(ch, descEnqueued, st.Enqueued[i], cls)
		buckets := make(map[float64]uint64, sched.HistBuckets)
		var cum uint64
		for b := range sched.HistBuckets {
			cum += st.WaitHist[i][b]
			buckets[sched.BucketUpperSeconds(b)] = cum
		}
		ch <- prometheus.MustNewConstHistogram(descWait, st.WaitCount[i], float64(st.WaitSumNs[i])/1e9, buckets, cls)
	}
	for path, v := range kernelPaths(st) {
		counter(ch, descDispatch, v, path)
	}
	counter(ch, descPreempt, st.PreemptKicks)
	counter(ch, descWakePre, st.WakeupPreempts)
	counter(ch, descDemoted, st.CriticalDemoted)
	counter(ch, descStarve, st.StarvationRescues)
	counter(ch, descDropped, st.EventsDropped)
	counter(ch, descHotplug, st.CPUHotplug)
	gauge(ch, descWaitMax, float64(st.WaitMaxNs)/1e9)
	gauge(ch, descQueued, float64(st.QueuedCritical), "critical")
	gauge(ch, descQueued, float64(st.QueuedShared), "shared")
}

// exportUser exports user-space mode's counters: the BPF side's paths and
// the Go loop's work.
func exportUser(ch chan<- prometheus.Metric, st usersched.Stats) {
	for path, v := range userPaths(st) {
		counter(ch, descDispatch, v, path)
	}
	counter(ch, descUserSent, st.Sent)
	counter(ch, descUserDecisions, st.Applied, "applied")
	counter(ch, descUserDecisions, st.Stale, "stale")
	counter(ch, descUserDecisions, st.Bounced, "bounced")
	ch <- prometheus.MustNewConstMetric(descUserRTT, prometheus.CounterValue, float64(st.RoundTripSumNs)/1e9)
	counter(ch, descUserRTTs, st.RoundTrips)
	gauge(ch, descUserRTTMax, float64(st.RoundTripMaxNs)/1e9)
	gauge(ch, descWaitMax, float64(st.WaitMaxNs)/1e9)
	counter(ch, descUserLoop, st.Loop.Iterations)
	counter(ch, descUserBeats, st.Heartbeats)
	counter(ch, descUserIdleKicks, st.IdleKicks)
	counter(ch, descUserWalks, st.RequestWalks)
	counter(ch, descPreempt, st.PreemptKicks)
	counter(ch, descDemoted, st.CriticalDemoted)
	counter(ch, descDropped, st.EventsDropped)
}
