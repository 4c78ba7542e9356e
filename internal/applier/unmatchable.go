// SPDX-License-Identifier: Apache-2.0

package applier

import (
	"fmt"
	"slices"

	"github.com/swiftlane/swiftlane/internal/strategy"
)

func cgroupMissing(s *strategy.Set, i int, err error) strategy.Unmatchable {
	return strategy.Unmatchable{Index: i, Strategy: s.Label(i), Reason: strategy.ReasonCgroupMissing,
		Fix: fmt.Sprintf("cgroup_path %s: %v: check the path (relative to the cgroup v2 root); it is resolved again at the next strategy change", s.At(i).CgroupPath, err)}
}

// reportUnmatchable logs the strategies that became unmatchable with this
// change (not those already reported) and keeps the list for Unmatchable.
func (a *Applier) reportUnmatchable(now []strategy.Unmatchable) {
	known := func(u strategy.Unmatchable) bool {
		return slices.ContainsFunc(a.unmatchable, func(o strategy.Unmatchable) bool { return o.Strategy == u.Strategy && o.Reason == u.Reason })
	}
	for _, u := range now {
		if !known(u) {
			a.log.Warn("strategy matches no process here", "strategy", u.Strategy, "reason", u.Reason, "fix", u.Fix)
		}
	}
	a.unmatchable = now
}

// Unmatchable lists the strategies the Applier holds that match nothing
// here, as of the last change, for metrics and status.
func (a *Applier) Unmatchable() []strategy.Unmatchable {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.unmatchable)
}
