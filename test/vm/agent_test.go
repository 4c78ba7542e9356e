// SPDX-License-Identifier: Apache-2.0
//go:build vmtest

package vm

import (
	"bufio"
	"context"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/swiftlane/swiftlane/internal/apiclient"
	"github.com/swiftlane/swiftlane/internal/apitypes"
	"github.com/swiftlane/swiftlane/internal/auth"
	"github.com/swiftlane/swiftlane/internal/strategy"
)

// The node agent in schedule mode, with the scheduler in either mode
// (scheduler.mode): the real API server and agent, a strategy pushed
// through the API lands in the attached scheduler's map (kernel mode: its
// class shows in the scheduler's counters too), is reported back as a
// workload, and goes away when the strategy is deleted.
func TestAgentAppliesPushedStrategy(t *testing.T) {
	for _, mode := range []string{"kernel", "userspace"} {
		t.Run(mode, func(t *testing.T) { agentAppliesPushedStrategy(t, mode) })
	}
}

func agentAppliesPushedStrategy(t *testing.T, mode string) {
	bin := swiftlaneBin(t)
	const addr = "127.0.0.1:18443"
	ctx := runCtx(t, 5*time.Minute)
	_, client, data := startAPI(t, ctx, addr)

	cfg := filepath.Join(t.TempDir(), "agent.yaml")
	if err := os.WriteFile(cfg, []byte("api:\n  interval: 1\nscheduler:\n  mode: "+mode+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	agent := startProcess(t, "agent", bin, "agent", "--config", cfg, "--data-dir", data,
		"--server", "https://"+addr, "--node", "vm1", "--state-file", "")
	ops, attach := "swiftlane", attachTimeout
	if mode == "userspace" {
		ops, attach = userOps, userAttachTimeout
	}
	agent.waitLineWithin(t, "scheduler attached; agent running", attach)
	requireState(t, "enabled", ops)

	marker := "swl-agent-marker"
	proc := exec.Command("sh", "-c", "while :; do sleep 0.01; done; : "+marker)
	if err := proc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proc.Process.Kill(); proc.Wait() })

	high := strategy.High
	if _, err := client.CreateStrategy(ctx, apitypes.Strategy{Strategy: strategy.Strategy{Name: "marker", Class: &high, CommandRegex: marker}}); err != nil {
		t.Fatal(err)
	}
	hasMarker := func() bool {
		wl, err := client.Workloads(ctx, "vm1")
		if err != nil {
			return false
		}
		return slices.ContainsFunc(wl.Workloads, func(w apitypes.Workload) bool { return w.PID == proc.Process.Pid && w.Class == "high" })
	}
	waitFor(t, "the agent to report the marker process as a high workload", hasMarker, agent)
	n0, err := client.GetNode(ctx, "vm1")
	if err != nil || n0.Counters == nil {
		t.Fatalf("node: %+v %v", n0, err)
	}
	if !strings.HasPrefix(n0.SchedulerState, "enabled") {
		t.Fatalf("agent reports scheduler state %q", n0.SchedulerState)
	}
	// The class is in BPF: in the scheduler's process map and, in kernel
	// mode (user-space mode does not count per class), in its enqueues.
	procMap := schedulerMap(t, "tgid_strategy")
	defer procMap.Close()
	waitFor(t, "the marker in the scheduler's process map", func() bool { return inMap(procMap, uint32(proc.Process.Pid)) }, agent)
	if mode == "kernel" {
		// The agent's own process is high (noderuntime.prioritiseSelf),
		// from the attach on.
		var own [24]byte // struct swl_strategy: class first
		if err := procMap.Lookup(uint32(agent.cmd.Process.Pid), &own); err != nil {
			t.Errorf("the agent's own process is not in the scheduler's process map: %v", err)
		} else if class := binary.LittleEndian.Uint32(own[:4]); class != uint32(strategy.High) {
			t.Errorf("the agent's own process has class %d in the process map, want %d (high)", class, strategy.High)
		}
		waitFor(t, "high-class enqueues in the agent's counters", func() bool {
			n, err := client.GetNode(ctx, "vm1")
			return err == nil && n.Counters != nil && n.Counters.Enqueued["high"] >= n0.Counters.Enqueued["high"]+50
		}, agent)
	}

	if _, err := client.DeleteStrategy(ctx, "marker"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the workload to go after the strategy was deleted", func() bool { return !hasMarker() }, agent)
	waitFor(t, "the marker to leave the process map", func() bool { return !inMap(procMap, uint32(proc.Process.Pid)) }, agent)
}

// startAPI runs `swiftlane api` on addr with a data directory of its own
// and returns it once it answers an admin client.
func startAPI(t *testing.T, ctx context.Context, addr string) (server *proc, client *apiclient.Client, data string) {
	t.Helper()
	data = t.TempDir()
	server = startProcess(t, "api", swiftlaneBin(t), "api", "--data-dir", data, "--listen", addr)
	waitFor(t, "the API server to answer", func() bool {
		signer, err := auth.LoadSigner(data)
		if err != nil {
			return false
		}
		tok, _, err := signer.Issue("vmtest", auth.Admin, "", time.Hour)
		if err != nil {
			return false
		}
		tlsCfg, err := auth.ClientTLS(filepath.Join(data, auth.CertFile))
		if err != nil {
			return false
		}
		client = apiclient.NewClient("https://"+addr, tok, tlsCfg)
		_, err = client.ListStrategies(ctx)
		return err == nil
	}, server)
	return server, client, data
}

// proc is a background swiftlane process whose output is kept for failures.
type proc struct {
	name  string
	cmd   *exec.Cmd
	out   *syncBuffer
	lines chan string
	done  chan struct{}
}

func startProcess(t *testing.T, name, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, out: &syncBuffer{}, lines: make(chan string, 1024), done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stdout, p.cmd.Stderr = w, w
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			p.out.Write([]byte(sc.Text() + "\n"))
			select {
			case p.lines <- sc.Text():
			default:
			}
		}
		p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Signal(os.Interrupt)
		select {
		case <-p.done:
		case <-time.After(stateTimeout):
			p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", p.name, p.out)
		}
	})
	return p
}

func (p *proc) waitLine(t *testing.T, substr string) {
	t.Helper()
	p.waitLineWithin(t, substr, attachTimeout)
}

func (p *proc) waitLineWithin(t *testing.T, substr string, d time.Duration) {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case l := <-p.lines:
			if strings.Contains(l, substr) {
				return
			}
		case <-p.done:
			t.Fatalf("%s exited before printing %q:\n%s", p.name, substr, p.out)
		case <-deadline:
			t.Fatalf("%s did not print %q within %v:\n%s", p.name, substr, d, p.out)
		}
	}
}

// waitFor polls cond (state behind an HTTP API) until it holds, failing
// early if the process it depends on exits.
func waitFor(t *testing.T, what string, cond func() bool, dep *proc) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		select {
		case <-dep.done:
			t.Fatalf("%s exited while waiting for %s:\n%s", dep.name, what, dep.out)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
