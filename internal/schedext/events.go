// SPDX-License-Identifier: Apache-2.0

package schedext

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"structs"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/swiftlane/swiftlane/internal/strategy"
)

// Event is a process lifecycle event from the kernel.
type Event struct {
	Type EventType
	PID  uint32
	TGID uint32
	PPID uint32
}

// EventType says what happened to a process (enum swl_event_type).
type EventType uint32

const (
	EventExec      EventType = 1
	EventFork      EventType = 2
	EventExit      EventType = 3
	EventSchedExit EventType = 4 // the scheduler is being disabled
)

// rawEvent mirrors struct swl_event (intf.h), a record of the events ring.
type rawEvent struct {
	_    structs.HostLayout
	Type uint32
	Pid  uint32
	Tgid uint32
	Ppid uint32
}

// EventReader reads a scheduler's events ring. Read and Close may be called
// from different goroutines: Close makes a blocked Read return.
type EventReader struct {
	r *ringbuf.Reader
}

// NewEventReader opens the events ring (a BPF_MAP_TYPE_RINGBUF of struct
// swl_event).
func NewEventReader(events *ebpf.Map) (*EventReader, error) {
	r, err := ringbuf.NewReader(events)
	if err != nil {
		return nil, fmt.Errorf("open event ring: %w", err)
	}
	return &EventReader{r: r}, nil
}

// Read blocks until the next event. After Close it returns an error
// wrapping os.ErrClosed.
func (e *EventReader) Read() (Event, error) {
	rec, err := e.r.Read()
	if err != nil {
		return Event{}, err
	}
	var raw rawEvent
	if err := binary.Read(bytes.NewReader(rec.RawSample), binary.LittleEndian, &raw); err != nil {
		return Event{}, fmt.Errorf("decode event: %w", err)
	}
	return Event{Type: EventType(raw.Type), PID: raw.Pid, TGID: raw.Tgid, PPID: raw.Ppid}, nil
}

// Close releases the ring and makes a blocked Read return.
func (e *EventReader) Close() error { return e.r.Close() }

// ApplyEvent hands an exec, fork or exit event to the Applier; both modes'
// event loops use it. Other events are the caller's.
func ApplyEvent(a *strategy.Applier, ev Event) error {
	switch ev.Type {
	case EventExec:
		return a.HandleExec(ev.TGID)
	case EventFork:
		return a.HandleFork(ev.TGID, ev.PPID)
	case EventExit:
		a.HandleExit(ev.TGID)
	}
	return nil
}
