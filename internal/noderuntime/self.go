// SPDX-License-Identifier: Apache-2.0

package noderuntime

import (
	"log/slog"
	"os"
	"path/filepath"

	"github.com/swiftlane/swiftlane/internal/applier"
	"github.com/swiftlane/swiftlane/internal/strategy"
)

// selfSource is the Applier source of swiftlane's own entry.
const selfSource = "self"

// initPIDNamespace is what /proc/self/ns/pid reads in the kernel's initial
// PID namespace (its inode is PROC_PID_INIT_INO), the one whose PIDs the
// scheduler's maps are keyed by.
const initPIDNamespace = "pid:[4026531836]"

// prioritiseSelf puts swiftlane's own process in the high class in kernel
// mode. Automatic mode's operator and the agent run in it: in the normal
// class, under a load that kept every CPU busy, its turn came late and a
// restarted gNB waited 7.9 s to be prioritised again (docs/gtp.md). High,
// not critical: it outweighs the load 4:1 but preempts nothing and takes
// nothing from the critical class's CPU budget. A strategy that matches
// swiftlane itself still wins. User-space mode needs none of this: its BPF
// side serves the scheduler's own process ahead of the queues.
func prioritiseSelf(a *applier.Applier, procRoot string, log *slog.Logger) {
	pid, ok := hostPID(procRoot)
	if !ok {
		log.Info("swiftlane's own process keeps the normal class: it is not in the initial PID namespace (run the pod with hostPID: true)")
		return
	}
	if err := a.SetDynamic(pid, applier.Entry{Class: strategy.High}, selfSource); err != nil {
		log.Warn("swiftlane's own process keeps the normal class", "err", err)
	}
}

// hostPID is this process's PID in the initial PID namespace, if it runs
// there: in a pod without hostPID, os.Getpid is another process's PID
// for the scheduler.
func hostPID(procRoot string) (uint32, bool) {
	ns, err := os.Readlink(filepath.Join(procRoot, "self", "ns", "pid"))
	if err != nil || ns != initPIDNamespace {
		return 0, false
	}
	return uint32(os.Getpid()), true
}
