// SPDX-License-Identifier: Apache-2.0

package schedext

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// SysfsRoot is where the kernel reports sched_ext's state.
const SysfsRoot = "/sys/kernel/sched_ext"

// Reasons swiftlane cannot attach; Check wraps one of them with details.
var (
	ErrNoSchedExt = errors.New("this kernel has no sched_ext")
	ErrBusy       = errors.New("another sched_ext scheduler is attached")
	ErrPrivilege  = errors.New("not enough privilege to load a scheduler")
)

// UnsupportedError says why the scheduler cannot run here and what to do.
type UnsupportedError struct {
	Err  error  // one of the sentinels above
	What string // details, e.g. the kernel release
	Hint string // what the user can do about it
}

func (e *UnsupportedError) Error() string {
	return fmt.Sprintf("%v (%s): %s", e.Err, e.What, e.Hint)
}

func (e *UnsupportedError) Unwrap() error { return e.Err }

// State reads /sys/kernel/sched_ext/state ("disabled", "enabled", ...) and
// the name of the attached scheduler, if any.
func State() (state, ops string, err error) {
	b, err := os.ReadFile(SysfsRoot + "/state")
	if err != nil {
		return "", "", err
	}
	o, _ := os.ReadFile(SysfsRoot + "/root/ops")
	return strings.TrimSpace(string(b)), strings.TrimSpace(string(o)), nil
}

// KernelRelease is the running kernel's release (uname -r).
func KernelRelease() string {
	var uts unix.Utsname
	_ = unix.Uname(&uts)
	return unix.ByteSliceToString(uts.Release[:])
}

// Check reports whether swiftlane can attach on this machine now, as an
// *UnsupportedError naming the cause and the fix.
func Check() error {
	release := KernelRelease()

	state, ops, err := State()
	if err != nil {
		return &UnsupportedError{
			Err:  ErrNoSchedExt,
			What: "kernel " + release + ", no " + SysfsRoot,
			Hint: "swiftlane needs Linux >= 6.12 built with CONFIG_SCHED_CLASS_EXT=y; run `make demo` to try it in the VM lab",
		}
	}
	if state != "disabled" {
		name := ops
		if name == "" {
			name = "state " + state
		}
		return &UnsupportedError{
			Err:  ErrBusy,
			What: name,
			Hint: "stop that scheduler first (or wait until /sys/kernel/sched_ext/state reads disabled)",
		}
	}
	if os.Geteuid() != 0 {
		return &UnsupportedError{
			Err:  ErrPrivilege,
			What: fmt.Sprintf("uid %d", os.Geteuid()),
			Hint: "run as root (loading a sched_ext scheduler needs CAP_BPF and CAP_PERFMON; automatic mode also CAP_SYS_ADMIN)",
		}
	}
	return nil
}
