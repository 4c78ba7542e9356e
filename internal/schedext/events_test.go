// SPDX-License-Identifier: Apache-2.0

package schedext

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/swiftlane/swiftlane/internal/applier"
	"github.com/swiftlane/swiftlane/internal/strategy"
)

// The pump indexes the processes, applies exec, fork and exit events in
// order, skips a record that fails to read, and stops at the scheduler's
// exit or when the ring is closed.
func TestPumpEvents(t *testing.T) {
	proc := t.TempDir()
	write := func(pid int, cmd string) {
		d := filepath.Join(proc, strconv.Itoa(pid))
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "cmdline"), []byte(cmd+"\x00"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(100, "idle")
	rec := applier.NewRecorder()
	a := applier.New(rec, proc, t.TempDir(), nil)
	high := strategy.High
	set, err := strategy.Compile([]strategy.Strategy{{Name: "gnb", Class: &high, CommandRegex: "nr-gnb"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.SetStrategies(set); err != nil {
		t.Fatal(err)
	}

	for _, end := range []struct {
		last       error
		exited     bool
		wantClosed bool
	}{{last: nil, exited: true}, {last: fmt.Errorf("ringbuffer: %w", os.ErrClosed), wantClosed: true}} {
		write(100, "nr-gnb") // an exec the pump has not been told of yet
		write(200, "idle")
		steps := []func() (Event, error){
			func() (Event, error) { return Event{Type: EventExec, TGID: 100}, nil },
			func() (Event, error) { return Event{}, errors.New("decode event: unexpected EOF") },
			func() (Event, error) {
				write(200, "nr-gnb --cell 2")
				return Event{Type: EventFork, TGID: 200, PPID: 1}, nil
			},
			func() (Event, error) { return Event{Type: EventExit, TGID: 100}, nil },
		}
		if end.last == nil {
			steps = append(steps, func() (Event, error) { return Event{Type: EventSchedExit}, nil })
		} else {
			steps = append(steps, func() (Event, error) { return Event{}, end.last })
		}
		read := func() (Event, error) {
			if len(steps) == 0 {
				t.Fatal("the pump read past its end")
			}
			f := steps[0]
			steps = steps[1:]
			return f()
		}
		var logs bytes.Buffer
		exited, err := PumpEvents(read, a, slog.New(slog.NewTextHandler(&logs, nil)))
		if exited != end.exited || errors.Is(err, os.ErrClosed) != end.wantClosed {
			t.Fatalf("PumpEvents = %v, %v; want exited %v, closed %v", exited, err, end.exited, end.wantClosed)
		}
		if !strings.Contains(logs.String(), "unexpected EOF") {
			t.Errorf("the bad record was not logged:\n%s", logs.String())
		}
		// 100 matched on exec, then exited (the scheduler drops its entry,
		// the Applier forgets it); 200 matched on its fork.
		applied := a.Applied()
		if len(applied) != 1 || applied[0].PID != 200 {
			t.Errorf("applied after the events: %+v, want pid 200 only", applied)
		}
		if e, ok := rec.Process(100); !ok || e.Class != strategy.High {
			t.Errorf("pid 100's exec event did not apply the strategy: %+v %v", e, ok)
		}
	}
}
