// SPDX-License-Identifier: Apache-2.0

package usersched

import (
	"fmt"
	"strings"
)

// PolicyNames are the built-in policies NewPolicy knows.
func PolicyNames() []string { return []string{"vruntime", "fifo"} }

// NewPolicy returns a built-in policy by name (PolicyNames). sliceNs and
// sliceMinNs are vruntime's slice bounds (0: defaults).
func NewPolicy(name string, sliceNs, sliceMinNs uint64) (Policy, error) {
	switch name {
	case "vruntime":
		return NewVruntime(sliceNs, sliceMinNs), nil
	case "fifo":
		return NewFIFO(), nil
	}
	return nil, fmt.Errorf("unknown policy %q: use one of %s", name, strings.Join(PolicyNames(), ", "))
}

// initialTasks is the room policies preallocate; they grow (allocating)
// only if more tasks than that wait at once.
const initialTasks = 4096

// FIFO runs tasks in the order they became runnable, each on an idle CPU if
// one is free (AnyCPU), for the default slice.
type FIFO struct {
	q taskQueue
}

// NewFIFO returns an empty FIFO policy.
func NewFIFO() *FIFO { return &FIFO{q: newTaskQueue(initialTasks)} }

// Enqueue implements Policy.
func (f *FIFO) Enqueue(t *Task) { f.q.push(t) }

// Dispatch implements Policy.
func (f *FIFO) Dispatch(d *Dispatcher) {
	for f.q.n > 0 {
		if !d.Dispatch(f.q.front(), AnyCPU, 0, 0) {
			return
		}
		f.q.pop()
	}
}

// Len is the number of tasks waiting.
func (f *FIFO) Len() int { return f.q.n }

// Vruntime orders tasks as the in-kernel scheduler does, in Go: by deadline
// = virtual runtime + the CPU time used since the task last slept (capped,
// both scaled by weight and class), so tasks that sleep often go before CPU
// hogs. Sleep credit is bounded: a task that slept long comes back at most
// LagNs (scaled) behind the most advanced task dispatched, and a task's
// virtual runtime may run at most AheadNs ahead of it. The slice shrinks from
// SliceNs towards SliceMinNs as more tasks wait per CPU.
type Vruntime struct {
	SliceNs      uint64 // slice when few tasks wait (default 2 ms)
	SliceMinNs   uint64 // smallest slice (default 500 µs)
	LagNs        uint64 // most sleep credit a task keeps (default 20 ms)
	AheadNs      uint64 // farthest a task may run ahead (default 100 ms)
	MaxRuntimeNs uint64 // most runtime-since-sleep counted (default 100 ms)

	now  uint64 // largest virtual runtime dispatched (0: none yet)
	heap []entry
}

type entry struct {
	deadline uint64
	t        Task
}

// NewVruntime returns a Vruntime policy with the given slice bounds (0:
// defaults) and default credit bounds.
func NewVruntime(sliceNs, sliceMinNs uint64) *Vruntime {
	v := &Vruntime{SliceNs: sliceNs, SliceMinNs: sliceMinNs, LagNs: 20_000_000, AheadNs: 100_000_000, MaxRuntimeNs: 100_000_000}
	if v.SliceNs == 0 {
		v.SliceNs = defaultSliceNs
	}
	if v.SliceMinNs == 0 || v.SliceMinNs > v.SliceNs {
		v.SliceMinNs = min(500_000, v.SliceNs)
	}
	v.heap = make([]entry, 0, initialTasks)
	return v
}

// scaled turns CPU time into virtual time for t, as the BPF side ages Vtime:
// by weight (100 is nice 0), high ages 4x slower, background 8x faster.
func scaled(ns uint64, t *Task) uint64 {
	w8 := uint64(8)
	switch t.Class {
	case ClassCritical, ClassHigh:
		w8 = 32
	case ClassBackground:
		w8 = 1
	}
	w := uint64(t.Weight) * w8
	if w == 0 {
		w = 1
	}
	return ns * 100 * 8 / w
}

// Enqueue implements Policy.
func (v *Vruntime) Enqueue(t *Task) {
	if lag := scaled(v.LagNs, t); v.now > lag && t.Vtime < v.now-lag {
		t.Vtime = v.now - lag // bounded sleep credit
	}
	if v.now > 0 && t.Vtime > v.now+v.AheadNs {
		t.Vtime = v.now + v.AheadNs // bounded debt: every task waits a bounded time
	}
	deadline := t.Vtime + scaled(min(t.ExecRuntime, v.MaxRuntimeNs), t)
	v.heap = append(v.heap, entry{deadline: deadline, t: *t})
	v.up(len(v.heap) - 1)
}

// Dispatch implements Policy: every waiting task, earliest deadline first,
// to AnyCPU, where the kernel keeps them in deadline order.
func (v *Vruntime) Dispatch(d *Dispatcher) {
	slice := v.SliceNs / uint64(len(v.heap)/max(d.NumCPUs(), 1)+1)
	slice = max(slice, v.SliceMinNs)
	for len(v.heap) > 0 {
		e := &v.heap[0]
		if !d.Dispatch(&e.t, AnyCPU, slice, e.deadline) {
			return
		}
		v.now = max(v.now, e.t.Vtime)
		v.pop()
	}
}

// Len is the number of tasks waiting.
func (v *Vruntime) Len() int { return len(v.heap) }

func (v *Vruntime) less(i, j int) bool { return v.heap[i].deadline < v.heap[j].deadline }

func (v *Vruntime) up(i int) {
	for i > 0 {
		parent := (i - 1) / 2
		if !v.less(i, parent) {
			return
		}
		v.heap[i], v.heap[parent] = v.heap[parent], v.heap[i]
		i = parent
	}
}

func (v *Vruntime) pop() {
	last := len(v.heap) - 1
	v.heap[0] = v.heap[last]
	v.heap = v.heap[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < last && v.less(l, m) {
			m = l
		}
		if r < last && v.less(r, m) {
			m = r
		}
		if m == i {
			return
		}
		v.heap[i], v.heap[m] = v.heap[m], v.heap[i]
		i = m
	}
}

// taskQueue is a FIFO of Task values in a ring that doubles when full.
type taskQueue struct {
	buf  []Task
	head int
	n    int
}

func newTaskQueue(capacity int) taskQueue { return taskQueue{buf: make([]Task, capacity)} }

func (q *taskQueue) push(t *Task) {
	if q.n == len(q.buf) {
		grown := make([]Task, 2*len(q.buf))
		for i := 0; i < q.n; i++ {
			grown[i] = q.buf[(q.head+i)%len(q.buf)]
		}
		q.buf, q.head = grown, 0
	}
	q.buf[(q.head+q.n)%len(q.buf)] = *t
	q.n++
}

func (q *taskQueue) front() *Task { return &q.buf[q.head] }

func (q *taskQueue) pop() {
	q.head = (q.head + 1) % len(q.buf)
	q.n--
}
