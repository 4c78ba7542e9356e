// SPDX-License-Identifier: Apache-2.0

package podcgroup

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// CgroupID returns the id BPF sees for a cgroup v2 directory (what
// bpf_get_current_cgroup_id and cgroup->kn->id give): on 64-bit kernels
// the directory's inode number in the cgroup2 filesystem. applier.Applier
// resolves cgroup_path strategies with it.
//
// It refuses directories outside cgroup2: a v1 hierarchy numbers its own
// inodes, which can equal the id of an unrelated v2 cgroup.
func CgroupID(dir string) (uint64, error) {
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		return 0, fmt.Errorf("cgroup id of %s: %w", dir, err)
	}
	if fs.Type != unix.CGROUP2_SUPER_MAGIC {
		return 0, fmt.Errorf("cgroup id of %s: not on a cgroup2 filesystem (a cgroup v1 hierarchy has no BPF cgroup id; match its processes with PodOfProcess)", dir)
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return 0, fmt.Errorf("cgroup id of %s: %w", dir, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return 0, fmt.Errorf("cgroup id of %s: not a directory", dir)
	}
	return st.Ino, nil
}
