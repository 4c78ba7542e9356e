// SPDX-License-Identifier: Apache-2.0

package usersched_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/signal"

	"github.com/swiftlane/swiftlane/usersched"
)

// Running a built-in policy (needs root and a sched_ext kernel).
func Example() {
	s, err := usersched.Open(usersched.Options{})
	if err != nil {
		log.Fatal(err) // e.g. no sched_ext here, with the fix in the message
	}
	defer s.Close()
	if err := s.Attach(); err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	exit, err := s.Run(ctx, usersched.NewVruntime(0, 0))
	if exit != nil {
		log.Fatalf("the kernel stopped the scheduler: %v", exit)
	}
	_ = err // ctx ended: Close detaches
}

// lifo is a (deliberately unfair) policy: the task that became runnable
// last runs first. The stack is preallocated and reused: no allocation per
// task.
type lifo struct {
	stack []usersched.Task
}

func (l *lifo) Enqueue(t *usersched.Task) { l.stack = append(l.stack, *t) }

func (l *lifo) Dispatch(d *usersched.Dispatcher) {
	for len(l.stack) > 0 {
		t := &l.stack[len(l.stack)-1]
		if !d.Dispatch(t, d.PickIdleCPU(t, nil), 0, 0) {
			return // the ring is full: the rest go next time
		}
		l.stack = l.stack[:len(l.stack)-1]
	}
}

// Writing a policy: a type with Enqueue and Dispatch.
func ExamplePolicy() {
	var p usersched.Policy = &lifo{stack: make([]usersched.Task, 0, 4096)}
	_ = p // s.Run(ctx, p)
}

func ExampleCPUSet() {
	var reserved, others usersched.CPUSet
	reserved.Set(3)
	for cpu := 0; cpu < 8; cpu++ {
		if !reserved.Has(cpu) {
			others.Set(cpu)
		}
	}
	fmt.Println(others.Len(), others.Has(3), others.Has(4))
	// Output: 7 false true
}

// Round trips through user space, from the counters of an interval.
func ExampleRoundTripHist_Quantile() {
	var before, after usersched.RoundTripHist
	after[4] = 95 // 95 round trips in [8, 16) µs
	after[12] = 5 // 5 in [2048, 4096) µs
	during := after.Sub(before)
	fmt.Println(during.Quantile(0.5), during.Quantile(0.99))
	// Output: 16µs 4.096ms
}
