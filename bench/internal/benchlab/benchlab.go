// SPDX-License-Identifier: Apache-2.0

// Package benchlab holds what the benchmarks that run inside the VM lab
// share: the kernel's sched_ext state, scheduler configs, peer build errors.
package benchlab

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// SchedState reads sched_ext's state and the attached scheduler's name.
func SchedState() (state, ops string) {
	s, _ := os.ReadFile("/sys/kernel/sched_ext/state")
	o, _ := os.ReadFile("/sys/kernel/sched_ext/root/ops")
	return strings.TrimSpace(string(s)), strings.TrimSpace(string(o))
}

// WaitState polls sysfs (it has no change notification) until sched_ext is in
// state want; failed, when it returns an error, stops the wait early (e.g. the
// scheduler process exited).
func WaitState(want string, timeout time.Duration, failed func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		if s, _ := SchedState(); s == want {
			return nil
		}
		if failed != nil {
			if err := failed(); err != nil {
				return err
			}
		}
		if time.Now().After(deadline) {
			s, _ := SchedState()
			return fmt.Errorf("sched_ext state still %q after %v, want %q", s, timeout, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// WriteConfig writes a swiftlane config to a fresh temporary file.
func WriteConfig(yaml string) (string, error) {
	f, err := os.CreateTemp("", "swiftlane-bench-*.yaml")
	if err != nil {
		return "", err
	}
	defer f.Close()
	_, err = f.WriteString(yaml)
	return filepath.Clean(f.Name()), err
}

// PeerError says why a peer scheduler is missing, from lab/peers.sh's
// errors file, or how to build it.
func PeerError(errorsFile, peer string) string {
	if b, err := os.ReadFile(errorsFile); err == nil {
		var m map[string]string
		if json.Unmarshal(b, &m) == nil && m[peer] != "" {
			return m[peer]
		}
	}
	return "run `make peers` (cargo install from crates.io) before the benchmark"
}

// WriteJSON writes a report, indented, creating its directory.
func WriteJSON(path string, v any) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "bench: wrote", path)
	return nil
}
