// SPDX-License-Identifier: Apache-2.0

package schedext

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
)

// APILevel picks the compiled object whose kfunc names the running kernel
// has (see internal/sched/bpf/compat.h): 3 with
// scx_bpf_dsq_move_to_local___v2, 2 with scx_bpf_dsq_insert___v2, 1
// otherwise. Both schedulers compile one object per level.
func APILevel(cache *btf.Cache) (int, error) {
	kernel, err := cache.Kernel()
	if err != nil {
		return 0, fmt.Errorf("read kernel BTF: %w", err)
	}
	has := func(name string) bool {
		var fn *btf.Func
		return kernel.TypeByName(name, &fn) == nil
	}
	switch {
	case has("scx_bpf_dsq_move_to_local___v2"):
		return 3, nil
	case has("scx_bpf_dsq_insert___v2"):
		return 2, nil
	default:
		return 1, nil
	}
}

// Objects are a scheduler's bpf2go loaders, one per API level: Objects[0]
// parses the level 1 object, Objects[2] the level 3 one.
type Objects [3]func() (*ebpf.CollectionSpec, error)

// LoadSpec picks and parses the object for the running kernel's API level
// (level 1 where the kernel has no BTF to tell), and returns the level. The
// kernel BTF decoded for the choice stays in cache for the load itself
// (decoding it is slow under TCG).
func LoadSpec(cache *btf.Cache, objs Objects) (*ebpf.CollectionSpec, int, error) {
	level, err := APILevel(cache)
	if errors.Is(err, btf.ErrNotSupported) {
		level = 1
	} else if err != nil {
		return nil, 0, err
	}
	spec, err := objs[level-1]()
	return spec, level, err
}
