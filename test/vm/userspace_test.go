// SPDX-License-Identifier: Apache-2.0
//go:build vmtest

package vm

// User-space mode (package usersched): the policy runs in a Go process.
// Some tests run `swiftlane run --mode userspace`; the GC and ring-full
// tests use the package in this test process, which then is the scheduler.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/swiftlane/swiftlane/internal/userringbuf/ringtest"
	"github.com/swiftlane/swiftlane/usersched"
)

const userOps = "swiftlane_user"

// userAttachTimeout: before attaching, Open locks all of the process's
// memory, which reads the whole 36 MB binary over the lab's 9p share
// (about 1-2 MB/s under TCG, 15-30 s) where kernel mode faults in only the
// pages it runs.
const userAttachTimeout = 3 * attachTimeout

// startUserScheduler is startScheduler for `swiftlane run --mode userspace`.
func startUserScheduler(t testing.TB, config string, args ...string) *schedProc {
	t.Helper()
	cmd := runCommand(t, config, append([]string{"--mode", "userspace"}, args...)...)
	return startProc(t, cmd, "swiftlane: attached", userOps, userAttachTimeout)
}

// The user ring buffer producer and the ring buffer consumer against this
// kernel's implementation (a BPF program drains one into the other).
func TestUserspaceRingBuffersAgainstKernel(t *testing.T) { ringtest.Check(t) }

func TestUserspaceAttachDetachCycles(t *testing.T) {
	mark := logMark(t)
	startNiceStress(t, "--cpu", fmt.Sprint(2*runtime.NumCPU()))
	for i := 0; i < 3; i++ {
		start := time.Now()
		p := startUserScheduler(t, noStrategies)
		t.Logf("cycle %d: attached after %v", i, time.Since(start).Round(time.Millisecond))
		if err := p.stop(); err != nil {
			t.Fatalf("cycle %d: swiftlane exited with %v\n%s", i, err, p.out)
		}
		waitState(t, "disabled")
		if !strings.Contains(p.out.String(), "detached: unregistered from user space") {
			t.Fatalf("cycle %d: no clean detach reported:\n%s", i, p.out)
		}
	}
	checkKernelLog(t, mark)
}

// The core's stress (hogs on every CPU, a fork storm, tasks hopping between
// CPUs), through each built-in policy.
func TestUserspaceSurvivesStress(t *testing.T) {
	for _, policy := range []string{"vruntime", "fifo"} {
		t.Run(policy, func(t *testing.T) {
			mark := logMark(t)
			p := startUserScheduler(t, noStrategies, "--policy", policy)
			n := fmt.Sprint(runtime.NumCPU())
			cmd := exec.Command("stress-ng", "--temp-path", t.TempDir(), "--quiet",
				"--cpu", n, "--fork", n, "--affinity", n, "--switch", n, "--timeout", "20s")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("stress-ng: %v\n%s", err, out)
			}
			if !p.alive() {
				t.Fatalf("swiftlane exited during the stress run:\n%s", p.out)
			}
			requireState(t, "enabled", userOps)
			m := p.scrape(t)
			t.Logf("%s: %.0f decisions applied, %.0f stale, %.0f bounced, %.0f fallback, %.0f loop passes; round trip avg %.2f ms, max %.0f ms",
				policy, m["swiftlane_user_decisions_total{result=applied}"], m["swiftlane_user_decisions_total{result=stale}"],
				m["swiftlane_user_decisions_total{result=bounced}"], m["swiftlane_dispatch_total{path=fallback}"],
				m["swiftlane_user_loop_iterations_total"],
				1e3*m["swiftlane_user_round_trip_seconds_total"]/m["swiftlane_user_round_trips_total"],
				1e3*m["swiftlane_user_round_trip_max_seconds"])
			if m["swiftlane_user_decisions_total{result=applied}"] < 1000 {
				t.Fatalf("only %v decisions from user space under stress", m["swiftlane_user_decisions_total{result=applied}"])
			}
			if err := p.stop(); err != nil {
				t.Fatal(err)
			}
			checkKernelLog(t, mark)
		})
	}
}

func TestUserspaceKill9RestoresDefaultScheduler(t *testing.T) {
	p := startUserScheduler(t, noStrategies)
	saturate(t)
	p.cmd.Process.Kill()
	p.wait(stateTimeout)
	waitState(t, "disabled")
	ctx := runCtx(t, 60*time.Second)
	if out, err := exec.CommandContext(ctx, "sh", "-c", "echo alive").CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "alive" {
		t.Fatalf("a new task did not run after kill -9: %v %q", err, out)
	}
}

// A critical strategy is served in BPF: the probe's tasks never go through
// user space, and it still gets its replies under saturation.
func TestUserspaceCriticalStaysInBPF(t *testing.T) {
	mark := logMark(t)
	p := startUserScheduler(t, `strategies:
  - name: probe
    class: critical
    command_regex: 'swiftlane probe'
`)
	startStress(t, "--cpu", fmt.Sprint(2*runtime.NumCPU()))
	bin := swiftlaneBin(t)
	ctx, cancel := context.WithCancel(context.Background())
	echo := exec.CommandContext(ctx, bin, "probe", "echo", "--listen", "127.0.0.1:7778")
	if err := echo.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); echo.Wait() }()
	out, err := exec.Command(bin, "probe", "rtt", "--target", "127.0.0.1:7778", "--samples", "200", "--interval", "1ms").CombinedOutput()
	if err != nil {
		t.Fatalf("probe: %v\n%s", err, out)
	}
	m := p.waitMetric(t, "critical dispatches", func(m map[string]float64) bool {
		return m["swiftlane_dispatch_total{path=critical}"] >= 200 && m["swiftlane_strategy_processes{class=critical}"] >= 1
	})
	t.Logf("critical dispatches %v, user decisions %v", m["swiftlane_dispatch_total{path=critical}"], m["swiftlane_user_decisions_total{result=applied}"])
	checkKernelLog(t, mark)
}

// The example policy, built with `go build` (make test-vm builds it next
// to swiftlane): the stress-ng-cpu workers get the reserved CPU, the
// matrix workers never run on it.
func TestUserspaceExampleReservesCPU(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Fatal("needs 2 CPUs")
	}
	bin := filepath.Join(filepath.Dir(swiftlaneBin(t)), "reservecpu")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("example not built: %v (make vm-bins builds it: go build ./examples/reservecpu)", err)
	}
	mark := logMark(t)
	reserved := runtime.NumCPU() - 1
	p := startProc(t, exec.Command(bin, "-comm", "stress-ng-cpu", "-cpu", fmt.Sprint(reserved)), "reservecpu: attached", userOps, userAttachTimeout)
	critical := startStress(t, "--cpu", "1")
	others := startStress(t, "--matrix", fmt.Sprint(2*runtime.NumCPU()))
	// Workers forked after the attach are placed by the policy from their
	// first run: sample once they all exist.
	waitWorkers(t, critical.Process.Pid, 1)
	waitWorkers(t, others.Process.Pid, 2*runtime.NumCPU())
	onReserved, elsewhere, samples := 0, 0, 0
	for i := 0; i < 50; i++ {
		for _, w := range workers(t, others.Process.Pid) {
			if cpu, ok := lastCPU(w); ok && cpu == reserved {
				t.Fatalf("matrix worker %d ran on the reserved CPU %d", w, reserved)
			}
		}
		for _, w := range workers(t, critical.Process.Pid) {
			if cpu, ok := lastCPU(w); ok {
				samples++
				if cpu == reserved {
					onReserved++
				} else {
					elsewhere++
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	if samples == 0 || onReserved < samples*9/10 {
		t.Fatalf("the cpu worker was on the reserved CPU in %d of %d samples (elsewhere %d)", onReserved, samples, elsewhere)
	}
	if err := p.stop(); err != nil {
		t.Fatalf("reservecpu: %v\n%s", err, p.out)
	}
	waitState(t, "disabled")
	checkKernelLog(t, mark)
}

// workers are the child processes of a stress-ng parent.
func workers(t testing.TB, parent int) []int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", parent, parent))
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// waitWorkers waits until a stress-ng parent has forked n workers (procfs
// has no notification for it: poll).
func waitWorkers(t testing.TB, parent, n int) {
	t.Helper()
	deadline := time.Now().Add(stateTimeout)
	for len(workers(t, parent)) < n {
		if time.Now().After(deadline) {
			t.Fatalf("stress-ng %d started %d of its %d workers in %v", parent, len(workers(t, parent)), n, stateTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// lastCPU is field 39 of /proc/PID/stat: the CPU the task last ran on.
func lastCPU(pid int) (int, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:]) // after "pid (comm) "
	if len(fields) < 37 {
		return 0, false
	}
	cpu, err := strconv.Atoi(fields[36])
	return cpu, err == nil
}

// inProcess runs the scheduler in this test process until the test ends.
type inProcess struct {
	s      *usersched.Scheduler
	done   chan struct{}
	exit   *usersched.ExitInfo
	err    error
	cancel context.CancelFunc
}

func runInProcess(t *testing.T, opts usersched.Options, p usersched.Policy) *inProcess {
	t.Helper()
	s, err := usersched.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Attach(); err != nil {
		s.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ip := &inProcess{s: s, done: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(ip.done)
		ip.exit, ip.err = s.Run(ctx, p)
	}()
	t.Cleanup(func() {
		ip.cancel()
		<-ip.done
		s.Close()
		waitState(t, "disabled")
	})
	requireState(t, "enabled", userOps)
	// What Open promises the dispatch path: memory locked, GOMAXPROCS set.
	if n := runtime.GOMAXPROCS(0); opts.GOMAXPROCS == 0 && n != min(2, runtime.NumCPU()) {
		t.Fatalf("GOMAXPROCS %d after Open, want %d", n, min(2, runtime.NumCPU()))
	}
	if !opts.NoMemoryLock {
		if statusKB(t, "VmLck") == 0 {
			t.Fatal("no memory locked after Open: mlockall did not take")
		}
	}
	return ip
}

// statusKB reads a "Name:  N kB" line of /proc/self/status.
func statusKB(t testing.TB, name string) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			kb, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			if err != nil {
				t.Fatalf("/proc/self/status %s: %q", name, line)
			}
			return kb
		}
	}
	t.Fatalf("/proc/self/status has no %s", name)
	return 0
}

func (ip *inProcess) stats(t testing.TB) usersched.Stats {
	t.Helper()
	st, err := ip.s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func (ip *inProcess) requireRunning(t testing.TB) {
	t.Helper()
	select {
	case <-ip.done:
		t.Fatalf("the loop stopped: exit %v, err %v", ip.exit, ip.err)
	default:
	}
	requireState(t, "enabled", userOps)
}

// A storm of forced garbage collections in the scheduler's own process,
// with every CPU busy: the scheduler stays attached (no watchdog exit) and
// decisions keep coming with a bounded delay.
func TestUserspaceGCStorm(t *testing.T) {
	mark := logMark(t)
	ip := runInProcess(t, usersched.Options{}, usersched.NewVruntime(0, 0))
	n := fmt.Sprint(runtime.NumCPU())
	startStress(t, "--cpu", n, "--switch", n)
	time.Sleep(3 * time.Second)
	base := ip.stats(t)
	time.Sleep(5 * time.Second)
	calm := ip.stats(t)

	ctx, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	var garbage [][]byte
	gcs := 0
	for ctx.Err() == nil {
		for i := 0; i < 64; i++ {
			garbage = append(garbage, make([]byte, 64<<10))
		}
		garbage = garbage[:0]
		runtime.GC()
		gcs++
	}
	storm := ip.stats(t)
	ip.requireRunning(t)

	quiet := calm.RoundTripHist.Sub(base.RoundTripHist)
	during := storm.RoundTripHist.Sub(calm.RoundTripHist)
	decisions := storm.Applied - calm.Applied
	t.Logf("%d forced GCs in 10 s; %d decisions during the storm (%d in the 5 s before); round trip p50/p99/max bucket: before %v/%v/%v, during %v/%v/%v; fallback %d, rescued %d",
		gcs, decisions, calm.Applied-base.Applied, quiet.Quantile(0.5), quiet.Quantile(0.99), quiet.Quantile(1),
		during.Quantile(0.5), during.Quantile(0.99), during.Quantile(1), storm.Fallback-calm.Fallback, storm.Rescued-calm.Rescued)
	if gcs < 10 || decisions < 100 {
		t.Fatalf("%d GCs, %d decisions: the storm or the loop did not run", gcs, decisions)
	}
	// Far below the kernel's 30 s watchdog, even under TCG.
	if worst := during.Quantile(1); worst > 4*time.Second {
		t.Fatalf("a decision took up to %v during the GC storm", worst)
	}
	checkKernelLog(t, mark)
}

// blockOnce is a policy that, when armed, blocks on the next task until
// released: the loop stops reading the ring meanwhile.
type blockOnce struct {
	usersched.Policy
	arm, blocked, release chan struct{}
}

func (b *blockOnce) Enqueue(t *usersched.Task) {
	select {
	case <-b.arm:
		close(b.blocked)
		<-b.release
	default:
	}
	b.Policy.Enqueue(t)
}

// With the loop stuck, the ring to user space fills up and tasks are
// dispatched in BPF (fallback); past StallNs the tasks already in the ring
// are taken back too (rescued). Both are counted, none is lost: the load
// completes, and every request sent to user space is answered once the loop
// runs again.
func TestUserspaceRingFullFallback(t *testing.T) {
	mark := logMark(t)
	p := &blockOnce{Policy: usersched.NewFIFO(), arm: make(chan struct{}, 1), blocked: make(chan struct{}), release: make(chan struct{})}
	released := false
	release := func() {
		if !released {
			released = true
			close(p.release)
		}
	}
	ip := runInProcess(t, usersched.Options{QueueSize: 16, StallNs: 2_000_000_000}, p) // one page: 42 tasks
	t.Cleanup(release)                                                                 // runs before runInProcess's
	// More runnable tasks than the ring holds.
	stress := exec.Command("stress-ng", "--temp-path", t.TempDir(), "--quiet", "--cpu", "48", "--switch", "4", "--timeout", "20s")
	stress.Stdout, stress.Stderr = os.Stderr, os.Stderr
	if err := stress.Start(); err != nil {
		t.Fatal(err)
	}
	// Block only once every hog runs, going through user space after each
	// slice: blocked earlier, the loop would freeze stress-ng before it
	// forked them all, and the ring would never fill.
	waitWorkers(t, stress.Process.Pid, 48+4)
	waitStats(t, ip, "the hogs to cycle through user space", func(st usersched.Stats) bool { return st.Applied > 2000 })
	before := ip.stats(t)
	p.arm <- struct{}{}
	select {
	case <-p.blocked:
	case <-time.After(stateTimeout):
		t.Fatal("the loop never took another task")
	}
	during := waitStats(t, ip, "ring-full fallback and stall rescue", func(st usersched.Stats) bool {
		return st.Fallback > before.Fallback && st.Rescued > before.Rescued
	})
	release()
	if err := stress.Wait(); err != nil {
		t.Fatalf("stress-ng did not complete: %v", err)
	}
	ip.requireRunning(t)
	st := waitStats(t, ip, "every request answered", func(st usersched.Stats) bool { return st.Sent == st.Applied+st.Stale })
	t.Logf("loop blocked: %d fallback (ring full), %d rescued (stall); overall sent %d, applied %d, stale %d",
		during.Fallback-before.Fallback, during.Rescued-before.Rescued, st.Sent, st.Applied, st.Stale)
	checkKernelLog(t, mark)
}

// holdPID is a policy that never dispatches the tasks of one process
// (tgid, 0 for none): the BPF side must take each back once user space has
// held it overdue_ns (250 ms).
type holdPID struct {
	usersched.Policy
	tgid atomic.Int32
}

func (h *holdPID) Enqueue(t *usersched.Task) {
	if tg := h.tgid.Load(); tg != 0 && int32(t.TGID) == tg {
		return // held: the kernel still waits for a decision
	}
	h.Policy.Enqueue(t)
}

// A task the policy holds is taken back after overdue_ns and runs, and the
// walk that finds such tasks runs only while one may be that old. It used
// to run on every busy CPU every 4 ms, and a walk over the hash map of
// outstanding requests visits all of its 32,768 buckets: most of a CPU
// under TCG (the req_epochs comment in usersched.bpf.c).
func TestUserspaceHeldTaskRescued(t *testing.T) {
	mark := logMark(t)
	p := &holdPID{Policy: usersched.NewFIFO()}
	ip := runInProcess(t, usersched.Options{}, p)
	stress := exec.Command("stress-ng", "--temp-path", t.TempDir(), "--quiet", "--cpu", "4", "--timeout", "60s")
	stress.Stdout, stress.Stderr = os.Stderr, os.Stderr
	if err := stress.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stress.Process.Kill(); stress.Wait() })
	waitWorkers(t, stress.Process.Pid, 4)
	hog := exec.Command("sh", "-c", "while :; do :; done")
	if err := hog.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hog.Process.Kill(); hog.Wait() })
	waitStats(t, ip, "the hogs to cycle through user space", func(st usersched.Stats) bool { return st.Applied > 1000 })

	// Nothing held: a window of busy CPUs with (almost) no walk. A round
	// trip past 250 ms, which TCG can cause, is a reason to walk; a CPU
	// walking on its 4 ms clock would make hundreds.
	const window = 3 * time.Second
	before := ip.stats(t)
	time.Sleep(window) // a measurement window, not a wait for an event
	calm := ip.stats(t)
	if walks := calm.RequestWalks - before.RequestWalks; walks > 30 {
		t.Errorf("%d walks over the outstanding requests in %v with none held (%d decisions)", walks, window, calm.Applied-before.Applied)
	}

	ran := func() int64 { // the hog's CPU time, ns
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", hog.Process.Pid))
		if err != nil {
			t.Fatal(err)
		}
		ns, _ := strconv.ParseInt(strings.Fields(string(b))[0], 10, 64)
		return ns
	}
	ran0 := ran()
	p.tgid.Store(int32(hog.Process.Pid))
	held := waitStats(t, ip, "the held process taken back three times", func(st usersched.Stats) bool { return st.Rescued >= calm.Rescued+3 })
	p.tgid.Store(0)
	if held.RequestWalks == calm.RequestWalks {
		t.Error("tasks were taken back without a walk")
	}
	if ran() <= ran0 {
		t.Error("the held process never ran: a task taken back must be dispatched")
	}
	t.Logf("none held: %d walks, %d decisions in %v; held: %d rescued with %d walks",
		calm.RequestWalks-before.RequestWalks, calm.Applied-before.Applied, window, held.Rescued-calm.Rescued, held.RequestWalks-calm.RequestWalks)
	ip.requireRunning(t)
	checkKernelLog(t, mark)
}

// waitStats polls the scheduler's counters (they have no change
// notification) until cond holds, or fails after a deadline.
func waitStats(t testing.TB, ip *inProcess, what string, cond func(usersched.Stats) bool) usersched.Stats {
	t.Helper()
	deadline := time.Now().Add(2 * stateTimeout)
	for {
		st := ip.stats(t)
		if cond(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s: %+v", what, st)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
