// SPDX-License-Identifier: Apache-2.0

package benchlab

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Scheduler is a sched_ext scheduler process a benchmark started.
type Scheduler struct {
	Name string
	Cmd  *exec.Cmd
	// Exited receives the process's exit once; a reader that only checks
	// whether it exited sends the error back.
	Exited  chan error
	log     string // its stdout and stderr
	stopped bool
}

// StartScheduler starts a sched_ext scheduler and waits up to timeout until
// the kernel reports it enabled.
func StartScheduler(timeout time.Duration, bin string, args ...string) (*Scheduler, error) {
	logf, err := os.CreateTemp("", "sched-*.log")
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	s := &Scheduler{Name: filepath.Base(bin), log: logf.Name(), Exited: make(chan error, 1)}
	s.Cmd = exec.Command(bin, args...)
	s.Cmd.Stdout, s.Cmd.Stderr = logf, logf
	// Its own process group, with default signal dispositions (a job a
	// non-interactive shell starts ignores SIGINT).
	s.Cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.Cmd.Start(); err != nil {
		return nil, err
	}
	go func() { s.Exited <- s.Cmd.Wait() }()
	err = WaitState("enabled", timeout, func() error {
		select {
		case err := <-s.Exited:
			s.Exited <- err
			return fmt.Errorf("exited before enabling (%v)", err)
		default:
			return nil
		}
	})
	if err != nil {
		s.Cmd.Process.Kill()
		return nil, fmt.Errorf("%s: %w: %s", s.Name, err, s.Tail())
	}
	return s, nil
}

// Stop detaches the scheduler (SIGINT, then SIGTERM, then SIGKILL) and
// waits for the kernel's default scheduler.
func (s *Scheduler) Stop() error {
	if s.stopped {
		return nil
	}
	s.stopped = true
	s.Cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-s.Exited:
	case <-time.After(15 * time.Second):
		s.Cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.Exited:
		case <-time.After(15 * time.Second):
			s.Cmd.Process.Kill()
			<-s.Exited
		}
	}
	return WaitState("disabled", 30*time.Second, nil)
}

// Tail is the end of the scheduler's output.
func (s *Scheduler) Tail() string {
	b, _ := os.ReadFile(s.log)
	return strings.TrimSpace(string(b[max(0, len(b)-600):]))
}

// WaitChildren waits until process pid has n children (stress-ng's hogs
// all forked, so every CPU has a queue). procfs cannot notify it: poll.
func WaitChildren(pid, n int, timeout time.Duration) error {
	path := fmt.Sprintf("/proc/%d/task/%d/children", pid, pid)
	deadline := time.Now().Add(timeout)
	for {
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("stress-ng: %w", err)
		}
		if len(strings.Fields(string(b))) >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("stress-ng started %d of its %d workers in %v", len(strings.Fields(string(b))), n, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
