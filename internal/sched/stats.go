// SPDX-License-Identifier: Apache-2.0

package sched

import (
	"fmt"
	"math"

	"github.com/swiftlane/swiftlane/internal/percpu"
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
	RCUReaderDispatch uint64 // preempted inside an RCU read-side section, queued first
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
	c, err := percpu.Sum[swiftlaneSwlStats](s.objs.Stats, uint32(0), "WaitMaxNs")
	if err != nil {
		return Stats{}, fmt.Errorf("read stats: %w", err)
	}
	t := Stats{
		Enqueued: c.Enqueued, WaitCount: c.WaitCount, WaitSumNs: c.WaitSumNs, WaitHist: c.WaitHist, WaitMaxNs: c.WaitMaxNs,
		DirectDispatch: c.DirectDispatch, SharedDispatch: c.SharedDispatch, CriticalDispatch: c.CriticalDispatch,
		KthreadDispatch: c.KthreadDispatch, OverdueDispatch: c.OverdueDispatch, HandoffDispatch: c.HandoffDispatch,
		RCUReaderDispatch: c.RcuReaderDispatch,
		PreemptKicks:      c.PreemptKicks, WakeupPreempts: c.WakeupPreempts, CriticalDemoted: c.CriticalDemoted,
		StarvationRescues: c.StarvationRescues, EventsDropped: c.EventsDropped, CPUHotplug: c.CpuHotplug,
	}
	_ = s.objs.QueuedCritical.Get(&t.QueuedCritical)
	_ = s.objs.QueuedShared.Get(&t.QueuedShared)
	return t, nil
}
