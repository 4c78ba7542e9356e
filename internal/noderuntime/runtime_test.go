// SPDX-License-Identifier: Apache-2.0

package noderuntime

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/swiftlane/swiftlane/internal/config"
	"github.com/swiftlane/swiftlane/internal/schedext"
	"github.com/swiftlane/swiftlane/internal/strategy"
)

func TestCheckMode(t *testing.T) {
	for _, tc := range []struct {
		s         config.Scheduler
		key, hint string // "": accepted
	}{
		{config.Scheduler{Mode: config.ModeKernel}, "", ""},
		{config.Scheduler{Mode: config.ModeUserspace}, "", ""},
		{config.Scheduler{Mode: config.ModeUserspace, Policy: "fifo"}, "", ""},
		{config.Scheduler{Mode: config.ModeKernel, Policy: "fifo"}, "scheduler.policy", "policies are for scheduler.mode userspace"},
		{config.Scheduler{Mode: config.ModeUserspace, Policy: "lottery"}, "scheduler.policy", `"lottery": use one of vruntime, fifo`},
		{config.Scheduler{Mode: "hybrid"}, "scheduler.mode", "use kernel or userspace"},
	} {
		err := checkMode(tc.s)
		var fe *strategy.FieldError
		switch {
		case tc.key == "" && err != nil:
			t.Errorf("%+v: %v", tc.s, err)
		case tc.key != "" && (!errors.As(err, &fe) || fe.Field != tc.key || !strings.Contains(err.Error(), tc.hint)):
			t.Errorf("%+v: got %v, want %s: ...%s", tc.s, err, tc.key, tc.hint)
		}
	}
}

// needsNoSchedExt skips where this machine could attach the scheduler:
// these tests are about the paths of a kernel that cannot (the VM tests
// cover the others, on real sched_ext kernels).
func needsNoSchedExt(t *testing.T) *schedext.UnsupportedError {
	t.Helper()
	var ue *schedext.UnsupportedError
	if err := schedext.Check(); !errors.As(err, &ue) {
		t.Skip("this machine can run the scheduler: the VM tests cover it")
	}
	return ue
}

// Without Degrade (swiftlane run) a kernel that cannot run the scheduler
// ends Run with the reason, in either mode, before any policy is built.
func TestRunWithoutSchedExt(t *testing.T) {
	needsNoSchedExt(t)
	for _, mode := range []string{config.ModeKernel, config.ModeUserspace} {
		cfg := config.Default()
		cfg.Scheduler.Mode = mode
		var out bytes.Buffer
		err := Run(context.Background(), Options{Config: cfg, Out: &out}, nil)
		var ue *schedext.UnsupportedError
		if !errors.As(err, &ue) {
			t.Errorf("%s mode: got %v, want an UnsupportedError", mode, err)
		}
		if strings.Contains(out.String(), "attached") {
			t.Errorf("%s mode: %s", mode, out.String())
		}
	}
}

// Bad strategies and a policy for the wrong mode are refused before the
// metrics server or the scheduler start.
func TestRunRefusesBadOptions(t *testing.T) {
	cfg := config.Default()
	cfg.Scheduler.Policy = "fifo"
	if err := Run(context.Background(), Options{Config: cfg, MetricsAddr: "127.0.0.1:0"}, nil); err == nil || !strings.Contains(err.Error(), "scheduler.policy") {
		t.Errorf("policy in kernel mode: %v", err)
	}
	cfg = config.Default()
	var out bytes.Buffer
	err := Run(context.Background(), Options{Config: cfg, Strategies: []strategy.Strategy{{Name: "x"}}, MetricsAddr: "127.0.0.1:0", Out: &out}, nil)
	if err == nil || !strings.HasPrefix(err.Error(), "config: strategies[0]") {
		t.Errorf("strategy without class or matcher: %v", err)
	}
	if out.Len() != 0 {
		t.Errorf("something started: %s", out.String())
	}
}

// With Degrade (the agents) the same kernel gives observe mode: the agent
// gets a Node whose Applier resolves into a recorder, the node is ready
// while the agent runs, and Run ends with ctx.
func TestObserveMode(t *testing.T) {
	ue := needsNoSchedExt(t)
	cfg := config.Default()
	cfg.Automatic.Enabled = true // needs the scheduler: off, with a warning
	var out, logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	started := make(chan *Node, 1)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{Config: cfg, MetricsAddr: "127.0.0.1:0", Degrade: true, Log: log, Out: &out}, func(n *Node) (Agent, error) {
			return func(ctx context.Context) error {
				started <- n
				<-ctx.Done()
				return nil
			}, nil
		})
	}()
	var n *Node
	select {
	case n = <-started:
	case err := <-done:
		t.Fatalf("Run ended before the agent ran: %v\n%s", err, out.String())
	case <-time.After(10 * time.Second):
		t.Fatal("the agent did not start")
	}
	if n.Mode != Observe || n.Reason != ue.Error() || n.Stats != nil || n.SchedulerState == nil || n.SchedulerState() == "" {
		t.Errorf("node: mode %q reason %q stats %v", n.Mode, n.Reason, n.Stats != nil)
	}
	if !strings.Contains(out.String(), "swiftlane: observe mode (strategies are resolved and reported, nothing is scheduled): "+ue.Error()) {
		t.Errorf("no observe line:\n%s", out.String())
	}
	if !strings.Contains(logs.String(), "automatic mode needs the scheduler") {
		t.Errorf("automatic mode not reported off:\n%s", logs.String())
	}
	// The agent's strategies resolve against this machine's processes.
	high := strategy.High
	set, _ := strategy.Compile([]strategy.Strategy{{Name: "all", Class: &high, CommandRegex: "."}})
	if err := n.Applier.SetStrategies(set); err != nil || len(n.Applier.Applied()) == 0 {
		t.Errorf("observe mode resolved nothing: %v", err)
	}

	addr := regexp.MustCompile(`metrics on http://([^/]+)/metrics`).FindStringSubmatch(out.String())
	if addr == nil {
		t.Fatalf("no metrics line:\n%s", out.String())
	}
	if code, _ := get(t, addr[1], "/readyz"); code != http.StatusOK {
		t.Errorf("/readyz in observe mode: %d", code)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not end with ctx")
	}
}

// An agent that cannot be built ends Run with its error.
func TestObserveBuildError(t *testing.T) {
	needsNoSchedExt(t)
	boom := errors.New("no kubeconfig")
	err := Run(context.Background(), Options{Config: config.Default(), Degrade: true, Out: &bytes.Buffer{}}, func(*Node) (Agent, error) { return nil, boom })
	if !errors.Is(err, boom) {
		t.Fatalf("got %v", err)
	}
}

// A strategy that can match nothing here (pod selectors without a pod
// source) is said at start, before the scheduler loads (swiftlane run's
// strategies), logged, and exported on /metrics as
// swiftlane_strategies_unmatchable, which swiftlane stats lists.
func TestUnmatchableStrategyReported(t *testing.T) {
	needsNoSchedExt(t)
	high := strategy.High
	strategies := []strategy.Strategy{
		{Name: "gnb", Class: &high, CommandRegex: "nr-gnb"},
		{Name: "pods", Class: &high, Selectors: []strategy.Selector{{Key: "app", Value: "ueransim"}}},
	}
	const line = "swiftlane: strategy pods matches no process here (selectors_without_pod_source): pod selectors need the Kubernetes agent"

	// swiftlane run: no sched_ext here, so Run ends, but it said so first.
	var out bytes.Buffer
	if err := Run(context.Background(), Options{Config: config.Default(), Strategies: strategies, Out: &out}, nil); err == nil {
		t.Fatal("Run attached without sched_ext")
	}
	if !strings.Contains(out.String(), line) || strings.Contains(out.String(), "strategy gnb") {
		t.Errorf("start lines:\n%s", out.String())
	}

	// An agent's node (observe mode here): logged and on /metrics.
	out.Reset()
	var logs bytes.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	started := make(chan struct{})
	go func() {
		done <- Run(ctx, Options{Config: config.Default(), Strategies: strategies, MetricsAddr: "127.0.0.1:0", Degrade: true,
			Log: slog.New(slog.NewTextHandler(&logs, nil)), Out: &out}, func(*Node) (Agent, error) {
			return func(ctx context.Context) error { close(started); <-ctx.Done(); return nil }, nil
		})
	}()
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("Run: %v\n%s", err, out.String())
	case <-time.After(10 * time.Second):
		t.Fatal("the agent did not start")
	}
	if !strings.Contains(logs.String(), `msg="strategy matches no process here" strategy=pods reason=selectors_without_pod_source`) {
		t.Errorf("not logged:\n%s", logs.String())
	}
	addr := regexp.MustCompile(`metrics on http://([^/]+)/metrics`).FindStringSubmatch(out.String())
	if addr == nil {
		t.Fatalf("no metrics line:\n%s", out.String())
	}
	_, body := get(t, addr[1], "/metrics")
	if !strings.Contains(body, `swiftlane_strategies_unmatchable{reason="selectors_without_pod_source",strategy="pods"} 1`) || strings.Contains(body, `strategy="gnb"`) {
		t.Errorf("/metrics:\n%s", body)
	}
	cancel()
	<-done
}

// The kernel's dump follows the reason, delimited, when there is one. No test
// makes the kernel eject swiftlane for real (that takes a scheduler bug), so
// the record here is built by hand; the BPF side that copies it is loaded and
// verified by every VM test on both kernels.
func TestReportExitWithDump(t *testing.T) {
	var b strings.Builder
	reportExit(&b, &schedext.ExitInfo{Kind: schedext.ExitError, Reason: "runtime error", Message: "RCU CPU stall on CPUs ()",
		Dump: "CPU 1   : nr_run=3 flags=0x1 cpu_rel=0 ops_qseq=1 pnt_seq=2\n  R khugepaged[42] -21000ms"})
	want := "swiftlane: the kernel stopped the scheduler: runtime error (kind 1024): RCU CPU stall on CPUs ()\n" +
		"swiftlane: the kernel's state at the error:\nCPU 1   : nr_run=3 flags=0x1 cpu_rel=0 ops_qseq=1 pnt_seq=2\n  R khugepaged[42] -21000ms\n" +
		"swiftlane: end of the kernel's state\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
	b.Reset()
	reportExit(&b, &schedext.ExitInfo{Kind: schedext.ExitUnreg})
	if strings.Contains(b.String(), "state at the error") {
		t.Errorf("an exit without a dump printed one: %q", b.String())
	}
}
