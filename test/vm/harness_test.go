// SPDX-License-Identifier: Apache-2.0
//go:build vmtest

// Package vm holds the tests that need a real sched_ext kernel. They run as
// root inside the VM lab (`make test-vm` boots it) against the real
// swiftlane binary, real stress-ng load and the kernel's own sysfs state.
package vm

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Under TCG everything is 20-50x slower than on hardware: generous deadlines.
const (
	attachTimeout = 90 * time.Second
	stateTimeout  = 30 * time.Second
)

func TestMain(m *testing.M) {
	if helper := os.Getenv("SWL_HELPER"); helper != "" {
		os.Exit(runHelper(helper))
	}
	if _, err := os.Stat("/sys/kernel/sched_ext/state"); err != nil {
		fmt.Fprintln(os.Stderr, "vm tests need a sched_ext kernel: run them with `make test-vm`")
		os.Exit(1)
	}
	code := m.Run()
	stopClusterNode() // the cluster tests share one node
	os.Exit(code)
}

func swiftlaneBin(t testing.TB) string {
	b := os.Getenv("SWIFTLANE_BIN")
	if b == "" {
		b = "build/swiftlane"
	}
	abs, err := filepath.Abs(b)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(abs); err != nil {
		t.Fatalf("swiftlane binary: %v (set SWIFTLANE_BIN)", err)
	}
	return abs
}

// syncBuffer collects a process's output for assertions and failure logs.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// schedProc is a running `swiftlane run`.
type schedProc struct {
	t        testing.TB
	cmd      *exec.Cmd
	out      *syncBuffer
	attached chan struct{}
	done     chan struct{}
	metrics  string // host:port
	exitErr  error
}

var metricsRE = regexp.MustCompile(`metrics on http://([^/]+)/metrics`)

// startScheduler runs `swiftlane run` with the given config and waits until
// it reports that it attached (its own "attached" line, printed after the
// kernel accepted it).
func startScheduler(t testing.TB, config string) *schedProc {
	t.Helper()
	return startProc(t, runCommand(t, config), "swiftlane: attached", "swiftlane", attachTimeout)
}

// spawnScheduler starts `swiftlane run` with the given config without
// waiting for it to attach; onLine, if not nil, sees every line it writes
// to stderr as it comes.
func spawnScheduler(t testing.TB, config string, onLine func(string)) *schedProc {
	t.Helper()
	return spawnProc(t, runCommand(t, config), "swiftlane: attached", onLine)
}

// runCommand is `swiftlane run` with config written to a file, its metrics
// on a free port, and args after.
func runCommand(t testing.TB, config string, args ...string) *exec.Cmd {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "swiftlane.yaml")
	if err := os.WriteFile(cfg, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	argv := append([]string{"run", "--config", cfg, "--metrics-addr", "127.0.0.1:0"}, args...)
	return exec.Command(swiftlaneBin(t), argv...)
}

// startProc runs a scheduler process, waits up to timeout for its attached
// line, and checks that the kernel runs ops.
func startProc(t testing.TB, cmd *exec.Cmd, attachedLine, ops string, timeout time.Duration) *schedProc {
	t.Helper()
	p := spawnProc(t, cmd, attachedLine, nil)
	select {
	case <-p.attached:
	case <-p.done:
		t.Fatalf("%s exited before attaching: %v\n%s", filepath.Base(cmd.Path), p.exitErr, p.out)
	case <-time.After(timeout):
		t.Fatalf("%s did not attach within %v\n%s", filepath.Base(cmd.Path), timeout, p.out)
	}
	requireState(t, "enabled", ops)
	return p
}

// spawnProc starts a scheduler process; p.attached closes when it writes
// attachedLine to stderr, and onLine, if not nil, sees every line there.
// It is stopped when the test ends.
func spawnProc(t testing.TB, cmd *exec.Cmd, attachedLine string, onLine func(string)) *schedProc {
	t.Helper()
	p := &schedProc{t: t, cmd: cmd, out: &syncBuffer{}, attached: make(chan struct{}), done: make(chan struct{})}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stdout = p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		once := sync.Once{}
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(p.out, line)
			if m := metricsRE.FindStringSubmatch(line); m != nil {
				p.metrics = m[1]
			}
			if strings.Contains(line, attachedLine) {
				once.Do(func() { close(p.attached) })
			}
			if onLine != nil {
				onLine(line)
			}
		}
		io.Copy(io.Discard, stderr)
		p.exitErr = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("%s output:\n%s", filepath.Base(cmd.Path), p.out)
		}
	})
	return p
}

// stop sends SIGTERM and waits; it returns the exit error.
func (p *schedProc) stop() error {
	select {
	case <-p.done:
		return p.exitErr
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(stateTimeout):
		p.cmd.Process.Kill()
		select {
		case <-p.done:
		case <-time.After(stateTimeout):
			// Stuck in the kernel (SIGKILL cannot end it): fail with the
			// blocked tasks' stacks instead of hanging the whole VM run.
			p.t.Errorf("swiftlane ignored SIGTERM, and SIGKILL for %v: stuck in the kernel; sched_ext %s\n%s\n--- kernel log (blocked tasks last):\n%s",
				stateTimeout, strings.Join(strings.Fields(fmt.Sprint(readState())), " "), p.out, lastBytes(blockedTasks(), 64<<10))
			return errors.New("swiftlane did not exit")
		}
		p.t.Errorf("swiftlane ignored SIGTERM for %v", stateTimeout)
	}
	return p.exitErr
}

// blockedTasks has the kernel print every blocked task's stack (sysrq w)
// and returns the kernel log.
func blockedTasks() []byte {
	os.WriteFile("/proc/sys/kernel/sysrq", []byte("1"), 0)
	os.WriteFile("/proc/sysrq-trigger", []byte("w"), 0)
	log, _ := exec.Command("dmesg").CombinedOutput()
	return log
}

func lastBytes(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

func (p *schedProc) alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// wait blocks until the process exits by itself.
func (p *schedProc) wait(d time.Duration) error {
	select {
	case <-p.done:
		return p.exitErr
	case <-time.After(d):
		p.t.Fatalf("swiftlane still running after %v\n%s", d, p.out)
		return nil
	}
}

func readState() (state, ops string) {
	b, _ := os.ReadFile("/sys/kernel/sched_ext/state")
	o, _ := os.ReadFile("/sys/kernel/sched_ext/root/ops")
	return strings.TrimSpace(string(b)), strings.TrimSpace(string(o))
}

func requireState(t testing.TB, state, ops string) {
	t.Helper()
	s, o := readState()
	if s != state || (ops != "" && o != ops) {
		t.Fatalf("sched_ext state %q ops %q, want %q %q", s, o, state, ops)
	}
}

// waitState polls sysfs: the kernel offers no notification for it.
func waitState(t testing.TB, state string) {
	t.Helper()
	deadline := time.Now().Add(stateTimeout)
	for {
		s, _ := readState()
		if s == state {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sched_ext state stayed %q, want %q", s, state)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// scrape reads the scheduler's Prometheus metrics as name{labels} → value.
func (p *schedProc) scrape(t testing.TB) map[string]float64 {
	t.Helper()
	if p.metrics == "" {
		t.Fatal("swiftlane did not print its metrics address")
	}
	resp, err := http.Get("http://" + p.metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for name, f := range fams {
		for _, m := range f.Metric {
			key := name
			for _, l := range m.Label {
				key += fmt.Sprintf("{%s=%s}", l.GetName(), l.GetValue())
			}
			switch {
			case m.Counter != nil:
				out[key] = m.Counter.GetValue()
			case m.Gauge != nil:
				out[key] = m.Gauge.GetValue()
			case m.Histogram != nil:
				out[key+"_count"] = float64(m.Histogram.GetSampleCount())
				for _, b := range m.Histogram.Bucket { // cumulative, as exposed
					out[fmt.Sprintf("%s{le=%g}", key, b.GetUpperBound())] = float64(b.GetCumulativeCount())
				}
			}
		}
	}
	return out
}

// waitMetric polls the metrics until cond holds (the scheduler applies
// process events asynchronously) or fails after a deadline.
func (p *schedProc) waitMetric(t testing.TB, what string, cond func(map[string]float64) bool) map[string]float64 {
	t.Helper()
	deadline := time.Now().Add(stateTimeout)
	for {
		m := p.scrape(t)
		if cond(m) {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; metrics: %v", what, m)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// startStress runs stress-ng until the test ends.
func startStress(t testing.TB, args ...string) *exec.Cmd {
	t.Helper()
	return runStress(t, append([]string{"stress-ng"}, args...))
}

// startNiceStress runs stress-ng at nice 19 (its workers inherit it).
func startNiceStress(t testing.TB, args ...string) *exec.Cmd {
	t.Helper()
	return runStress(t, append([]string{"nice", "-n", "19", "stress-ng"}, args...))
}

func runStress(t testing.TB, argv []string) *exec.Cmd {
	t.Helper()
	n := slices.Index(argv, "stress-ng") + 1
	argv = slices.Insert(argv, n, "--temp-path", t.TempDir(), "--quiet")
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("stress-ng: %v", err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	return cmd
}

func saturate(t testing.TB) {
	startStress(t, "--cpu", fmt.Sprint(2*runtime.NumCPU()))
}

// kernelLog returns the kernel log; checkKernelLog fails on anything that
// says the scheduler or the kernel misbehaved since mark.
func kernelLog(t testing.TB) string {
	out, err := exec.Command("dmesg").CombinedOutput()
	if err != nil {
		t.Fatalf("dmesg: %v\n%s", err, out)
	}
	return string(out)
}

var badKernelLog = regexp.MustCompile(`(?i)(BUG:|Oops|general protection|stall|watchdog|runtime error|scx_bpf_error|kernel panic|disabled \((error|runnable))`)

func logMark(t testing.TB) int { return len(kernelLog(t)) }

func checkKernelLog(t testing.TB, mark int) {
	t.Helper()
	log := kernelLog(t)
	if mark > len(log) {
		mark = 0
	}
	for _, line := range strings.Split(log[mark:], "\n") {
		if badKernelLog.MatchString(line) {
			t.Errorf("kernel log: %s", line)
		}
	}
}

func runCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
