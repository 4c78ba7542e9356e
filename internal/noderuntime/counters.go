// SPDX-License-Identifier: Apache-2.0

package noderuntime

import (
	"github.com/swiftlane/swiftlane/internal/apitypes"
	"github.com/swiftlane/swiftlane/internal/sched"
	"github.com/swiftlane/swiftlane/internal/strategy"
	"github.com/swiftlane/swiftlane/usersched"
)

// The counters an agent heartbeats, by the same path and class names as the
// metrics.

func kernelCounters(st sched.Stats) *apitypes.Counters {
	c := &apitypes.Counters{
		Enqueued:     map[string]uint64{},
		Dispatched:   kernelPaths(st),
		PreemptKicks: st.PreemptKicks, WakeupPreempts: st.WakeupPreempts, CriticalDemoted: st.CriticalDemoted,
		StarvationRescues: st.StarvationRescues, EventsDropped: st.EventsDropped,
		RunqueueWait: map[string]apitypes.WaitHistogram{},
	}
	for i := range sched.NrClasses {
		name := strategy.Class(i).String()
		c.Enqueued[name] = st.Enqueued[i]
		c.RunqueueWait[name] = apitypes.WaitHistogram{Count: st.WaitCount[i], SumNs: st.WaitSumNs[i], Buckets: append([]uint64(nil), st.WaitHist[i][:]...)}
	}
	return c
}

// userCounters: user-space mode counts no enqueues or waits per class.
func userCounters(st usersched.Stats) *apitypes.Counters {
	return &apitypes.Counters{
		Enqueued:     map[string]uint64{},
		Dispatched:   userPaths(st),
		PreemptKicks: st.PreemptKicks, CriticalDemoted: st.CriticalDemoted, EventsDropped: st.EventsDropped,
		RunqueueWait: map[string]apitypes.WaitHistogram{},
	}
}
