// SPDX-License-Identifier: Apache-2.0

package strategy

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func class(c Class) *Class { return &c }

func TestMatchUsesFullCommandLineNotComm(t *testing.T) {
	set, err := Compile([]Strategy{
		{Name: "gnb", Class: class(Critical), CommandRegex: `nr-gnb -c /etc/gnb\.yaml`},
		{Name: "by-exe", Class: class(High), CommandRegex: `^/usr/local/bin/upf-with-a-very-long-name$`},
		{Name: "kthread", Class: class(High), CommandRegex: `^ksoftirqd/`},
	})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		p    Process
		want int
	}{
		{Process{PID: 1, Cmdline: "nr-gnb -c /etc/gnb.yaml", Comm: "nr-gnb"}, 0},
		{Process{PID: 2, Cmdline: "upf", Exe: "/usr/local/bin/upf-with-a-very-long-name", Comm: "upf-with-a-very"}, 1},
		{Process{PID: 3, Comm: "ksoftirqd/0"}, 2},
		{Process{PID: 4, Cmdline: "bash", Comm: "ksoftirqd/0"}, -1}, // comm only counts for kernel threads
	}
	for _, c := range cases {
		got, ok := set.Match(c.p)
		if !ok {
			got = -1
		}
		if got != c.want {
			t.Errorf("%+v: matched %d, want %d", c.p, got, c.want)
		}
	}
}

func TestMatchersCombineAndSelectorsNeedPods(t *testing.T) {
	set, err := Compile([]Strategy{
		{Class: class(High), PID: 10, CommandRegex: "x"},
		{Class: class(High), Selectors: []Selector{{Key: "app", Value: "gnb"}}},
		{Class: class(Background), CgroupPath: "/batch.slice"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := set.Match(Process{PID: 10, Cmdline: "y"}); ok {
		t.Error("pid matched but regex did not: must not match")
	}
	if i, ok := set.Match(Process{PID: 11, Cmdline: "x", Cgroup: "/batch.slice/job-1.scope"}); !ok || i != 2 {
		t.Errorf("cgroup descendant: got %d %v", i, ok)
	}
	if _, ok := set.Match(Process{PID: 12, Cmdline: "x", Cgroup: "/batch.slicer"}); ok {
		t.Error("cgroup prefix without a path boundary must not match")
	}
}

func TestPriorityAndClassMustAgree(t *testing.T) {
	yes := true
	s := Strategy{Class: class(Background), Priority: &yes, PID: 1}
	err := s.Validate()
	if fe, ok := err.(*FieldError); !ok || fe.Field != "priority" {
		t.Fatalf("got %v", err)
	}
}

func newRecorder() *Recorder { return NewRecorder() }

// Real processes and the real /proc: a marker in argv selects them.
func TestApplierMatchesRealProcesses(t *testing.T) {
	proc, marker := startMarked(t, "")
	rec := newRecorder()
	a := NewApplier(rec, "/proc", "/sys/fs/cgroup", nil)
	set, err := Compile([]Strategy{{Name: "m", Class: class(Critical), CommandRegex: marker, ExecutionTime: 100000}})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.SetStrategies(set); err != nil {
		t.Fatal(err)
	}
	pid := uint32(proc.Process.Pid)
	e, ok := rec.Process(pid)
	if !ok || e.Class != Critical || e.SliceNs != 100000 {
		t.Fatalf("pid %d: got %+v %v, want critical with slice 100000", pid, e, ok)
	}
	if _, ok := rec.Process(uint32(os.Getpid())); ok {
		t.Fatal("the test process itself must not match")
	}

	// Strategies removed: the entry goes.
	empty, _ := Compile(nil)
	if err := a.SetStrategies(empty); err != nil {
		t.Fatal(err)
	}
	if _, ok := rec.Process(pid); ok {
		t.Fatal("entry kept after its strategy was removed")
	}

	// An exec event re-matches: bring the strategy back and report the exec.
	if err := a.SetStrategies(set); err != nil {
		t.Fatal(err)
	}
	if err := a.HandleExec(pid); err != nil {
		t.Fatal(err)
	}
	if _, ok := rec.Process(pid); !ok {
		t.Fatal("entry lost after exec event")
	}
	if got := a.Applied(); len(got) != 1 || got[0].PID != int(pid) || got[0].Strategy != "m" {
		t.Fatalf("Applied() = %+v", got)
	}
}

func TestApplierInheritOnFork(t *testing.T) {
	rec := newRecorder()
	a := NewApplier(rec, "/proc", "/sys/fs/cgroup", nil)
	self := uint32(os.Getpid())
	set, _ := Compile([]Strategy{{Name: "me", Class: class(High), PID: int(self), Inherit: true}})
	if err := a.SetStrategies(set); err != nil {
		t.Fatal(err)
	}
	if _, ok := rec.Process(self); !ok {
		t.Fatal("pid strategy not applied")
	}
	child := exec.Command("sleep", "30")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { child.Process.Kill(); child.Wait() })
	cpid := uint32(child.Process.Pid)
	if err := a.HandleFork(cpid, self); err != nil {
		t.Fatal(err)
	}
	e, ok := rec.Process(cpid)
	if !ok || e.Class != High {
		t.Fatalf("child of an inherit strategy: got %+v %v", e, ok)
	}
	// Exec in the child keeps the inherited entry.
	if err := a.HandleExec(cpid); err != nil {
		t.Fatal(err)
	}
	if _, ok := rec.Process(cpid); !ok {
		t.Fatal("inherited entry dropped on exec")
	}
}

func TestParseCgroupsV1AndV2(t *testing.T) {
	for _, tc := range []struct{ in, v2, v1 string }{
		{"0::/kubepods.slice/pod1.slice/cri-containerd-a.scope\n", "/kubepods.slice/pod1.slice/cri-containerd-a.scope", ""},
		{"12:memory:/kubepods/burstable/podu\n4:cpu,cpuacct:/kubepods/burstable/podu/c1\n1:name=systemd:/x\n", "", "/kubepods/burstable/podu/c1"},
		{"4:cpuacct,cpu:/a\n0::/b\n", "/b", "/a"},
		{"4:cpuset:/a\n", "", ""},
	} {
		v2, v1 := parseCgroups(tc.in)
		if v2 != tc.v2 || v1 != tc.v1 {
			t.Errorf("parseCgroups(%q) = %q, %q; want %q, %q", tc.in, v2, v1, tc.v2, tc.v1)
		}
	}
}

func TestCgroupV1StrategyMatchesPerProcess(t *testing.T) {
	c := Critical
	set, err := Compile([]Strategy{{Class: &c, CgroupPath: "/kubepods/burstable/podu", CgroupV1: true}})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := set.Match(Process{PID: 1, CgroupV1: "/kubepods/burstable/podu/c1", Cgroup: "/"}); !ok {
		t.Error("a process in the pod's v1 cpu cgroup should match")
	}
	if _, ok := set.Match(Process{PID: 2, Cgroup: "/kubepods/burstable/podu/c1"}); ok {
		t.Error("a v1 strategy must not match on the v2 path")
	}
}

// TestTrackedProcessesMatchFromTheIndex: once tracking, a strategy change
// matches what exec/fork/exit events recorded, not a fresh read of every
// process (here: a command line rewritten in the fake procfs without an
// exec event is not seen until its exec event); a process whose fork event
// was lost is still read, and one whose exit was lost is dropped.
func TestTrackedProcessesMatchFromTheIndex(t *testing.T) {
	root := t.TempDir()
	write := func(pid int, cmd string) {
		d := filepath.Join(root, strconv.Itoa(pid))
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(d, "cmdline"), []byte(cmd+"\x00"), 0o644)
		os.WriteFile(filepath.Join(d, "comm"), []byte(cmd), 0o644)
	}
	write(100, "nr-gnb")
	write(200, "idle")
	rec := newRecorder()
	a := NewApplier(rec, root, t.TempDir(), nil)
	if err := a.TrackProcesses(); err != nil {
		t.Fatal(err)
	}
	write(200, "upf") // an exec whose event is still queued
	set, _ := Compile([]Strategy{{Name: "gnb", Class: class(Critical), CommandRegex: "nr-gnb"}, {Name: "upf", Class: class(High), CommandRegex: "^upf"}})
	if err := a.SetStrategies(set); err != nil {
		t.Fatal(err)
	}
	if _, ok := rec.Process(100); !ok {
		t.Fatal("pid 100 not matched from the index")
	}
	if _, ok := rec.Process(200); ok {
		t.Fatal("pid 200 was re-read from procfs on a strategy change: the index was not used")
	}
	if err := a.HandleExec(200); err != nil { // the exec event arrives
		t.Fatal(err)
	}
	if e, ok := rec.Process(200); !ok || e.Class != High {
		t.Fatalf("pid 200 after its exec event: %+v %v", e, ok)
	}
	// Lost events: a new process without its fork event, an exited one
	// without its exit event. The next change reads the one, drops the other.
	write(300, "upf --n3")
	os.RemoveAll(filepath.Join(root, "100"))
	if err := a.SetStrategies(set); err != nil {
		t.Fatal(err)
	}
	if _, ok := rec.Process(300); !ok {
		t.Fatal("a process missing from the index was not read")
	}
	for _, ap := range a.Applied() {
		if ap.PID == 100 {
			t.Fatal("an exited process is still applied")
		}
	}
}

// TestTrackedChangeMatchesOnlyWhatItCanAffect: after a strategy change,
// processes matched by a strategy before the first changed one are not
// matched again (seen here through a process whose index entry no longer
// fits its strategy: it keeps it), while unmatched processes are tried on
// the new strategy, and a process that appeared before tracking started is
// matched against the strategies already set.
func TestTrackedChangeMatchesOnlyWhatItCanAffect(t *testing.T) {
	root := t.TempDir()
	write := func(pid int, cmd string) {
		d := filepath.Join(root, strconv.Itoa(pid))
		os.MkdirAll(d, 0o755)
		os.WriteFile(filepath.Join(d, "cmdline"), []byte(cmd+"\x00"), 0o644)
	}
	write(100, "nr-gnb")
	rec := newRecorder()
	a := NewApplier(rec, root, t.TempDir(), nil)
	gnb := Strategy{Name: "gnb", Class: class(Critical), CommandRegex: "nr-gnb"}
	set1, _ := Compile([]Strategy{gnb})
	if err := a.SetStrategies(set1); err != nil {
		t.Fatal(err)
	}
	write(200, "nr-gnb --cell 2") // started before the event feed
	write(300, "upf")
	if err := a.TrackProcesses(); err != nil {
		t.Fatal(err)
	}
	if _, ok := rec.Process(200); !ok {
		t.Fatal("a process found when tracking started was not matched against the current strategies")
	}
	a.mu.Lock()
	a.index[100] = Process{PID: 100, Cmdline: "changed-without-an-event"}
	a.mu.Unlock()
	set2, _ := Compile([]Strategy{gnb, {Name: "upf", Class: class(High), CommandRegex: "^upf"}})
	if err := a.SetStrategies(set2); err != nil {
		t.Fatal(err)
	}
	if e, ok := rec.Process(100); !ok || e.Class != Critical {
		t.Fatalf("pid 100 (strategy gnb unchanged) was matched again: %+v %v", e, ok)
	}
	if e, ok := rec.Process(300); !ok || e.Class != High {
		t.Fatalf("pid 300 not tried on the new strategy: %+v %v", e, ok)
	}
	// Changing gnb itself re-matches its processes.
	set3, _ := Compile([]Strategy{{Name: "gnb", Class: class(Critical), CommandRegex: "nr-gnb$"}, {Name: "upf", Class: class(High), CommandRegex: "^upf"}})
	if err := a.SetStrategies(set3); err != nil {
		t.Fatal(err)
	}
	if _, ok := rec.Process(100); ok {
		t.Fatal("pid 100 kept a changed strategy it no longer matches")
	}
}

// A strategy replaced by another at the same index (its class edited) is
// written again, whether processes are matched from procfs or the index.
func TestApplierRewritesAChangedStrategyAtTheSameIndex(t *testing.T) {
	for _, tracking := range []bool{false, true} {
		proc, marker := startMarked(t, fmt.Sprint(tracking))
		rec := newRecorder()
		a := NewApplier(rec, "/proc", "/sys/fs/cgroup", nil)
		if tracking {
			if err := a.TrackProcesses(); err != nil {
				t.Fatal(err)
			}
		}
		for _, c := range []Class{Critical, Background} {
			if err := a.SetStrategies(mustCompile(t, Strategy{Name: "s", Class: class(c), CommandRegex: marker})); err != nil {
				t.Fatal(err)
			}
			if e, _ := rec.Process(pidOf(proc)); e.Class != c {
				t.Errorf("tracking %v: entry %+v after the strategy became %s", tracking, e, c)
			}
		}
	}
}

// startMarked starts a process whose command line carries a marker unique
// to the test, and returns the process and the marker.
func startMarked(t *testing.T, suffix string) (*exec.Cmd, string) {
	t.Helper()
	marker := "swiftlane-test-" + strings.ReplaceAll(t.Name(), "/", "-") + suffix
	// read is a shell builtin: the shell waits on stdin without forking a
	// child (a forked "sleep" carries the shell's argv until it execs, and
	// a scan in that window matched it too).
	// It says when it runs: before its exec, /proc shows this test's own
	// command line.
	proc := exec.Command("sh", "-c", "echo ready; read _; : "+marker)
	stdin, err := proc.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := proc.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := proc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); proc.Process.Kill(); proc.Wait() })
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("helper shell: %q %v", line, err)
	}
	return proc, marker
}

func pidOf(c *exec.Cmd) uint32 { return uint32(c.Process.Pid) }

func mustCompile(t *testing.T, list ...Strategy) *Set {
	t.Helper()
	set, err := Compile(list)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// A lone brace is refused with the fix: RE2 would take it as a literal, the
// ECMA-262 dialect of the API's schema (format: regex) as an error.
func TestCommandRegexLoneBrace(t *testing.T) {
	critical := Critical
	for re, lone := range map[string]int{
		"x{2}": -1, "x{2,}": -1, "x{2,5}": -1, `\{`: -1, `a\}`: -1, "[{}]": -1, "[]{]": -1, "[^]}]": -1, `\p{Greek}+`: -1, `\x{41}`: -1,
		"{": 0, "a{": 1, "a}": 1, "a{,3}": 1, "a{x}": 1, "nr-gnb{": 6, "\u00bf{\u0005": 2,
	} {
		if got := loneBrace(re); got != lone {
			t.Errorf("loneBrace(%q) = %d, want %d", re, got, lone)
		}
		s := Strategy{Name: "s", Class: &critical, CommandRegex: re}
		err := s.Validate()
		if (err != nil) != (lone >= 0) {
			t.Errorf("Validate(%q): %v, want an error: %v", re, err, lone >= 0)
		}
		var fe *FieldError
		if err != nil && (!errors.As(err, &fe) || fe.Field != "command_regex" || !strings.Contains(err.Error(), `escape it as \`)) {
			t.Errorf("Validate(%q): %v, want a command_regex error saying how to escape it", re, err)
		}
	}
}
