// SPDX-License-Identifier: Apache-2.0

package serve

import (
	"errors"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

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
