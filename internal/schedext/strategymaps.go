// SPDX-License-Identifier: Apache-2.0

package schedext

import (
	"errors"
	"sync"

	"github.com/cilium/ebpf"

	"github.com/swiftlane/swiftlane/internal/applier"
)

// StrategyMaps is the applier.Target over the strategy maps of
// bpf/schedext.h: tgid_strategy, cgroup_strategy, nr_cgroup_strategies and
// strategy_gen. Both BPF schedulers (internal/sched's and usersched's)
// include them, so both write their strategies through it.
type StrategyMaps struct {
	tgid, cgroup *ebpf.Map
	nrCgroupsVar *ebpf.Variable
	genVar       *ebpf.Variable
	mu           sync.Mutex // map writes and the counters below
	gen          uint64
	nrCgroups    uint32
}

// NewStrategyMaps writes strategies into a loaded object's strategy maps.
func NewStrategyMaps(tgid, cgroup *ebpf.Map, nrCgroups, gen *ebpf.Variable) *StrategyMaps {
	return &StrategyMaps{tgid: tgid, cgroup: cgroup, nrCgroupsVar: nrCgroups, genVar: gen}
}

// toBPF gives an entry the maps' value type, struct swl_strategy.
func toBPF(e applier.Entry) intfSwlStrategy {
	v := intfSwlStrategy{Class: uint32(e.Class), SliceNs: e.SliceNs, Id: e.ID}
	if e.Inherit {
		v.Flags |= 1 // SWL_STRAT_INHERIT
	}
	return v
}

// SetProcess gives every thread of process tgid a strategy.
func (m *StrategyMaps) SetProcess(tgid uint32, e applier.Entry) error {
	v := toBPF(e)
	return m.tgid.Put(tgid, &v)
}

// DeleteProcess removes a process's strategy.
func (m *StrategyMaps) DeleteProcess(tgid uint32) error {
	if err := m.tgid.Delete(tgid); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return err
	}
	return nil
}

// SetCgroup gives every process in cgroup id (its directory's inode number)
// and below a strategy.
func (m *StrategyMaps) SetCgroup(id uint64, e applier.Entry) error {
	v := toBPF(e)
	m.mu.Lock()
	defer m.mu.Unlock()
	var old intfSwlStrategy
	if err := m.cgroup.Lookup(id, &old); errors.Is(err, ebpf.ErrKeyNotExist) {
		m.nrCgroups++
	}
	return m.cgroup.Put(id, &v)
}

// DeleteCgroup removes a cgroup's strategy.
func (m *StrategyMaps) DeleteCgroup(id uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	err := m.cgroup.Delete(id)
	if err == nil && m.nrCgroups > 0 {
		m.nrCgroups--
	}
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return err
	}
	return nil
}

// Commit bumps the strategy generation: every task re-resolves its class on
// its next enqueue.
func (m *StrategyMaps) Commit() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.gen++
	if err := m.nrCgroupsVar.Set(m.nrCgroups); err != nil {
		return err
	}
	return m.genVar.Set(m.gen)
}

var _ applier.Target = (*StrategyMaps)(nil)
