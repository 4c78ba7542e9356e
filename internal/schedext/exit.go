// SPDX-License-Identifier: Apache-2.0

package schedext

import (
	"fmt"
	"strings"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// ExitInfo is why the kernel stopped the scheduler (its scx_exit_info).
type ExitInfo struct {
	Kind     uint32
	ExitCode int64
	Reason   string
	Message  string
	// Dump is the kernel's state dump at an error exit: each CPU's
	// current task and the runnable tasks on it with how long each has
	// been runnable and in which queue. Empty otherwise.
	Dump string
}

// Exit kinds (enum scx_exit_kind) that user space distinguishes.
const (
	ExitDone       = 1
	ExitUnreg      = 64   // detached from user space
	ExitUnregBPF   = 65   // the BPF side asked to exit
	ExitUnregKern  = 66   // the kernel detached it (e.g. hotplug without callbacks)
	ExitSysRq      = 67   // sysrq-S
	ExitError      = 1024 // runtime error
	ExitErrorBPF   = 1025 // scx_bpf_error() in the BPF side
	ExitErrorStall = 1026 // watchdog: a runnable task waited too long
)

// Exit code bits (enum scx_exit_code).
const (
	ECodeActRestart = 1 << 48 // user space should reload the scheduler
)

var kindNames = map[uint32]string{
	0: "none", ExitDone: "done", ExitUnreg: "unregistered from user space",
	ExitUnregBPF: "unregistered from BPF", ExitUnregKern: "unregistered by the kernel",
	ExitSysRq: "disabled by sysrq-S", ExitError: "runtime error", ExitErrorBPF: "error in BPF",
	ExitErrorStall: "watchdog: runnable task stalled",
}

// KindName names an exit kind.
func KindName(k uint32) string {
	if n, ok := kindNames[k]; ok {
		return n
	}
	return fmt.Sprintf("kind %d", k)
}

// IsError is true when the kernel ejected the scheduler for misbehaving.
func (e *ExitInfo) IsError() bool { return e.Kind >= ExitError }

// WantsRestart is true when the kernel asks user space to load it again.
func (e *ExitInfo) WantsRestart() bool { return e.ExitCode&ECodeActRestart != 0 }

// OutOfMemoryAtEnable is true when the kernel gave up enabling the scheduler
// because a task's state could not be allocated ("ops.init_task() failed
// (-12)"): every existing task is set up at once, from the BPF allocator's
// per-CPU caches, which a machine just out of a fork storm may have drained.
// Loading again a moment later succeeds.
func (e *ExitInfo) OutOfMemoryAtEnable() bool {
	return e.Kind == ExitError && strings.Contains(e.Message, "init_task() failed (-12)")
}

// BusyAtEnable is true when the kernel gave up enabling the scheduler with
// EBUSY after setting it up. On 7.x kernels the one cause is sched_ext's
// deadline server (the share of each CPU it keeps for its tasks beside
// SCHED_DEADLINE ones, 50 ms per second by default): it could not reserve
// that bandwidth because SCHED_DEADLINE tasks hold the rest of a root
// domain's (DeadlineTasks names them). Loading again succeeds once they
// release some.
func (e *ExitInfo) BusyAtEnable() bool {
	return e.Kind == ExitError && strings.Contains(e.Message, "enable() failed (-16)")
}

func (e *ExitInfo) String() string {
	s := fmt.Sprintf("%s (kind %d", KindName(e.Kind), e.Kind)
	if e.ExitCode != 0 {
		s += fmt.Sprintf(", exit code %#x", e.ExitCode)
	}
	s += ")"
	if e.Reason != "" && e.Reason != KindName(e.Kind) {
		s += ": " + e.Reason
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// ReadExit reads a scheduler's exit_info global (struct swl_exit_info,
// which both BPF schedulers fill in from the kernel's scx_exit_info): the
// exit record its BPF side kept, or nil if it has none yet.
func ReadExit(v *ebpf.Variable) (*ExitInfo, error) {
	var raw intfSwlExitInfo
	if err := v.Get(&raw); err != nil {
		return nil, err
	}
	if raw.Valid == 0 {
		return nil, nil
	}
	return &ExitInfo{Kind: raw.Kind, ExitCode: raw.ExitCode, Reason: cstr(raw.Reason[:]), Message: cstr(raw.Msg[:]),
		Dump: strings.TrimRight(cstr(raw.Dump[:]), "\n")}, nil
}

func cstr(b []int8) string {
	u := make([]byte, len(b))
	for i, c := range b {
		u[i] = byte(c)
	}
	return unix.ByteSliceToString(u)
}
