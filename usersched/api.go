// SPDX-License-Identifier: Apache-2.0

package usersched

import (
	"errors"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"

	"github.com/swiftlane/swiftlane/internal/sched"
)

// loadSpec picks the object compiled for the running kernel's sched_ext kfunc
// names, at the in-kernel scheduler's API levels (sched.APILevel). The kernel
// BTF decoded for the choice stays in cache for the load itself.
func loadSpec(cache *btf.Cache) (*ebpf.CollectionSpec, int, error) {
	level, err := sched.APILevel(cache)
	if err != nil && !errors.Is(err, btf.ErrNotSupported) {
		return nil, 0, err
	}
	switch level {
	case 3:
		spec, err := loadUserschedV3()
		return spec, 3, err
	case 2:
		spec, err := loadUserschedV2()
		return spec, 2, err
	default:
		spec, err := loadUsersched()
		return spec, 1, err
	}
}
