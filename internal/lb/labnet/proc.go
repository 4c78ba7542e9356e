// SPDX-License-Identifier: Apache-2.0

package labnet

import (
	"bufio"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// LB is `swiftlane lb` running as its own process in a namespace, as on a
// node: the tests kill and restart it like a DaemonSet pod, the benchmark
// leaves its sweep to the kernel's scheduler like any other process's.
type LB struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed once the process is reaped
	mu     sync.Mutex
	log    strings.Builder
}

// StartLB runs `bin lb args...` in ns and returns once it logs
// msg=started (its services are programmed and its interfaces attached).
// Only the network namespace is switched: `ip netns exec` would also mount
// a fresh /sys, hiding the caller's bpffs mounts under it. The process
// inherits the caller's CPU affinity. Host traffic is off unless args set
// --host-cgroup: its default, the cgroup v2 root, would translate the
// sockets of every process on this machine. If it exits first or does not start
// within timeout, the error carries its log and nothing is left running.
func StartLB(ns NS, bin string, timeout time.Duration, args ...string) (*LB, error) {
	p := &LB{exited: make(chan struct{})}
	argv := append([]string{"--net=/run/netns/" + ns.Name, bin, "lb"}, hostTrafficOff(bin)...)
	p.cmd = exec.Command("nsenter", append(argv, args...)...)
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s lb: %w", bin, err)
	}
	started := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		ready := false
		for sc.Scan() {
			p.mu.Lock()
			p.log.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			if !ready && strings.Contains(sc.Text(), "msg=started") {
				ready = true
				close(started)
			}
		}
		p.cmd.Wait()
		close(p.exited)
	}()
	select {
	case <-started:
		return p, nil
	case <-p.exited:
		return nil, fmt.Errorf("swiftlane lb exited before starting (%v):\n%s", p.cmd.ProcessState, p.Log())
	case <-time.After(timeout):
		p.cmd.Process.Kill()
		<-p.exited
		return nil, fmt.Errorf("swiftlane lb did not start within %v:\n%s", timeout, p.Log())
	}
}

// hostTrafficOff is the flag that leaves the machine's own sockets alone,
// for binaries that have it: a build from before --host-cgroup (a
// benchmark's baseline) has no socket programs, so nothing to turn off, and
// would refuse the flag.
func hostTrafficOff(bin string) []string {
	if v, ok := hostFlag.Load(bin); ok {
		return v.([]string)
	}
	var off []string
	if help, _ := exec.Command(bin, "lb", "--help").CombinedOutput(); strings.Contains(string(help), "--host-cgroup") {
		off = []string{"--host-cgroup="}
	}
	hostFlag.Store(bin, off)
	return off
}

var hostFlag sync.Map // binary path -> hostTrafficOff's answer

// Log is what the process has written to stderr so far.
func (p *LB) Log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// Signal sends sig and waits up to wait for the process to exit.
func (p *LB) Signal(sig syscall.Signal, wait time.Duration) error {
	if err := p.cmd.Process.Signal(sig); err != nil {
		return err
	}
	select {
	case <-p.exited:
		return nil
	case <-time.After(wait):
		return fmt.Errorf("swiftlane lb still running %v after %v", wait, sig)
	}
}

// Stop asks the process to exit (SIGTERM) and kills it if it has not
// within wait; it returns once the process is gone.
func (p *LB) Stop(wait time.Duration) {
	if p.Signal(syscall.SIGTERM, wait) != nil {
		p.cmd.Process.Kill()
		<-p.exited
	}
}
