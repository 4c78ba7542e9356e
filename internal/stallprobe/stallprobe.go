// SPDX-License-Identifier: Apache-2.0

// Package stallprobe measures what a guest itself loses: one SCHED_FIFO
// cyclictest thread whose longest wake-up delay no sched_ext scheduler
// causes. The VM lab's torture suite and bench-gtp use it.
package stallprobe

import (
	"bytes"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Probe is one SCHED_FIFO cyclictest thread (priority 99, a 10 ms
// period, no CPU affinity) beside a measurement. Real-time tasks are not a
// sched_ext scheduler's to schedule, so its longest wake-up delay is what
// the guest itself lost (its vCPU threads descheduled on a loaded host),
// under any scheduler: a wait that long says nothing about the scheduler.
type Probe struct {
	cmd *exec.Cmd
	out bytes.Buffer
}

// Start starts the probe.
func Start() (*Probe, error) {
	s := &Probe{}
	s.cmd = exec.Command("cyclictest", "--priority", "99", "--threads", "1", "--interval", "10000", "--quiet")
	s.cmd.Stdout, s.cmd.Stderr = &s.out, &s.out
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("cyclictest (the stall probe): %w", err)
	}
	return s, nil
}

// Stop ends the probe (SIGINT makes cyclictest print its summary) and
// returns its longest wake-up delay.
func (s *Probe) Stop() (time.Duration, error) {
	s.cmd.Process.Signal(syscall.SIGINT)
	if err := s.cmd.Wait(); err != nil {
		return 0, fmt.Errorf("cyclictest (the stall probe): %w: %s", err, &s.out)
	}
	return CyclictestMax(s.out.String())
}

// Kill ends the probe without a result (a test's cleanup).
func (s *Probe) Kill() {
	s.cmd.Process.Kill()
	s.cmd.Wait()
}

// CyclictestMax reads the "Max:" figure (µs) of cyclictest's summary line.
func CyclictestMax(out string) (time.Duration, error) {
	i := strings.LastIndex(out, "Max:")
	if i < 0 {
		return 0, fmt.Errorf("no Max: in cyclictest's output %q", out)
	}
	f := strings.Fields(out[i+len("Max:"):])
	if len(f) == 0 {
		return 0, fmt.Errorf("nothing after Max: in cyclictest's output %q", out)
	}
	us, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("cyclictest's Max: %q is not a number", f[0])
	}
	return time.Duration(us) * time.Microsecond, nil
}
