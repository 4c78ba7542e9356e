// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"sync"

	"github.com/swiftlane/swiftlane/internal/strategy"
)

// RecordingTarget is a strategy.Target that schedules nothing: it only
// remembers the entries, for observe mode and tests. Safe for concurrent use.
type RecordingTarget struct {
	mu        sync.Mutex
	processes map[uint32]strategy.Entry
	cgroups   map[uint64]strategy.Entry
	commits   int
}

// NewRecordingTarget returns an empty target.
func NewRecordingTarget() *RecordingTarget {
	return &RecordingTarget{processes: map[uint32]strategy.Entry{}, cgroups: map[uint64]strategy.Entry{}}
}

func (t *RecordingTarget) SetProcess(tgid uint32, e strategy.Entry) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.processes[tgid] = e
	return nil
}

func (t *RecordingTarget) DeleteProcess(tgid uint32) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.processes, tgid)
	return nil
}

func (t *RecordingTarget) SetCgroup(id uint64, e strategy.Entry) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cgroups[id] = e
	return nil
}

func (t *RecordingTarget) DeleteCgroup(id uint64) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.cgroups, id)
	return nil
}

func (t *RecordingTarget) Commit() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.commits++
	return nil
}

// Process returns the entry recorded for a process.
func (t *RecordingTarget) Process(tgid uint32) (strategy.Entry, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.processes[tgid]
	return e, ok
}

var _ strategy.Target = (*RecordingTarget)(nil)
