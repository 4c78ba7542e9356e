// SPDX-License-Identifier: Apache-2.0

package noderuntime

import (
	"testing"

	"github.com/swiftlane/swiftlane/internal/sched"
	"github.com/swiftlane/swiftlane/internal/strategy"
	"github.com/swiftlane/swiftlane/usersched"
)

// The heartbeat's counters carry the metrics' path and class names.
func TestCounters(t *testing.T) {
	var st sched.Stats
	st.Enqueued[strategy.Critical], st.OverdueDispatch, st.WakeupPreempts = 4, 2, 3
	st.WaitCount[strategy.High], st.WaitSumNs[strategy.High], st.WaitHist[strategy.High][sched.HistBuckets-1] = 1, 9, 1
	k := kernelCounters(st)
	if k.Enqueued["critical"] != 4 || k.Dispatched["overdue"] != 2 || k.WakeupPreempts != 3 || len(k.Dispatched) != 7 {
		t.Errorf("kernel counters %+v", k)
	}
	if w := k.RunqueueWait["high"]; w.Count != 1 || w.SumNs != 9 || len(w.Buckets) != sched.HistBuckets || w.Buckets[sched.HistBuckets-1] != 1 {
		t.Errorf("high wait histogram %+v", w)
	}
	// A copy: the next read must not change what was reported.
	st.WaitHist[strategy.High][sched.HistBuckets-1] = 5
	if k.RunqueueWait["high"].Buckets[sched.HistBuckets-1] != 1 {
		t.Error("the histogram aliases the stats it came from")
	}

	u := userCounters(usersched.Stats{Applied: 8, Rescued: 1, SchedThread: 2, EventsDropped: 3})
	if u.Dispatched["user"] != 8 || u.Dispatched["rescued"] != 1 || u.Dispatched["scheduler"] != 2 || u.EventsDropped != 3 ||
		u.Enqueued == nil || u.RunqueueWait == nil {
		t.Errorf("user-space counters %+v", u)
	}
}
