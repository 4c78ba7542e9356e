// SPDX-License-Identifier: Apache-2.0

package schedext

import (
	"fmt"

	"github.com/cilium/ebpf/btf"
)

// APILevel picks the compiled object whose kfunc names the running kernel
// has (see bpf/compat.h): 3 with
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
