// SPDX-License-Identifier: Apache-2.0

package applier

import "sync"

// Recorder is a Target that schedules nothing: it only remembers the
// entries. The agent uses it in observe mode (no sched_ext), tests use it
// where the BPF map is not the point. Safe for concurrent use.
type Recorder struct {
	mu        sync.Mutex
	processes map[uint32]Entry
	cgroups   map[uint64]Entry
	commits   int
}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder {
	return &Recorder{processes: map[uint32]Entry{}, cgroups: map[uint64]Entry{}}
}

func (r *Recorder) SetProcess(tgid uint32, e Entry) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.processes[tgid] = e
	return nil
}

func (r *Recorder) DeleteProcess(tgid uint32) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.processes, tgid)
	return nil
}

func (r *Recorder) SetCgroup(id uint64, e Entry) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cgroups[id] = e
	return nil
}

func (r *Recorder) DeleteCgroup(id uint64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.cgroups, id)
	return nil
}

func (r *Recorder) Commit() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.commits++
	return nil
}

// Process returns the entry recorded for a process.
func (r *Recorder) Process(tgid uint32) (Entry, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.processes[tgid]
	return e, ok
}

// Processes returns how many processes have an entry.
func (r *Recorder) Processes() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.processes)
}

// Cgroup returns the entry recorded for a cgroup id.
func (r *Recorder) Cgroup(id uint64) (Entry, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.cgroups[id]
	return e, ok
}

// Cgroups returns how many cgroups have an entry.
func (r *Recorder) Cgroups() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.cgroups)
}

var _ Target = (*Recorder)(nil)
