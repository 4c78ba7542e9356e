// SPDX-License-Identifier: Apache-2.0

package schedext

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
)

// Links are what a loaded scheduler holds on the kernel: its process-event
// programs, attached from load to Close, the reader of the ring they write
// to, and its struct_ops, attached from Attach to Detach. The zero value
// holds nothing.
//
// ReadEvent and CloseEvents may run concurrently with the other methods;
// Attach, Detach and Close must not race each other.
type Links struct {
	traces  []link.Link
	events  *ringbuf.Reader
	closing chan struct{} // closed by CloseEvents: wakes ReadEvent's wait
	closed  sync.Once
	ops     link.Link
}

// OpenEvents attaches a scheduler's tracing programs (process exec, fork
// and exit; CPU hotplug steps, for the critical pool) and opens the ring
// they write struct swl_event records to. On error, Close
// releases what it did attach.
func (l *Links) OpenEvents(ring *ebpf.Map, progs ...*ebpf.Program) error {
	for _, p := range progs {
		t, err := link.AttachTracing(link.TracingOptions{Program: p})
		if err != nil {
			return fmt.Errorf("attach %s: %w", p, err)
		}
		l.traces = append(l.traces, t)
	}
	r, err := ringbuf.NewReader(ring)
	if err != nil {
		return fmt.Errorf("open event ring: %w", err)
	}
	l.events = r
	l.closing = make(chan struct{})
	return nil
}

// How often ReadEvent looks at the event ring: the BPF side writes it
// without waking the reader (see emit_event in schedext.h). Right after an
// event it looks again within eventPollMin, so a burst (a pod starting its
// containers) is matched at that pace; each empty look doubles the wait up
// to eventPollMax. Every look wakes this process, a root-cgroup task beside
// the ones it schedules: looking every 25 ms cost an idle VM-lab guest 0.10
// CPU seconds a second (0.03 backing off), and the wakeups swung the shares
// of top-level cgroups with small weights (TestCgroupWeights' flat case,
// 2.6:1 for 3:1; docs/kubernetes.md, "Pod CPU requests"). The price: a
// process that execs after a quiet spell gets its command-matched strategy
// up to eventPollMax later; a fork inherits its parent's in BPF at once.
var eventPollMin, eventPollMax = 25 * time.Millisecond, 200 * time.Millisecond // variables for tests only

// ReadEvent blocks until the next process event. After CloseEvents or
// Close it returns an error wrapping os.ErrClosed.
func (l *Links) ReadEvent() (Event, error) {
	var rec ringbuf.Record
	var poll time.Duration // the wait after an empty look: doubles from eventPollMin
	var wait *time.Timer
	for {
		l.events.SetDeadline(time.Now()) // never block in the syscall: the timer below waits
		err := l.events.ReadInto(&rec)
		if err == nil {
			break
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			return Event{}, err
		}
		poll = min(max(2*poll, eventPollMin), eventPollMax)
		if wait == nil {
			wait = time.NewTimer(poll)
			defer wait.Stop()
		} else {
			wait.Reset(poll)
		}
		select {
		case <-wait.C:
		case <-l.closing:
			return Event{}, fmt.Errorf("process events: %w", os.ErrClosed)
		}
	}
	var raw intfSwlEvent
	if err := binary.Read(bytes.NewReader(rec.RawSample), binary.LittleEndian, &raw); err != nil {
		return Event{}, fmt.Errorf("decode event: %w", err)
	}
	return Event{Type: EventType(raw.Type), PID: raw.Pid, TGID: raw.Tgid, PPID: raw.Ppid}, nil
}

// CloseEvents makes a blocked ReadEvent return and closes the ring. The
// programs stay attached until Close: they do more than report (a forked
// process inherits its parent's strategy in BPF).
func (l *Links) CloseEvents() error {
	if l.events == nil {
		return nil
	}
	l.closed.Do(func() { close(l.closing) })
	return l.events.Close()
}

// Attach attaches ops, the scheduler's struct_ops map: from then on it is
// the kernel's scheduler. If another sched_ext scheduler holds the kernel,
// the error is an *UnsupportedError wrapping ErrBusy.
func (l *Links) Attach(ops *ebpf.Map) error {
	o, err := link.AttachStructOps(link.StructOpsOptions{Map: ops})
	if err != nil {
		if state, name, _ := State(); state != "" && state != "disabled" {
			return &UnsupportedError{Err: ErrBusy, What: name, Hint: "stop that scheduler first"}
		}
		return fmt.Errorf("attach scheduler: %w", err)
	}
	l.ops = o
	return nil
}

// Detach hands scheduling back to the kernel's default scheduler; the
// kernel runs the scheduler's exit path before it returns. Without Attach
// it does nothing.
func (l *Links) Detach() error {
	if l.ops == nil {
		return nil
	}
	err := l.ops.Close()
	l.ops = nil
	return err
}

// Close detaches the scheduler, closes the ring and detaches the programs.
func (l *Links) Close() error {
	errs := []error{l.Detach(), l.CloseEvents()}
	for _, t := range l.traces {
		errs = append(errs, t.Close())
	}
	l.traces = nil
	return errors.Join(errs...)
}
