// SPDX-License-Identifier: Apache-2.0

package applier

import (
	"testing"

	"github.com/swiftlane/swiftlane/internal/strategy"
)

// Dynamic entries survive re-matching, yield to a configured strategy while
// it matches, and are forgotten (with the hooks told) on exit.
func TestApplierDynamicEntries(t *testing.T) {
	proc, marker := startMarked(t, "")
	pid := uint32(proc.Process.Pid)

	rec := NewRecorder()
	a := New(rec, "/proc", "/sys/fs/cgroup", nil)
	var exited []uint32
	a.OnExit(func(tgid uint32) { exited = append(exited, tgid) })

	dyn := Entry{Class: strategy.Critical, SliceNs: 200000}
	if err := a.SetDynamic(pid, dyn, "auto"); err != nil {
		t.Fatal(err)
	}
	if e, ok := rec.Process(pid); !ok || e != dyn {
		t.Fatalf("after SetDynamic: %+v %v", e, ok)
	}
	empty, _ := strategy.Compile(nil)
	if err := a.SetStrategies(empty); err != nil {
		t.Fatal(err)
	}
	if e, ok := rec.Process(pid); !ok || e != dyn {
		t.Fatalf("re-matching removed the dynamic entry: %+v %v", e, ok)
	}

	// A configured strategy wins while it matches; the dynamic one comes back after.
	set, err := strategy.Compile([]strategy.Strategy{{Name: "bg", Class: class(strategy.Background), CommandRegex: marker}})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.SetStrategies(set); err != nil {
		t.Fatal(err)
	}
	if e, _ := rec.Process(pid); e.Class != strategy.Background {
		t.Fatalf("configured strategy should win, got %+v", e)
	}
	if err := a.SetStrategies(empty); err != nil {
		t.Fatal(err)
	}
	if e, ok := rec.Process(pid); !ok || e != dyn {
		t.Fatalf("dynamic entry not restored: %+v %v", e, ok)
	}

	// Another source cannot clear it; its own source can.
	if err := a.ClearDynamic(pid, "other"); err != nil {
		t.Fatal(err)
	}
	if _, ok := rec.Process(pid); !ok {
		t.Fatal("another source cleared the entry")
	}
	if got := a.Dynamic("auto"); len(got) != 1 || got[0] != pid {
		t.Fatalf("Dynamic: %v", got)
	}
	if err := a.ClearDynamic(pid, "auto"); err != nil {
		t.Fatal(err)
	}
	if _, ok := rec.Process(pid); ok {
		t.Fatal("ClearDynamic left the entry")
	}

	a.SetDynamic(pid, dyn, "auto")
	a.HandleExit(pid)
	if len(a.Dynamic("auto")) != 0 || len(exited) != 1 || exited[0] != pid {
		t.Fatalf("exit: dynamic %v, hooks saw %v", a.Dynamic("auto"), exited)
	}
}
