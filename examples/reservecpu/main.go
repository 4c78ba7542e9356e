// SPDX-License-Identifier: Apache-2.0

// Command reservecpu is a scheduling policy written in Go with package
// usersched: one process gets a CPU to itself, everything else runs on the
// other CPUs — pinning with taskset and moving the rest away, done by the
// scheduler, for processes started later too.
//
//	go build ./examples/reservecpu && sudo ./reservecpu -comm nr-gnb -cpu 1
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/swiftlane/swiftlane/usersched"
)

// reserve is the policy: tasks named comm go to cpu, the others anywhere else.
type reserve struct {
	cpu    int32
	comm   [16]byte
	others usersched.CPUSet // every CPU but the reserved one
	queue  []usersched.Task
}

func (r *reserve) Enqueue(t *usersched.Task) { r.queue = append(r.queue, *t) }

func (r *reserve) Dispatch(d *usersched.Dispatcher) {
	sent := 0
	for i := range r.queue {
		if !d.Dispatch(&r.queue[i], r.place(d, &r.queue[i]), 0, 0) {
			break // ring full: the rest go next time
		}
		sent++
	}
	r.queue = append(r.queue[:0], r.queue[sent:]...) // reuses the array: no allocation
}

func (r *reserve) place(d *usersched.Dispatcher, t *usersched.Task) int32 {
	switch {
	case t.NrCPUsAllowed == 1: // pinned: only one CPU will do
		return t.CPU
	case t.Comm == r.comm:
		return r.cpu
	}
	if cpu := d.PickIdleCPU(t, &r.others); cpu != usersched.AnyCPU {
		return cpu
	}
	if t.CPU != r.cpu {
		return t.CPU // stay where the cache is warm
	}
	return int32((int(r.cpu) + 1) % d.NumCPUs()) // off the reserved CPU
}

func fail(code int, format string, args ...any) {
	fmt.Fprintf(os.Stderr, "reservecpu: "+format+"\n", args...)
	os.Exit(code)
}

func main() {
	comm := flag.String("comm", "", "command name (as in /proc/PID/comm) of the process to give a CPU")
	cpu := flag.Int("cpu", -1, "the CPU to reserve (default: the last one)")
	flag.Parse()
	if *comm == "" || len(*comm) > 15 {
		fail(2, "-comm NAME is required (at most 15 characters, as in /proc/PID/comm)")
	}
	s, err := usersched.Open(usersched.Options{})
	if err != nil {
		fail(1, "%v", err)
	}
	defer s.Close()
	if *cpu < 0 {
		*cpu = s.NumCPUs() - 1
	}
	if *cpu < 1 || *cpu >= s.NumCPUs() {
		fail(2, "-cpu %d: pick 1..%d, leaving a CPU for everything else", *cpu, s.NumCPUs()-1)
	}
	r := &reserve{cpu: int32(*cpu), queue: make([]usersched.Task, 0, 4096)}
	copy(r.comm[:], *comm)
	for c := range s.NumCPUs() {
		if c != *cpu {
			r.others.Set(c)
		}
	}
	if err := s.Attach(); err != nil {
		fail(1, "%v", err)
	}
	fmt.Fprintf(os.Stderr, "reservecpu: attached; CPU %d is reserved for %q\n", *cpu, *comm)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if exit, err := s.Run(ctx, r); exit != nil || ctx.Err() == nil {
		fail(1, "the kernel stopped the scheduler: %v %v", exit, err)
	}
}
