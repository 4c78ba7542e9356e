// SPDX-License-Identifier: Apache-2.0

package usersched

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
)

// loadSpec picks the object compiled for the running kernel's sched_ext kfunc
// names, as internal/sched does (see internal/sched/bpf/compat.h): level 3
// with scx_bpf_dsq_move_to_local___v2, 2 with scx_bpf_dsq_insert___v2, 1
// otherwise. The kernel BTF decoded for the choice stays in cache for the
// load itself.
func loadSpec(cache *btf.Cache) (*ebpf.CollectionSpec, int, error) {
	kernel, err := cache.Kernel()
	if err != nil && !errors.Is(err, btf.ErrNotSupported) {
		return nil, 0, fmt.Errorf("read kernel BTF: %w", err)
	}
	has := func(name string) bool {
		var fn *btf.Func
		return kernel != nil && kernel.TypeByName(name, &fn) == nil
	}
	switch {
	case has("scx_bpf_dsq_move_to_local___v2"):
		spec, err := loadUserschedV3()
		return spec, 3, err
	case has("scx_bpf_dsq_insert___v2"):
		spec, err := loadUserschedV2()
		return spec, 2, err
	default:
		spec, err := loadUsersched()
		return spec, 1, err
	}
}
