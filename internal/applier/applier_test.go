// SPDX-License-Identifier: Apache-2.0

package applier

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

	"github.com/swiftlane/swiftlane/internal/strategy"
)

func class(c strategy.Class) *strategy.Class { return &c }

// Real processes and the real /proc: a marker in argv selects them.
func TestApplierMatchesRealProcesses(t *testing.T) {
	proc, marker := startMarked(t, "")
	rec := NewRecorder()
	a := New(rec, "/proc", "/sys/fs/cgroup", nil)
	set, err := strategy.Compile([]strategy.Strategy{{Name: "m", Class: class(strategy.Critical), CommandRegex: marker, ExecutionTime: 100000}})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.SetStrategies(set); err != nil {
		t.Fatal(err)
	}
	pid := uint32(proc.Process.Pid)
	e, ok := rec.Process(pid)
	if !ok || e.Class != strategy.Critical || e.SliceNs != 100000 {
		t.Fatalf("pid %d: got %+v %v, want critical with slice 100000", pid, e, ok)
	}
	if _, ok := rec.Process(uint32(os.Getpid())); ok {
		t.Fatal("the test process itself must not match")
	}

	// Strategies removed: the entry goes.
	empty, _ := strategy.Compile(nil)
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
	rec := NewRecorder()
	a := New(rec, "/proc", "/sys/fs/cgroup", nil)
	self := uint32(os.Getpid())
	set, _ := strategy.Compile([]strategy.Strategy{{Name: "me", Class: class(strategy.High), PID: int(self), Inherit: true}})
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
	if !ok || e.Class != strategy.High {
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
	rec := NewRecorder()
	a := New(rec, root, t.TempDir(), nil)
	if err := a.TrackProcesses(); err != nil {
		t.Fatal(err)
	}
	write(200, "upf") // an exec whose event is still queued
	set, _ := strategy.Compile([]strategy.Strategy{{Name: "gnb", Class: class(strategy.Critical), CommandRegex: "nr-gnb"}, {Name: "upf", Class: class(strategy.High), CommandRegex: "^upf"}})
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
	if e, ok := rec.Process(200); !ok || e.Class != strategy.High {
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
	rec := NewRecorder()
	a := New(rec, root, t.TempDir(), nil)
	gnb := strategy.Strategy{Name: "gnb", Class: class(strategy.Critical), CommandRegex: "nr-gnb"}
	set1, _ := strategy.Compile([]strategy.Strategy{gnb})
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
	a.index[100] = strategy.Process{PID: 100, Cmdline: "changed-without-an-event"}
	a.mu.Unlock()
	set2, _ := strategy.Compile([]strategy.Strategy{gnb, {Name: "upf", Class: class(strategy.High), CommandRegex: "^upf"}})
	if err := a.SetStrategies(set2); err != nil {
		t.Fatal(err)
	}
	if e, ok := rec.Process(100); !ok || e.Class != strategy.Critical {
		t.Fatalf("pid 100 (strategy gnb unchanged) was matched again: %+v %v", e, ok)
	}
	if e, ok := rec.Process(300); !ok || e.Class != strategy.High {
		t.Fatalf("pid 300 not tried on the new strategy: %+v %v", e, ok)
	}
	// Changing gnb itself re-matches its processes.
	set3, _ := strategy.Compile([]strategy.Strategy{{Name: "gnb", Class: class(strategy.Critical), CommandRegex: "nr-gnb$"}, {Name: "upf", Class: class(strategy.High), CommandRegex: "^upf"}})
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
		rec := NewRecorder()
		a := New(rec, "/proc", "/sys/fs/cgroup", nil)
		if tracking {
			if err := a.TrackProcesses(); err != nil {
				t.Fatal(err)
			}
		}
		for _, c := range []strategy.Class{strategy.Critical, strategy.Background} {
			if err := a.SetStrategies(mustCompile(t, strategy.Strategy{Name: "s", Class: class(c), CommandRegex: marker})); err != nil {
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

func mustCompile(t *testing.T, list ...strategy.Strategy) *strategy.Set {
	t.Helper()
	set, err := strategy.Compile(list)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// A fork runs its parent's program: once tracking, the child's executable
// comes from the parent's index entry (the child here has no exe link to
// read), while its command line (rewritten by workers) and its cgroup (a
// child cloned into another cgroup) are its own, read from procfs. A kernel
// thread's child and a child of a parent outside the index are read whole.
func TestForkReadsTheChildsCmdlineAndCgroup(t *testing.T) {
	root := t.TempDir()
	write := func(pid int, file, content string) {
		d := filepath.Join(root, strconv.Itoa(pid))
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if file == "exe" {
			if err := os.Symlink(content, filepath.Join(d, file)); err != nil {
				t.Fatal(err)
			}
			return
		}
		if err := os.WriteFile(filepath.Join(d, file), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const svc = "0::/system.slice/gnb.service\n"
	write(100, "cmdline", "gnb\x00--cell\x001\x00")
	write(100, "exe", "/opt/gnb/bin/gnb")
	write(100, "cgroup", svc)
	write(2, "cmdline", "") // kthreadd
	write(2, "comm", "kthreadd\n")
	rec := NewRecorder()
	a := New(rec, root, t.TempDir(), nil)
	a.SetCgroupIDFunc(func(string) (uint64, error) { return 42, nil })
	set := mustCompile(t,
		strategy.Strategy{Name: "batch", Class: class(strategy.Background), CgroupPath: "/batch.slice"},
		strategy.Strategy{Name: "workers", Class: class(strategy.High), CommandRegex: "^gnb: worker"},
		strategy.Strategy{Name: "irq", Class: class(strategy.High), CommandRegex: "^irq/"},
		strategy.Strategy{Name: "gnb", Class: class(strategy.Critical), CommandRegex: "^/opt/gnb/bin/gnb$"})
	if err := a.SetStrategies(set); err != nil {
		t.Fatal(err)
	}
	if err := a.TrackProcesses(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		pid                   int
		name, cmdline, cgroup string
		want                  strategy.Class
	}{
		{101, "a plain fork, by its parent's executable", "gnb\x00--cell\x001\x00", svc, strategy.Critical},
		{102, "a worker that rewrote its argv", "gnb: worker 1\x00", svc, strategy.High},
		{103, "a child cloned into /batch.slice", "gnb\x00", "0::/batch.slice/job-7\n", strategy.Background},
	} {
		pid := tc.pid
		write(pid, "cmdline", tc.cmdline)
		write(pid, "cgroup", tc.cgroup)
		if err := a.HandleFork(uint32(pid), 100); err != nil {
			t.Fatal(err)
		}
		if e, ok := rec.Process(uint32(pid)); !ok || e.Class != tc.want {
			t.Errorf("%s: %+v %v, want %s", tc.name, e, ok, tc.want)
		}
	}
	// A new kernel thread gets its name after the fork: read whole.
	write(300, "cmdline", "")
	write(300, "comm", "irq/42-eth0\n")
	write(300, "cgroup", "0::/\n")
	if err := a.HandleFork(300, 2); err != nil {
		t.Fatal(err)
	}
	if e, ok := rec.Process(300); !ok || e.Class != strategy.High {
		t.Errorf("kernel thread irq/42-eth0: %+v %v, want high (matched by its own name)", e, ok)
	}
	// An unknown parent: the child is read whole, its executable too.
	write(201, "cmdline", "other\x00")
	write(201, "exe", "/opt/gnb/bin/gnb")
	write(201, "cgroup", svc)
	if err := a.HandleFork(201, 200); err != nil {
		t.Fatal(err)
	}
	if e, ok := rec.Process(201); !ok || e.Class != strategy.Critical {
		t.Errorf("child of a parent outside the index: %+v %v, want critical (its own exe read)", e, ok)
	}
	// An exec replaces the program: read whole, matched on its own.
	os.WriteFile(filepath.Join(root, "101", "cmdline"), []byte("sleep\x0010\x00"), 0o644)
	if err := a.HandleExec(101); err != nil {
		t.Fatal(err)
	}
	if e, ok := rec.Process(101); ok {
		t.Errorf("pid 101 after exec of sleep (no exe link) still matched: %+v", e)
	}
}

// readProcFile reads past its first buffer when a file is longer (a long
// command line), and reports a missing file as os.ErrNotExist.
func TestReadProcFile(t *testing.T) {
	dir := t.TempDir()
	long := strings.Repeat("argument\x00", 2000) // 18,000 bytes
	name := filepath.Join(dir, "cmdline")
	if err := os.WriteFile(name, []byte(long), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := readProcFile(name)
	if err != nil || string(b) != long {
		t.Fatalf("read %d of %d bytes, err %v", len(b), len(long), err)
	}
	if _, err := readProcFile(filepath.Join(dir, "gone")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v, want os.ErrNotExist", err)
	}
}
