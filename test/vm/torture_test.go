// SPDX-License-Identifier: Apache-2.0
//go:build vmtest

package vm

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/swiftlane/swiftlane/internal/stallprobe"
)

// The torture suite: the stress that ejected the scheduler before (yield,
// affinity and fork stressors left tasks waiting for 30 s), with tasks moved
// between cgroups and a CPU taken offline and back meanwhile, in both modes,
// with and without strategies. Pass: still attached, nothing in the kernel
// log, and no task waited longer than maxTortureWait to run.
//
// SWL_TORTURE_SECONDS sets the stress time per case (default 20);
// SWL_TORTURE_MODES picks the modes (default kernel,userspace);
// SWL_TORTURE_CONFIG is YAML added to every case's configuration (a setting
// under trial, e.g. "queued_wakeup: true").
//
// What it found in user-space mode, repeated in one boot (README "Torture
// suite"): with the critical loops of tortureStrategies, a CPU being
// unplugged (inactive, but in the critical pool until ops.cpu_offline) left
// the critical tasks the whole of the other CPU; the Go process starved, and
// while user space was stalled the BPF side skipped its overdue walk, so the
// RCU kthread waited 20 s behind them, the unplug's synchronize_rcu() with
// it, and the kernel ejected the scheduler for an RCU stall. In both modes,
// a critical pair waking each other straight onto the remaining CPU's
// local queue kept that CPU from ever dispatching (and walking the queues)
// for 2-4 s. critical.h (an inactive CPU leaves the pool), schedext.h's
// local_insert_ok(), overdue.h and usersched's kick_idle_with_local_tasks
// say what changed.

const maxTortureWait = time.Second

// minHotplugs is how many offline/online cycles of a CPU a case must see
// under stress; the stress runs on until they happened, up to tortureCap.
const minHotplugs = 3

// tortureCap bounds a case's stress time when hotplug is slow: 4x the asked
// time, at least 2 minutes (an unplug took up to 6 s on a loaded host).
func tortureCap(d time.Duration) time.Duration {
	return max(4*d, 2*time.Minute)
}

// tortureStrategies puts every class on the stressors: critical tasks that
// yield and switch in loops (their CPU budget must hold), background hogs,
// and a cgroup strategy on the cgroup the tasks are moved into and out of.
const tortureStrategies = `strategies:
  - name: loops
    class: critical
    command_regex: 'stress-ng-(yield|switch)'
    inherit: true
  - name: hogs
    class: background
    command_regex: 'stress-ng-cpu'
  - name: moved
    class: high
    cgroup_path: /swl-torture/b
`

func TestTorture(t *testing.T) {
	secs := 20
	if v, err := strconv.Atoi(os.Getenv("SWL_TORTURE_SECONDS")); err == nil && v > 0 {
		secs = v
	}
	modes := []string{"kernel", "userspace"}
	if m := os.Getenv("SWL_TORTURE_MODES"); m != "" {
		modes = strings.Split(m, ",")
	}
	for _, mode := range modes {
		for _, cfg := range []struct{ name, config string }{{"none", noStrategies}, {"strategies", tortureStrategies}} {
			t.Run(mode+"/"+cfg.name, func(t *testing.T) {
				torture(t, mode, os.Getenv("SWL_TORTURE_CONFIG")+"\n"+cfg.config, time.Duration(secs)*time.Second)
			})
		}
	}
}

func torture(t *testing.T, mode, config string, d time.Duration) {
	mark := logMark(t)
	a, b := tortureCgroups(t)

	var p *schedProc
	switch mode {
	case "kernel":
		p = startScheduler(t, config)
	case "userspace":
		p = startUserScheduler(t, config)
	default:
		t.Fatalf("unknown mode %q", mode)
	}
	_, ops := readState()

	n := strconv.Itoa(runtime.NumCPU())
	cg, err := os.Open(a)
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Close()
	// --verbose: by default stress-ng reports a stressor that died of a
	// signal, or whose bogo-op checksum did not match, only at its debug
	// and fail levels, so a run can end "unsuccessful" (exit 2) with no line
	// saying which stressor or why. stressNGReport keeps the lines that do.
	// Its own timeout is only a cap: the loop below ends it (SIGINT, a clean
	// exit) once it has run d and the CPU has gone through minHotplugs
	// offline/online cycles. On a slow or loaded host an unplug can take 6 s,
	// and a fixed stress time would then end the torture before it happened.
	stress := exec.Command("stress-ng", "--verbose", "--temp-path", t.TempDir(), "--aggressive",
		"--cpu", n, "--fork", n, "--affinity", n, "--affinity-pin", "--schedpolicy", n,
		"--yield", n, "--switch", n, "--timeout", fmt.Sprintf("%ds", int(tortureCap(d).Seconds())))
	stressOut := &syncBuffer{}
	stress.Stdout, stress.Stderr = stressOut, stressOut
	// Started inside cgroup a (clone3 with CLONE_INTO_CGROUP): no task of it runs outside.
	stress.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.Fd())}
	stall := startStallProbe(t)
	started := time.Now()
	if err := stress.Start(); err != nil {
		t.Fatalf("stress-ng: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- stress.Wait() }()
	t.Cleanup(func() {
		stress.Process.Kill()
		for _, dir := range []string{a, b} {
			evictStrangers(dir)
			os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0)
		}
	})

	// From when every stressor runs until stress-ng ends: every 200 ms every
	// task of one cgroup moves to the other (a move waits for an RCU grace
	// period, so under this load a round takes longer), and, meanwhile,
	// every 2 s the last CPU goes offline for half a second. Not before:
	// a move write-locks the cgroup threadgroup lock that every fork takes,
	// so moving stress-ng while it forks its stressors stretched its start
	// to 20-55 s (the fork stressor still forks under the moves).
	cpu := fmt.Sprintf("/sys/devices/system/cpu/cpu%d/online", runtime.NumCPU()-1)
	t.Cleanup(func() { os.WriteFile(cpu, []byte("1"), 0) })
	stop := make(chan struct{})
	running := make(chan struct{}) // closed once every stressor runs
	stopHotplug := sync.OnceFunc(func() { close(stop) })
	t.Cleanup(stopHotplug) // also when the test fails before the end
	hotplugged := make(chan int, 1)
	var cycles atomic.Int32 // offline/online cycles so far
	// The longest offline write: the unplug stops every CPU (stop_machine),
	// so no task runs meanwhile, under any scheduler; under TCG it is slow,
	// and it adds to the run-queue waits measured below.
	var slowestUnplug time.Duration
	go func() {
		defer func() { hotplugged <- int(cycles.Load()) }()
		if runtime.NumCPU() < 2 {
			return
		}
		select {
		case <-stop:
			return
		case <-running:
		}
		for state := "0"; ; {
			// Online 1.5 s, offline 0.5 s: long enough to unplug with
			// every queue full, short enough that the guest is not mostly
			// a one-CPU machine (its tasks would then wait for the one
			// CPU's round, not for the scheduler).
			d := 1500 * time.Millisecond
			if state == "1" {
				d = 500 * time.Millisecond
			}
			select {
			case <-stop:
				return
			case <-time.After(d):
			}
			began := time.Now()
			if err := stuckGuard(p, mark, "cpu hotplug", func() error { return os.WriteFile(cpu, []byte(state), 0) }); err != nil {
				t.Errorf("write %s to %s: %v", state, cpu, err)
				return
			}
			if state == "0" {
				slowestUnplug = max(slowestUnplug, time.Since(began))
			}
			if state == "1" {
				cycles.Add(1)
				state = "0"
			} else {
				state = "1"
			}
		}
	}()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var moves, moved int
	from, to := a, b
	var stressErr error
	wantCycles := int32(minHotplugs)
	if runtime.NumCPU() < 2 {
		wantCycles = 0
	}
	interrupted := false
	// The stress time counts from when every stressor runs: a SIGINT while
	// stress-ng still forks them ends the run "unsuccessful" (exit 2, its
	// "abort signal during startup") or, before its handler is set, kills it.
	var runningAt time.Time
	// Checked after every task moved too: a round of moves can take 10 s
	// under user-space mode, and the case should not run that much longer.
	interrupt := func() {
		if !interrupted && time.Since(runningAt) >= d && moved > 0 && cycles.Load() >= wantCycles {
			stress.Process.Signal(syscall.SIGINT)
			interrupted = true
		}
	}
loop:
	for {
		select {
		case stressErr = <-done:
			break loop
		case <-tick.C:
		}
		if runningAt.IsZero() {
			if !stressorsStarted.MatchString(stressOut.String()) {
				continue
			}
			runningAt = time.Now()
			close(running)
			t.Logf("%s: stress-ng started its stressors in %v", mode, runningAt.Sub(started).Round(time.Millisecond))
		}
		interrupt()
		moveTasks(t, p, mark, from, to, func() { moved++; interrupt() })
		moves++
		from, to = to, from
	}
	stopHotplug()
	hotplugs := <-hotplugged
	os.WriteFile(cpu, []byte("1"), 0)
	t.Logf("%s: stress-ng said:\n%s", mode, stressNGReport(stressOut.String()))
	if stressErr != nil {
		t.Errorf("stress-ng: %v", stressErr)
	}
	if runningAt.IsZero() {
		t.Errorf("stress-ng never said that every stressor runs (no line matching %q), so no cgroup move or hotplug ran", stressorsStarted)
	}
	t.Logf("%s: stress-ng ran %v; %d cgroup moves (%d tasks), %d offline/online cycles (slowest unplug %v)",
		mode, time.Since(started).Round(time.Millisecond), moves, moved, hotplugs, slowestUnplug.Round(time.Millisecond))
	if moved == 0 || (runtime.NumCPU() > 1 && hotplugs < minHotplugs) {
		t.Errorf("the torture did not happen: %d tasks moved, %d hotplug cycles", moved, hotplugs)
	}

	if !p.alive() {
		t.Fatalf("the scheduler exited under torture:\n%s", p.out)
	}
	requireState(t, "enabled", ops)
	platform := stall()
	m := p.scrape(t)
	wait := time.Duration(m["swiftlane_runqueue_wait_max_seconds"] * float64(time.Second))
	t.Logf("%s: longest run-queue wait %v; overdue dispatches %.0f (kernel mode), preempted RCU readers queued first %.0f, rescued from user space %.0f, heartbeat kicks of idle-looking CPUs %.0f",
		mode, wait.Round(time.Millisecond), m["swiftlane_dispatch_total{path=overdue}"], m["swiftlane_dispatch_total{path=rcu_reader}"],
		m["swiftlane_dispatch_total{path=rescued}"], m["swiftlane_user_idle_kicks_total"])
	// Which classes waited long: the histogram's buckets are powers of
	// two of µs, so 2^19 µs (0.52 s) is the last one below the bound.
	var slow []string
	for _, class := range []string{"critical", "high", "normal", "background"} {
		k := "swiftlane_runqueue_wait_seconds{class=" + class + "}"
		if n := m[k+"_count"] - m[k+"{le=0.524288}"]; n > 0 {
			slow = append(slow, fmt.Sprintf("%s %.0f of %.0f", class, n, m[k+"_count"]))
		}
	}
	if len(slow) > 0 {
		t.Logf("%s: waits over 0.52 s by class: %s", mode, strings.Join(slow, ", "))
	}
	// The bound holds for the time the guest ran: a stall that even a
	// SCHED_FIFO thread saw (the vCPU thread descheduled on a loaded host,
	// an unplug's stop_machine) stopped every task under any scheduler.
	bound := maxTortureWait + platform
	t.Logf("%s: longest wake-up delay of a SCHED_FIFO thread (the guest's own stalls) %v; bound %v", mode, platform.Round(time.Millisecond), bound.Round(time.Millisecond))
	if wait > bound {
		t.Errorf("a runnable task waited %v to run (bound %v = %v + the guest's longest stall %v)",
			wait.Round(time.Millisecond), bound.Round(time.Millisecond), maxTortureWait, platform.Round(time.Millisecond))
	}
	if err := p.stop(); err != nil {
		t.Errorf("scheduler exit: %v", err)
	}
	checkKernelLog(t, mark)
}

// startStallProbe runs the stall probe (package stallprobe: cyclictest's
// one SCHED_FIFO thread, every 10 ms, no CPU affinity so it survives the
// unplugs) beside the torture: its longest wake-up delay is what the guest
// itself lost, host load on the vCPU threads under TCG or an unplug's
// stop_machine. The returned func ends it and returns that delay.
func startStallProbe(t *testing.T) func() time.Duration {
	t.Helper()
	p, err := stallprobe.Start()
	if err != nil {
		t.Fatal(err)
	}
	done := false
	t.Cleanup(func() {
		if !done {
			p.Kill()
		}
	})
	return func() time.Duration {
		done = true
		d, err := p.Stop()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
}

// tortureCgroups makes /swl-torture/{a,b} with the cpu controller on, so a
// move changes the task's cpu cgroup (and the scheduler's cgroup weights).
func tortureCgroups(t *testing.T) (a, b string) {
	t.Helper()
	enableCPUController(t, ".")
	root := filepath.Join(cgroupFS, "swl-torture")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	enableCPUController(t, "swl-torture")
	a, b = filepath.Join(root, "a"), filepath.Join(root, "b")
	for _, d := range []string{a, b} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeCgroupFile(t, filepath.Join(b, "cpu.weight"), "300")
	t.Cleanup(func() {
		for _, d := range []string{a, b, root} {
			// Killed tasks leave their cgroup asynchronously.
			deadline := time.Now().Add(stateTimeout)
			for os.Remove(d) != nil && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
		}
	})
	return a, b
}

// moveTasks moves every task of cgroup from into cgroup to, calling
// movedOne after each task that moved (tasks exit meanwhile: the fork
// stressor's children live microseconds).
//
// A move writes a PID read a moment before, and the fork stressor recycles
// PIDs fast: if that process has exited and its PID now names a thread of
// another process, the write moves that whole process. One torture run lost
// the test binary so: moved into a torture cgroup, it was killed with it at
// cleanup. So a move skips what is not stress-ng just before it writes, a
// PID that went to a kernel thread meanwhile (EINVAL) is skipped like one
// that is gone (ESRCH), and evictStrangers runs before a cgroup is killed.
func moveTasks(t *testing.T, p *schedProc, mark int, from, to string, movedOne func()) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(from, "cgroup.procs"))
	if err != nil {
		t.Fatal(err)
	}
	for _, pid := range strings.Fields(string(b)) {
		if !isStressNG(pid) {
			continue
		}
		err := stuckGuard(p, mark, "cgroup move", func() error {
			return os.WriteFile(filepath.Join(to, "cgroup.procs"), []byte(pid), 0)
		})
		switch {
		case err == nil:
			movedOne()
		case errors.Is(err, syscall.ESRCH), errors.Is(err, syscall.EINVAL):
		default:
			t.Fatalf("move %s to %s: %v", pid, to, err)
		}
	}
}

// isStressNG says whether pid is a stress-ng process (its stressors are
// named stress-ng-cpu, stress-ng-fork, ...); false once it is gone.
func isStressNG(pid string) bool {
	comm, err := os.ReadFile("/proc/" + pid + "/comm")
	return err == nil && strings.HasPrefix(string(comm), "stress-ng")
}

// evictStrangers moves every process of cgroup dir that is not stress-ng to
// the root cgroup, before the cgroup is killed (see moveTasks).
func evictStrangers(dir string) {
	b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	for _, pid := range strings.Fields(string(b)) {
		if !isStressNG(pid) {
			os.WriteFile(filepath.Join(cgroupFS, "cgroup.procs"), []byte(pid), 0)
		}
	}
}

// stuckAfter is how long a cgroup move or a hotplug write may block: far
// beyond a loaded round (a few seconds), far below the VM run's timeout.
const stuckAfter = 90 * time.Second

// stuckGuard runs a write that blocks in the kernel until it is done. A write
// still blocked after stuckAfter means the kernel is wedged with the
// scheduler attached (the watchdog would have ejected it for a task left
// runnable): the blocked tasks' stacks go to the kernel log (sysrq w), the
// log and the scheduler's output go to stderr, and the scheduler is killed
// to see whether that unwedges the kernel. If it does, the error says so and
// the test fails; if not, the test binary exits at once rather than hang
// until the VM's timeout with nothing to show.
func stuckGuard(p *schedProc, mark int, what string, write func() error) error {
	done := make(chan error, 1)
	go func() { done <- write() }()
	select {
	case err := <-done:
		return err
	case <-time.After(stuckAfter):
	}
	log := blockedTasks()
	state, ops := readState()
	if mark > len(log) {
		mark = 0
	}
	fmt.Fprintf(os.Stderr, "torture: %s blocked for %v; sched_ext state %q (%s)\n"+
		"--- kernel log since the case began (blocked tasks last):\n%s\n--- scheduler output:\n%s\n",
		what, stuckAfter, state, ops, log[mark:], p.out)
	p.cmd.Process.Kill()
	select {
	case <-done:
		return fmt.Errorf("%s blocked for %v with the scheduler attached (%s); killing the scheduler unblocked it: see the kernel log above", what, stuckAfter, ops)
	case <-time.After(time.Minute):
	}
	fmt.Fprintf(os.Stderr, "FAIL: torture: %s still blocked a minute after the scheduler was killed; the kernel is wedged\n", what)
	os.Exit(3)
	return nil
}

// stressorsStarted matches stress-ng's debug line saying that it has forked
// every stressor and set its own SIGINT handler ("stress-ng: debug: [pid]
// 24 stressors started"; "spawned" in releases after Debian 12's 0.15.06).
var stressorsStarted = regexp.MustCompile(`\] \d+ stressors? (started|spawned)\n`)

// stressNGReport keeps from stress-ng's --verbose output what says how the
// run went: its info, warning, error and fail lines, and the debug lines
// about a stressor ending other than by returning (a signal, SIGKILL, the
// OOM killer, a non-zero exit). The debug lines about each start and stop
// are dropped: there are hundreds.
func stressNGReport(out string) string {
	var keep []string
	for _, l := range strings.Split(out, "\n") {
		switch {
		case l == "":
		case !strings.Contains(l, " debug: "):
			keep = append(keep, l)
		case strings.Contains(l, "signal"), strings.Contains(l, "SIGKILL"), strings.Contains(l, "killed"),
			strings.Contains(l, "exit status"), strings.Contains(l, "aborted"), strings.Contains(l, "metrics-check"):
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}
