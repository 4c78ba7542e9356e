// SPDX-License-Identifier: Apache-2.0

package cmd

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The lb command's flag handling up to the point it would load BPF or
// contact a cluster (the source and the balancer are tested in their
// packages).
func TestLBFlags(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	node := write("node.yaml", "interfaces: [eth0]\n")
	withServices := write("services.yaml", `
interfaces: [eth0]
services:
  - {name: web, clusterIP: 10.96.0.10, ports: [{port: 80}], endpoints: [{address: 10.244.1.2}]}
`)
	for _, tc := range []struct {
		args          []string
		out, errorHas string
	}{
		{args: []string{"--config", withServices, "--check"}, out: "1 services OK"},
		{args: []string{"--source", "kubernetes", "--config", node, "--check"}, out: "node settings OK"},
		{args: []string{"--source", "kubernetes", "--config", withServices, "--check"}, errorHas: "services: not used with --source kubernetes"},
		{args: []string{"--source", "kubernetes", "--config", node, "--kubeconfig", filepath.Join(dir, "missing")}, errorHas: "--kubeconfig " + filepath.Join(dir, "missing")},
		{args: []string{"--source", "etcd", "--config", node}, errorHas: `--source "etcd" is unknown`},
		{args: []string{"--source", "kubernetes"}, errorHas: "--config: required"},
		{args: []string{"--cleanup", "--pin-dir", ""}, errorHas: "--cleanup: needs --pin-dir"},
		{args: []string{"--config", withServices, "--pin-dir", filepath.Join(dir, "pins")}, errorHas: "is not on a bpf filesystem"},
	} {
		c := newLBCmd()
		var out bytes.Buffer
		c.SetOut(&out)
		c.SetErr(&out)
		c.SetArgs(tc.args)
		err := c.Execute()
		switch {
		case tc.errorHas != "" && (err == nil || !strings.Contains(err.Error(), tc.errorHas)):
			t.Errorf("lb %v: error %v, want one containing %q", tc.args, err, tc.errorHas)
		case tc.errorHas == "" && (err != nil || !strings.Contains(out.String(), tc.out)):
			t.Errorf("lb %v: %q (err %v), want output containing %q", tc.args, out.String(), err, tc.out)
		}
	}
}

// The housekeeping thread runs at nice 19 and only it: the goroutines that
// serve /metrics and apply services keep the process's priority, and so do
// threads the runtime starts while it is locked.
func TestLowerThreadPriority(t *testing.T) {
	before, err := unix.Getpriority(unix.PRIO_PROCESS, 0)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		tid, nice int
		err       error
	}
	got := make(chan result, 1)
	release := make(chan struct{})
	go func() {
		runtime.LockOSThread() // not unlocked: the thread ends with the goroutine
		err := lowerThreadPriority()
		tid := unix.Gettid()
		nice, gerr := unix.Getpriority(unix.PRIO_PROCESS, tid)
		got <- result{tid, nice, errors.Join(err, gerr)}
		// Make the runtime start threads while this one is locked and lowered.
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() { defer wg.Done(); runtime.LockOSThread(); time.Sleep(10 * time.Millisecond) }()
		}
		wg.Wait()
		<-release
	}()
	r := <-got
	defer close(release)
	if r.err != nil {
		t.Fatal(r.err)
	}
	// The system call returns 20 - nice (x/sys/unix passes it through).
	if nice := 20 - r.nice; nice != 19 {
		t.Errorf("housekeeping thread nice %d, want 19", nice)
	}
	if tid := unix.Gettid(); tid == r.tid {
		t.Fatal("the test goroutine shares the locked thread")
	}
	after, err := unix.Getpriority(unix.PRIO_PROCESS, unix.Gettid())
	if err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Errorf("another thread's priority changed: %d -> %d", before, after)
	}
	// Every other thread of the process keeps the process's priority.
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range tasks {
		tid, _ := strconv.Atoi(e.Name())
		if tid == r.tid {
			continue
		}
		if p, err := unix.Getpriority(unix.PRIO_PROCESS, tid); err == nil && p != before {
			t.Errorf("thread %d has priority %d, want the process's %d", tid, p, before)
		}
	}
}
