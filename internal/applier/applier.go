// SPDX-License-Identifier: Apache-2.0

// Package applier is the node side of strategies: it reads the processes
// of this machine from procfs, resolves cgroup_path strategies to cgroup
// ids, matches both against a strategy.Set and keeps the scheduler's maps
// (a Target) in step, one process event at a time. Only node packages
// import it; the API server stops at internal/strategy.
package applier

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sort"
	"sync"

	"github.com/swiftlane/swiftlane/internal/podcgroup"
	"github.com/swiftlane/swiftlane/internal/strategy"
)

// Entry is what the scheduler keeps for a matched process or cgroup.
type Entry struct {
	Class   strategy.Class
	SliceNs uint64
	Inherit bool
	ID      uint32 // index of the strategy
}

// Target receives the Applier's decisions: the scheduler's BPF maps, or a
// recorder in tests. Changes become visible to tasks on Commit.
type Target interface {
	SetProcess(tgid uint32, e Entry) error
	DeleteProcess(tgid uint32) error
	SetCgroup(id uint64, e Entry) error
	DeleteCgroup(id uint64) error
	Commit() error
}

// Applied is one process the current strategies apply to.
type Applied struct {
	PID int
	// Index is the strategy's position in the Set (names may repeat or be empty).
	Index     int
	Strategy  string
	Class     strategy.Class
	Inherited bool
	Cmdline   string
}

type procState struct {
	idx       int
	entry     Entry // as written to the target
	inherited bool
	cmdline   string
}

// Applier keeps a Target in step with the processes on this machine: a full
// match when the strategies change, then one lookup per process event
// (exec, fork, exit) reported by the scheduler — no periodic rescans. With
// TrackProcesses the full match runs against a process index those events
// keep, in memory, instead of re-reading procfs.
// It is safe for concurrent use.
type Applier struct {
	mu         sync.Mutex
	procRoot   string
	cgroupRoot string
	// nsRoot is this process's cgroup namespace in the node's hierarchy:
	// not "/" in a pod, where procfs gives cgroup paths relative to it.
	nsRoot   string
	cgroupID func(dir string) (uint64, error)
	target   Target
	log      *slog.Logger
	// set is what the target holds: base (SetStrategies) followed by
	// extra (SetExtra).
	set, base, extra *strategy.Set
	procs            map[uint32]procState
	cgroups          map[uint64]int
	// dynamic entries come from a second source (the GTP-U operator); a
	// configured strategy that matches the same process wins over them.
	dynamic map[uint32]dynamicEntry
	onExit  []func(tgid uint32)
	// index holds what matching reads of each process, once tracking:
	// exec and fork events re-read a process, exit drops it, so a
	// strategy change matches in memory instead of re-reading procfs.
	index    map[uint32]strategy.Process
	tracking bool
	// unmatchable: strategies of set that match nothing here.
	unmatchable []strategy.Unmatchable
}

type dynamicEntry struct {
	e      Entry
	source string
}

// New returns an Applier over procfs and the cgroup v2 mount.
func New(target Target, procRoot, cgroupRoot string, log *slog.Logger) *Applier {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Applier{
		procRoot:   procRoot,
		cgroupRoot: cgroupRoot,
		nsRoot:     podcgroup.NamespaceRoot(procRoot, cgroupRoot),
		cgroupID:   podcgroup.CgroupID,
		target:     target,
		log:        log,
		set:        &strategy.Set{},
		base:       &strategy.Set{},
		procs:      map[uint32]procState{},
		cgroups:    map[uint64]int{},
		dynamic:    map[uint32]dynamicEntry{},
	}
}

func entryOf(s *strategy.Set, idx int) Entry {
	st := s.At(idx)
	return Entry{Class: st.EffectiveClass(), SliceNs: st.ExecutionTime, Inherit: st.Inherit, ID: uint32(idx)}
}

// SetStrategies replaces the strategies and re-matches every process once.
// Strategies given to SetExtra stay, after them.
func (a *Applier) SetStrategies(set *strategy.Set) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if set == nil {
		set = &strategy.Set{}
	}
	a.base = set
	_, err := a.applyLocked(set.Append(a.extra))
	return err
}

// SetExtra sets strategies matched after the ones SetStrategies gives,
// whatever those become (automatic mode's companions, while GTP-U traffic
// flows, behind the agent's or the config's strategies); nil removes them.
// Applied indexes them after the SetStrategies ones.
func (a *Applier) SetExtra(set *strategy.Set) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.extra = set
	_, err := a.applyLocked(a.base.Append(set))
	return err
}

// Retarget moves the Applier to a new, empty Target (the scheduler loaded
// again after the kernel dropped the old one, and its maps with it) and
// fills it: the current strategies matched afresh from procfs, entries
// inherited by processes still alive, and the dynamic entries. Process
// events stop updating the index until TrackProcesses is called again: the
// events between the two targets are lost.
func (a *Applier) Retarget(t Target) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	inherited := map[uint32]procState{}
	for tgid, ps := range a.procs {
		if ps.inherited {
			inherited[tgid] = ps
		}
	}
	a.target = t
	a.procs, a.cgroups = map[uint32]procState{}, map[uint64]int{}
	a.tracking, a.index = false, nil
	alive, err := a.applyLocked(a.set)
	errs := []error{err}
	for tgid, ps := range inherited {
		if _, matched := a.procs[tgid]; alive[tgid] && !matched && ps.idx < a.set.Len() {
			ps.entry = entryOf(a.set, ps.idx)
			a.procs[tgid] = ps
			errs = append(errs, a.target.SetProcess(tgid, ps.entry))
		}
	}
	for tgid, d := range a.dynamic {
		switch _, matched := a.procs[tgid]; {
		case !alive[tgid]:
			delete(a.dynamic, tgid) // its exit event went with the old target
		case !matched:
			errs = append(errs, a.target.SetProcess(tgid, d.e))
		}
	}
	errs = append(errs, a.target.Commit())
	return errors.Join(errs...)
}

// applyLocked makes set the strategies, matches what a change from the
// current ones can affect and commits. It returns the processes it listed.
func (a *Applier) applyLocked(set *strategy.Set) (map[uint32]bool, error) {
	// Strategies before the first that changed still match what they
	// matched and nothing else: only the rest is matched again (a new
	// strategy, the newest, is tried on the unmatched processes only).
	keep := a.set.SamePrefix(set)
	a.set = set

	var errs []error
	// Cgroups: resolved to ids here, matched against ancestors in BPF.
	want := map[uint64]int{}
	unmatchable := set.Unmatchable()
	for i := 0; i < set.Len(); i++ {
		cg := set.At(i).CgroupPath
		if cg == "" || set.At(i).CgroupV1 || set.At(i).CommandRegex != "" || set.At(i).PID != 0 || len(set.At(i).Selectors) > 0 {
			continue // combined matchers are resolved per process instead
		}
		id, err := a.cgroupID(filepath.Join(a.cgroupRoot, cg))
		if err != nil {
			unmatchable = append(unmatchable, cgroupMissing(set, i, err))
			continue
		}
		if _, dup := want[id]; !dup {
			want[id] = i
		}
	}
	a.reportUnmatchable(unmatchable)
	for id := range a.cgroups {
		if _, ok := want[id]; !ok {
			errs = append(errs, a.target.DeleteCgroup(id))
			delete(a.cgroups, id)
		}
	}
	for id, idx := range want {
		errs = append(errs, a.target.SetCgroup(id, entryOf(set, idx)))
		a.cgroups[id] = idx
	}

	// Processes: from the index when events keep it, else one pass over procfs.
	pids, err := ListPIDs(a.procRoot)
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	seen := make(map[uint32]bool, len(pids))
	for _, pid := range pids {
		tgid := uint32(pid)
		seen[tgid] = true
		if p, ok := a.index[tgid]; ok && a.tracking {
			from := keep
			if ps, had := a.procs[tgid]; had && ps.inherited {
				from = 0 // its own match, if any, replaces what it inherited
			} else if had && ps.idx < keep {
				continue // matched by a strategy that did not change
			}
			errs = append(errs, a.matchFromLocked(tgid, p, from))
			continue
		}
		// Not tracking, or a process whose fork event was lost (the ring
		// buffer overflowed) or is still queued: read it now.
		errs = append(errs, a.rematchLocked(tgid))
	}
	for tgid := range a.procs {
		if !seen[tgid] {
			delete(a.procs, tgid)
		}
	}
	for tgid := range a.index {
		if !seen[tgid] {
			delete(a.index, tgid) // its exit event was lost
		}
	}
	errs = append(errs, a.target.Commit())
	return seen, errors.Join(errs...)
}

// TrackProcesses switches strategy changes from re-reading every process in
// procfs to the process index, which exec, fork and exit events keep
// (HandleExec, HandleFork, HandleExit). Call it when the event feed starts:
// it reads every process once, and events queued since the scheduler
// attached are applied after it. A strategy change still lists procfs (one
// directory read) to pick up processes whose events were lost.
func (a *Applier) TrackProcesses() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	pids, err := ListPIDs(a.procRoot)
	if err != nil {
		return fmt.Errorf("list processes: %w", err)
	}
	a.index = make(map[uint32]strategy.Process, len(pids))
	var errs []error
	for _, pid := range pids {
		if p, err := a.readProcess(pid); err == nil {
			a.index[uint32(pid)] = p
			// Every indexed process has been matched against the current
			// strategies: SetStrategies relies on it to match only what a
			// change can affect.
			errs = append(errs, a.matchLocked(uint32(pid), p))
		}
	}
	a.tracking = true
	errs = append(errs, a.target.Commit())
	return errors.Join(errs...)
}

// readProcess reads a process, its cgroup path in the node's hierarchy
// (cgroup_path strategies and pod cgroups are absolute).
func (a *Applier) readProcess(pid int) (strategy.Process, error) {
	p, err := ReadProcess(a.procRoot, pid)
	p.Cgroup = podcgroup.Absolute(a.nsRoot, p.Cgroup)
	return p, err
}

// rematchLocked matches one process and updates the target (without Commit).
// Entries a parent passed down (inherit) stay even if the child does not
// match on its own.
func (a *Applier) rematchLocked(tgid uint32) error {
	p, err := a.readProcess(int(tgid))
	if err != nil {
		// Gone already: its exit event cleans up.
		delete(a.index, tgid)
		return nil
	}
	if a.tracking {
		a.index[tgid] = p
	}
	return a.matchLocked(tgid, p)
}

// matchLocked matches a process as read and updates the target (without
// Commit).
func (a *Applier) matchLocked(tgid uint32, p strategy.Process) error {
	return a.matchFromLocked(tgid, p, 0)
}

// matchFromLocked is matchLocked for a process that none of the first from
// strategies matches (they are unchanged and did not match it before).
func (a *Applier) matchFromLocked(tgid uint32, p strategy.Process, from int) error {
	old, had := a.procs[tgid]
	idx, ok := a.set.MatchFrom(p, from)
	switch {
	case ok:
		e := entryOf(a.set, idx)
		a.procs[tgid] = procState{idx: idx, entry: e, cmdline: p.Cmdline}
		// The same index is not enough: a changed strategy can stand there.
		if had && !old.inherited && old.entry == e {
			return nil
		}
		a.log.Debug("strategy applied", "pid", tgid, "strategy", a.set.Label(idx), "cmdline", p.Cmdline)
		return a.target.SetProcess(tgid, e)
	case had && old.inherited && old.idx < a.set.Len():
		return nil
	case had:
		delete(a.procs, tgid)
		a.log.Debug("strategy removed", "pid", tgid)
		if d, ok := a.dynamic[tgid]; ok {
			return a.target.SetProcess(tgid, d.e)
		}
		return a.target.DeleteProcess(tgid)
	}
	return nil
}

// HandleExec re-matches a process that replaced its program.
func (a *Applier) HandleExec(tgid uint32) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.rematchLocked(tgid); err != nil {
		return err
	}
	return a.target.Commit()
}

// HandleFork records a new process: inherited from its parent (the scheduler
// has already copied the parent's entry in BPF) or matched on its own.
func (a *Applier) HandleFork(tgid, parent uint32) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if ps, ok := a.procs[parent]; ok && ps.idx < a.set.Len() && a.set.At(ps.idx).Inherit {
		a.procs[tgid] = procState{idx: ps.idx, entry: entryOf(a.set, ps.idx), inherited: true, cmdline: ps.cmdline}
		if a.tracking {
			if p, err := a.readForked(tgid, parent); err == nil {
				a.index[tgid] = p
			}
		}
		// Write it too: covers a fork that raced with a strategy change.
		if err := a.target.SetProcess(tgid, entryOf(a.set, ps.idx)); err != nil {
			return err
		}
		return a.target.Commit()
	}
	p, err := a.readForked(tgid, parent)
	if err != nil {
		// Gone already: its exit event cleans up.
		delete(a.index, tgid)
		return nil
	}
	if a.tracking {
		a.index[tgid] = p
	}
	if err := a.matchLocked(tgid, p); err != nil {
		return err
	}
	return a.target.Commit()
}

// readForked reads a forked process, with what its parent's index entry
// says of it (procfs.go, readForked). A parent the index does not hold
// (not tracking, or its events lost) means a whole read.
func (a *Applier) readForked(tgid, parent uint32) (strategy.Process, error) {
	pp, ok := a.index[parent]
	if !ok || !a.tracking {
		return a.readProcess(int(tgid))
	}
	p, err := readForked(a.procRoot, int(tgid), pp)
	p.Cgroup = podcgroup.Absolute(a.nsRoot, p.Cgroup)
	return p, err
}

// HandleExit forgets a process; the scheduler already dropped its entry.
// Functions registered with OnExit are told too.
func (a *Applier) HandleExit(tgid uint32) {
	a.mu.Lock()
	delete(a.procs, tgid)
	delete(a.dynamic, tgid)
	delete(a.index, tgid)
	hooks := a.onExit
	a.mu.Unlock()
	for _, f := range hooks {
		f(tgid)
	}
}

// SetCgroupIDFunc replaces podcgroup.CgroupID, which refuses directories
// outside cgroup2, for tests that build a fake cgroup tree in a temporary
// directory. Call it before the first SetStrategies.
func (a *Applier) SetCgroupIDFunc(f func(dir string) (uint64, error)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.cgroupID = f
}

// OnExit registers f to be called (without the Applier's lock) for every
// process exit, so a dynamic source can keep its own state in step.
func (a *Applier) OnExit(f func(tgid uint32)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.onExit = append(a.onExit, f)
}

// SetDynamic gives a process an entry from a source other than the
// configured strategies (e.g. "gtp-auto"). Re-matching the strategies leaves
// it in place; a configured strategy that matches the process wins while it
// matches. The entry is visible to tasks when SetDynamic returns.
func (a *Applier) SetDynamic(tgid uint32, e Entry, source string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.dynamic[tgid] = dynamicEntry{e: e, source: source}
	if _, static := a.procs[tgid]; static {
		return nil
	}
	a.log.Debug("dynamic strategy applied", "pid", tgid, "source", source, "class", e.Class)
	if err := a.target.SetProcess(tgid, e); err != nil {
		return err
	}
	return a.target.Commit()
}

// ClearDynamic removes the entry source set for a process, if it has one.
func (a *Applier) ClearDynamic(tgid uint32, source string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	d, ok := a.dynamic[tgid]
	if !ok || d.source != source {
		return nil
	}
	delete(a.dynamic, tgid)
	if _, static := a.procs[tgid]; static {
		return nil
	}
	a.log.Debug("dynamic strategy removed", "pid", tgid, "source", source)
	if err := a.target.DeleteProcess(tgid); err != nil {
		return err
	}
	return a.target.Commit()
}

// Dynamic lists the processes with a dynamic entry from source.
func (a *Applier) Dynamic(source string) []uint32 {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []uint32
	for tgid, d := range a.dynamic {
		if d.source == source {
			out = append(out, tgid)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// Strategies is how many strategies SetStrategies last gave.
func (a *Applier) Strategies() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.base.Len()
}

// Applied lists the processes strategies currently apply to, by PID.
func (a *Applier) Applied() []Applied {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]Applied, 0, len(a.procs))
	for tgid, ps := range a.procs {
		out = append(out, Applied{
			PID: int(tgid), Index: ps.idx, Strategy: a.set.Label(ps.idx), Class: entryOf(a.set, ps.idx).Class,
			Inherited: ps.inherited, Cmdline: ps.cmdline,
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PID < out[j].PID })
	return out
}
