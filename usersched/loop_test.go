// SPDX-License-Identifier: Apache-2.0

package usersched

import (
	"testing"
	"time"
	"unsafe"

	"github.com/swiftlane/swiftlane/internal/userringbuf"
	"github.com/swiftlane/swiftlane/internal/userringbuf/ringtest"
)

// fakeKernel is the BPF side's end of both rings, in plain shared memory.
type fakeKernel struct {
	t         testing.TB
	queue     *userringbuf.Producer // BPF -> Go
	decisions *userringbuf.Consumer // Go -> BPF
	seq       uint64
}

func newHarness(t testing.TB, queueBytes, decisionBytes int) (*fakeKernel, *loop) {
	qp, qc, _ := ringtest.Pair(t, queueBytes)
	dp, dc, _ := ringtest.Pair(t, decisionBytes)
	return &fakeKernel{t: t, queue: qp, decisions: dc}, &loop{queued: qc, d: Dispatcher{ring: dp, ncpu: 4}}
}

// send queues a task for user space, as send_to_user does.
func (k *fakeKernel) send(pid uint32, vtime, execRuntime uint64, weight uint32) uint64 {
	buf, err := k.queue.Reserve(int(unsafe.Sizeof(userschedUsrTask{})))
	if err != nil {
		k.t.Fatal(err)
	}
	k.seq++
	r := (*userschedUsrTask)(unsafe.Pointer(unsafe.SliceData(buf)))
	*r = userschedUsrTask{Seq: k.seq, Vtime: vtime, ExecRuntime: execRuntime, Pid: pid, Tgid: pid, Cpu: 1, Weight: weight, NrCpusAllowed: 4, Class: uint32(ClassNormal)}
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&r.Comm[0])), 16), "task")
	k.queue.Submit(buf)
	return k.seq
}

// receive drains the decisions, as ops.dispatch does.
func (k *fakeKernel) receive() []userschedUsrDecision {
	var out []userschedUsrDecision
	for {
		rec, err := k.decisions.Peek()
		if err != nil {
			k.t.Fatal(err)
		}
		if rec == nil {
			return out
		}
		out = append(out, *(*userschedUsrDecision)(unsafe.Pointer(unsafe.SliceData(rec))))
		k.decisions.Advance()
	}
}

func step(t testing.TB, l *loop, p Policy) {
	t.Helper()
	if err := l.step(p); err != nil {
		t.Fatal(err)
	}
}

func TestFIFODecisions(t *testing.T) {
	k, l := newHarness(t, 1<<16, 1<<16)
	p := NewFIFO()
	var seqs []uint64
	for pid := uint32(100); pid < 103; pid++ {
		seqs = append(seqs, k.send(pid, 5, 0, 100))
	}
	step(t, l, p)
	got := k.receive()
	if len(got) != 3 {
		t.Fatalf("%d decisions, want 3", len(got))
	}
	for i, d := range got {
		if d.Pid != uint32(100+i) || d.Seq != seqs[i] || d.Cpu != AnyCPU || d.Vtime != 5 || d.SliceNs != 0 {
			t.Fatalf("decision %d: %+v", i, d)
		}
		if i > 0 && d.Deadline <= got[i-1].Deadline {
			t.Fatalf("FIFO deadlines not increasing: %d then %d", got[i-1].Deadline, d.Deadline)
		}
	}
	if s := l.loopStats(); s.Tasks != 3 || s.Decisions != 3 || s.Iterations != 1 {
		t.Fatalf("loop stats %+v", s)
	}
}

func TestVruntimeOrderAndCredit(t *testing.T) {
	k, l := newHarness(t, 1<<16, 1<<16)
	p := NewVruntime(0, 0)
	// Same vtime: the task that slept (no runtime since) goes first.
	k.send(1, 1_000_000_000, 50_000_000, 100) // hog
	k.send(2, 1_000_000_000, 0, 100)          // just woke
	k.send(3, 1_000_000_000, 10_000_000, 100)
	step(t, l, p)
	got := k.receive()
	if len(got) != 3 || got[0].Pid != 2 || got[1].Pid != 3 || got[2].Pid != 1 {
		t.Fatalf("dispatch order %v, want pids 2, 3, 1", pids(got))
	}
	if got[2].Deadline != 1_000_000_000+50_000_000 {
		t.Fatalf("hog deadline %d, want vtime + runtime since sleep", got[2].Deadline)
	}
	// A task that slept for ages comes back at most LagNs behind the clock...
	k.send(4, 0, 0, 100)
	// ... scaled by weight: twice the weight, half the virtual credit.
	k.send(5, 0, 0, 200)
	step(t, l, p)
	got = k.receive()
	want := map[uint32]uint64{4: 1_000_000_000 - 20_000_000, 5: 1_000_000_000 - 10_000_000}
	for _, d := range got {
		if d.Vtime != want[d.Pid] {
			t.Fatalf("pid %d: vtime %d, want %d (bounded sleep credit)", d.Pid, d.Vtime, want[d.Pid])
		}
	}
	// The slice shrinks as tasks pile up, down to a floor.
	for _, c := range []struct {
		waiting int
		slice   uint64
	}{{1, 2_000_000}, {4, 1_000_000}, {40, 500_000}} {
		for i := 0; i < c.waiting; i++ {
			k.send(10+uint32(i), 1_000_000_000, 0, 100)
		}
		step(t, l, p)
		if d := k.receive()[0]; d.SliceNs != c.slice {
			t.Fatalf("slice %d with %d tasks waiting on 4 CPUs, want %d", d.SliceNs, c.waiting, c.slice)
		}
	}
	// A task far ahead of the others (it ran a lot at a low weight) is
	// pulled back, so it waits a bounded time too.
	k.send(99, 10_000_000_000, 0, 100)
	step(t, l, p)
	if d := k.receive()[0]; d.Vtime != 1_000_000_000+100_000_000 {
		t.Fatalf("vtime %d far ahead of the clock not bounded", d.Vtime)
	}
}

func pids(ds []userschedUsrDecision) []uint32 {
	var out []uint32
	for _, d := range ds {
		out = append(out, d.Pid)
	}
	return out
}

// A full decision ring must not lose or reorder tasks: the policy keeps what
// it could not send and sends it on the next round.
func TestRingFullKeepsTasks(t *testing.T) {
	for _, name := range []string{"fifo", "vruntime"} {
		t.Run(name, func(t *testing.T) {
			k, l := newHarness(t, 1<<16, 4096) // 4096 / (40+8) = 85 decisions
			p, err := NewPolicy(name, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			const n = 300
			for i := uint32(0); i < n; i++ {
				k.send(1000+i, 1_000_000_000+uint64(i), 0, 100)
			}
			var got []userschedUsrDecision
			for round := 0; len(got) < n; round++ {
				if round > 10 {
					t.Fatalf("only %d of %d tasks dispatched after %d rounds", len(got), n, round)
				}
				step(t, l, p)
				batch := k.receive()
				if len(batch) > 85 {
					t.Fatalf("%d decisions in one round through an 85-slot ring", len(batch))
				}
				got = append(got, batch...)
			}
			for i, d := range got {
				if d.Pid != 1000+uint32(i) {
					t.Fatalf("decision %d is pid %d: lost or reordered", i, d.Pid)
				}
			}
			if s := l.loopStats(); s.RingFull < 3 {
				t.Fatalf("ring full counted %d times, want >= 3", s.RingFull)
			}
		})
	}
}

// The dispatch path allocates nothing per task: reading the ring, the
// policy, writing decisions.
func TestLoopDoesNotAllocate(t *testing.T) {
	for _, name := range []string{"fifo", "vruntime"} {
		t.Run(name, func(t *testing.T) {
			k, l := newHarness(t, 1<<16, 1<<16)
			p, _ := NewPolicy(name, 0, 0)
			allocs := testing.AllocsPerRun(200, func() {
				for i := uint32(0); i < 64; i++ {
					k.send(i+1, uint64(i)*1000, uint64(i)*10, 100)
				}
				if err := l.step(p); err != nil {
					t.Fatal(err)
				}
				for {
					rec, _ := k.decisions.Peek()
					if rec == nil {
						break
					}
					k.decisions.Advance()
				}
			})
			if allocs != 0 {
				t.Fatalf("%v allocations per round of 64 tasks, want 0", allocs)
			}
		})
	}
}

func TestPickIdleCPU(t *testing.T) {
	d := &Dispatcher{ncpu: 4}
	d.idle.Set(1)
	d.idle.Set(2)
	d.idle.Set(3)
	task := &Task{CPU: 2}
	if cpu := d.PickIdleCPU(task, nil); cpu != 2 {
		t.Fatalf("got CPU %d, want the task's own idle CPU 2", cpu)
	}
	if cpu := d.PickIdleCPU(task, nil); cpu == 2 || cpu == AnyCPU {
		t.Fatalf("got CPU %d: 2 was already handed out this round", cpu)
	}
	var only3 CPUSet
	only3.Set(3)
	if d.idle.Has(3) {
		if cpu := d.PickIdleCPU(task, &only3); cpu != 3 {
			t.Fatalf("got CPU %d, want 3 (the only allowed idle CPU)", cpu)
		}
	}
	if cpu := d.PickIdleCPU(task, &only3); cpu != AnyCPU {
		t.Fatalf("got CPU %d from an exhausted set, want AnyCPU", cpu)
	}
	if d.idle.Len() != 0 {
		t.Fatalf("idle set %v after handing every CPU out", d.idle.Len())
	}
}

func TestNewPolicy(t *testing.T) {
	if _, err := NewPolicy("lottery", 0, 0); err == nil {
		t.Fatal("unknown policy accepted")
	}
}

func TestTaskDecode(t *testing.T) {
	k, l := newHarness(t, 1<<16, 1<<16)
	k.send(42, 7, 8, 300)
	var seen Task
	step(t, l, policyFunc(func(t *Task) { seen = *t }))
	if seen.PID != 42 || seen.TGID != 42 || seen.CPU != 1 || seen.Weight != 300 || seen.Vtime != 7 ||
		seen.ExecRuntime != 8 || seen.NrCPUsAllowed != 4 || seen.Class != ClassNormal || seen.Name() != "task" || seen.seq != 1 {
		t.Fatalf("decoded %+v", seen)
	}
}

// policyFunc records tasks and dispatches nothing.
type policyFunc func(t *Task)

func (f policyFunc) Enqueue(t *Task)      { f(t) }
func (f policyFunc) Dispatch(*Dispatcher) {}

func TestRoundTripQuantile(t *testing.T) {
	var h RoundTripHist
	if h.Quantile(0.99) != 0 {
		t.Fatal("quantile of an empty histogram")
	}
	h[3] = 90  // [4, 8) µs
	h[10] = 10 // [512, 1024) µs
	if got := h.Quantile(0.5); got != 8*time.Microsecond {
		t.Fatalf("median %v, want the 8 µs bucket bound", got)
	}
	if got := h.Quantile(0.99); got != 1024*time.Microsecond {
		t.Fatalf("p99 %v, want the 1024 µs bucket bound", got)
	}
	var before RoundTripHist
	before[3] = 90
	if got := h.Sub(before).Quantile(0.5); got != 1024*time.Microsecond {
		t.Fatalf("median of the interval %v, want 1024 µs", got)
	}
}

// A task that ran long without sleeping is pushed back by at most
// MaxRuntimeNs (scaled): its wait stays bounded too.
func TestVruntimeRuntimeCap(t *testing.T) {
	k, l := newHarness(t, 1<<16, 1<<16)
	p := NewVruntime(0, 0)
	k.send(1, 1_000_000_000, 500_000_000, 100) // 500 ms without sleeping
	k.send(2, 1_000_000_000, 500_000_000, 400) // same, 4x the weight
	step(t, l, p)
	want := map[uint32]uint64{1: 1_000_000_000 + 100_000_000, 2: 1_000_000_000 + 25_000_000}
	for _, d := range k.receive() {
		if d.Deadline != want[d.Pid] {
			t.Fatalf("pid %d: deadline %d, want %d (runtime since sleep capped at 100 ms, scaled by weight)", d.Pid, d.Deadline, want[d.Pid])
		}
	}
}

// The FIFO's ring grows when more tasks wait than it was sized for, with
// its head anywhere in it: the order must survive the copy.
func TestFIFOGrowsInOrder(t *testing.T) {
	q := newTaskQueue(8)
	next, want := uint32(0), uint32(0)
	push := func(n int) {
		for range n {
			q.push(&Task{PID: next})
			next++
		}
	}
	pop := func(n int) {
		for range n {
			if got := q.front().PID; got != want {
				t.Fatalf("popped pid %d, want %d (buffer of %d, head %d)", got, want, len(q.buf), q.head)
			}
			q.pop()
			want++
		}
	}
	push(6)
	pop(5)   // head in the middle
	push(20) // wraps, then grows twice
	pop(21)
	if q.n != 0 || len(q.buf) != 32 {
		t.Fatalf("%d tasks left in a buffer of %d, want 0 in 32", q.n, len(q.buf))
	}
}

// BenchmarkStep is the Go side's cost per task: read it from the ring, the
// policy, write its decision (no kernel: run it anywhere; the fake kernel's
// writes and reads of the rings are included). One op is one task.
func BenchmarkStep(b *testing.B) {
	for _, name := range PolicyNames() {
		b.Run(name, func(b *testing.B) {
			k, l := newHarness(b, 1<<16, 1<<16)
			p, _ := NewPolicy(name, 0, 0)
			b.ReportAllocs()
			b.ResetTimer()
			for done := 0; done < b.N; {
				batch := min(64, b.N-done)
				for j := range batch {
					k.send(uint32(j+1), uint64(done+j)*1000, uint64(j)*10, 100)
				}
				if err := l.step(p); err != nil {
					b.Fatal(err)
				}
				for {
					rec, _ := k.decisions.Peek()
					if rec == nil {
						break
					}
					k.decisions.Advance()
				}
				done += batch
			}
		})
	}
}
