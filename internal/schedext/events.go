// SPDX-License-Identifier: Apache-2.0

package schedext

import (
	"errors"
	"log/slog"
	"os"

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

// PumpEvents keeps a in step with the processes here, in either mode: it
// switches a to its process index (TrackProcesses), then hands it every
// exec, fork and exit read returns, until read reports the scheduler being
// disabled (exited is true) or fails with os.ErrClosed (CloseEvents; err is
// that error). Other read errors are logged and skipped: one bad record
// must not end strategy matching for the rest of the run.
func PumpEvents(read func() (Event, error), a *applier.Applier, log *slog.Logger) (exited bool, err error) {
	// From here on the events keep the index, so strategy changes match in
	// memory instead of re-reading /proc.
	if err := a.TrackProcesses(); err != nil {
		log.Warn("process index: strategy changes re-read /proc", "err", err)
	}
	for {
		ev, err := read()
		switch {
		case errors.Is(err, os.ErrClosed):
			return false, err
		case err != nil:
			log.Warn("process event", "err", err)
		case ev.Type == EventSchedExit:
			return true, nil
		default:
			if err := applyEvent(a, ev); err != nil {
				log.Warn("apply strategy", "pid", ev.TGID, "err", err)
			}
		}
	}
}

func applyEvent(a *applier.Applier, ev Event) error {
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
