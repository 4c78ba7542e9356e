// SPDX-License-Identifier: Apache-2.0

package schedext

import (
	"github.com/swiftlane/swiftlane/internal/applier"
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

// ApplyEvent hands an exec, fork or exit event to the Applier; both modes'
// event loops use it. Other events are the caller's.
func ApplyEvent(a *applier.Applier, ev Event) error {
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
