// SPDX-License-Identifier: Apache-2.0

package schedext

import (
	"strings"
	"testing"
)

func TestExitInfoWording(t *testing.T) {
	e := ExitInfo{Kind: ExitSysRq, Reason: "disabled by sysrq-S"}
	if got := e.String(); got != "disabled by sysrq-S (kind 67)" {
		t.Fatalf("%q", got)
	}
	e = ExitInfo{Kind: ExitErrorStall, ExitCode: ECodeActRestart, Reason: "runnable task stall", Message: "swapper[0] failed to run for 30s"}
	if !e.IsError() || !e.WantsRestart() || !strings.Contains(e.String(), "failed to run for 30s") {
		t.Fatalf("%q", e.String())
	}
}

// The two enable failures that a later load may get past, each told from
// the other and from other exits.
func TestEnableFailures(t *testing.T) {
	for _, c := range []struct {
		e         ExitInfo
		oom, busy bool
	}{
		{ExitInfo{Kind: ExitError, Reason: "runtime error", Message: "ops.init_task() failed (-12) for kworker/R-sync_[5]"}, true, false},
		{ExitInfo{Kind: ExitError, Message: "ops.init_task() failed (-22) for x[1]"}, false, false},
		{ExitInfo{Kind: ExitErrorStall, Message: "init_task() failed (-12)"}, false, false},
		// As 7.3 reports a deadline server that found no bandwidth.
		{ExitInfo{Kind: ExitError, Reason: "runtime error", Message: "scx_root_enable() failed (-16)"}, false, true},
		{ExitInfo{Kind: ExitError, Message: "scx_root_enable() failed (-12)"}, false, false},
		{ExitInfo{Kind: ExitErrorBPF, Message: "scx_root_enable() failed (-16)"}, false, false},
		{ExitInfo{Kind: ExitUnreg}, false, false},
	} {
		if got := c.e.OutOfMemoryAtEnable(); got != c.oom {
			t.Errorf("%v: OutOfMemoryAtEnable %v, want %v", &c.e, got, c.oom)
		}
		if got := c.e.BusyAtEnable(); got != c.busy {
			t.Errorf("%v: BusyAtEnable %v, want %v", &c.e, got, c.busy)
		}
	}
}
