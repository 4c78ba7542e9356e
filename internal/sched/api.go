// SPDX-License-Identifier: Apache-2.0

package sched

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
)

// APILevel picks the compiled object whose kfunc names the running kernel
// has (see bpf/compat.h): 3 with scx_bpf_dsq_move_to_local___v2, 2 with
// scx_bpf_dsq_insert___v2, 1 otherwise. usersched's objects follow the same
// levels.
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

// loadSpec picks and parses the object. The kernel BTF decoded for the
// choice stays in cache for the load itself (decoding it is slow under TCG).
func loadSpec(cache *btf.Cache) (*ebpf.CollectionSpec, int, error) {
	level, err := APILevel(cache)
	if err != nil && !errors.Is(err, btf.ErrNotSupported) {
		return nil, 0, err
	}
	var spec *ebpf.CollectionSpec
	switch level {
	case 3:
		spec, err = loadSwiftlaneV3()
	case 2:
		spec, err = loadSwiftlaneV2()
	default:
		spec, err = loadSwiftlane()
	}
	return spec, level, err
}
