// SPDX-License-Identifier: Apache-2.0

package applier

import (
	"testing"

	"github.com/swiftlane/swiftlane/internal/strategy"
)

// Extra strategies match after the SetStrategies ones, stay when those
// change, and lose to them where both match.
func TestApplierExtraStrategies(t *testing.T) {
	proc, marker := startMarked(t, "")
	pid := pidOf(proc)
	rec := NewRecorder()
	a := New(rec, "/proc", "/sys/fs/cgroup", nil)
	if err := a.SetExtra(mustCompile(t, strategy.Strategy{Name: "companion", Class: class(strategy.High), CommandRegex: marker})); err != nil {
		t.Fatal(err)
	}
	if e, ok := rec.Process(pid); !ok || e.Class != strategy.High {
		t.Fatalf("extra strategy alone: %+v %v", e, ok)
	}
	// New strategies in front: the extra one stays behind them.
	if err := a.SetStrategies(mustCompile(t, strategy.Strategy{Name: "other", Class: class(strategy.Background), CommandRegex: "swiftlane-matches-nothing"})); err != nil {
		t.Fatal(err)
	}
	got := a.Applied()
	if len(got) != 1 || got[0].Strategy != "companion" || got[0].Index != 1 || a.Strategies() != 1 {
		t.Fatalf("after SetStrategies: Applied %+v, Strategies %d; want the companion at index 1 behind 1 strategy", got, a.Strategies())
	}
	// A strategy that matches too wins.
	if err := a.SetStrategies(mustCompile(t, strategy.Strategy{Name: "own", Class: class(strategy.Critical), CommandRegex: marker})); err != nil {
		t.Fatal(err)
	}
	if e, _ := rec.Process(pid); e.Class != strategy.Critical {
		t.Fatalf("SetStrategies should win over the extra strategy: %+v", e)
	}
	if err := a.SetStrategies(nil); err != nil {
		t.Fatal(err)
	}
	if e, _ := rec.Process(pid); e.Class != strategy.High {
		t.Fatalf("extra strategy not back: %+v", e)
	}
	if err := a.SetExtra(nil); err != nil {
		t.Fatal(err)
	}
	if _, ok := rec.Process(pid); ok || len(a.Applied()) != 0 {
		t.Fatal("entry kept after the extra strategies were removed")
	}
}

// A new target gets everything the old one held: matched processes and
// cgroups, inherited and dynamic entries; dead processes are not carried
// over.
func TestApplierRetarget(t *testing.T) {
	m, marker := startMarked(t, "-matched")
	h, _ := startMarked(t, "-heir")
	d, _ := startMarked(t, "-dynamic")
	x, _ := startMarked(t, "-dead")
	matched, heir, dyn, dead := pidOf(m), pidOf(h), pidOf(d), pidOf(x)

	old := NewRecorder()
	a := New(old, "/proc", "/sys/fs/cgroup", nil)
	a.SetCgroupIDFunc(func(string) (uint64, error) { return 42, nil })
	set := mustCompile(t,
		strategy.Strategy{Name: "m", Class: class(strategy.High), CommandRegex: marker, Inherit: true},
		strategy.Strategy{Name: "cg", Class: class(strategy.Background), CgroupPath: "/batch.slice"})
	if err := a.SetStrategies(set); err != nil {
		t.Fatal(err)
	}
	// heir did not match on its own: it inherited from a forking parent.
	if err := a.HandleFork(heir, matched); err != nil {
		t.Fatal(err)
	}
	auto := Entry{Class: strategy.Critical, SliceNs: 100000}
	for _, pid := range []uint32{dyn, dead} {
		if err := a.SetDynamic(pid, auto, "auto"); err != nil {
			t.Fatal(err)
		}
	}
	// dead exits while no target reports it.
	x.Process.Kill()
	x.Wait()

	fresh := NewRecorder()
	if err := a.Retarget(fresh); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		pid   uint32
		class strategy.Class
	}{{"matched", matched, strategy.High}, {"inherited", heir, strategy.High}, {"dynamic", dyn, strategy.Critical}} {
		if e, ok := fresh.Process(tc.pid); !ok || e.Class != tc.class {
			t.Errorf("%s process %d in the new target: %+v %v, want %s", tc.name, tc.pid, e, ok, tc.class)
		}
	}
	if e, ok := fresh.Cgroup(42); !ok || e.Class != strategy.Background {
		t.Errorf("cgroup in the new target: %+v %v", e, ok)
	}
	if _, ok := fresh.Process(dead); ok {
		t.Error("a process that exited in between was written to the new target")
	}
	if got := a.Dynamic("auto"); len(got) != 1 || got[0] != dyn {
		t.Errorf("dynamic entries after Retarget: %v, want only %d", got, dyn)
	}
	// From now on only the new target changes.
	writes := old.Processes()
	if err := a.SetStrategies(nil); err != nil {
		t.Fatal(err)
	}
	if old.Processes() != writes {
		t.Error("the old target still receives changes")
	}
	if _, ok := fresh.Process(matched); ok {
		t.Error("removing the strategies left the matched entry in the new target")
	}
}
