// SPDX-License-Identifier: Apache-2.0

package applier

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/swiftlane/swiftlane/internal/strategy"
)

// ReadProcess reads a process's identity from procfs (root is usually /proc).
// It returns an error if the process is gone.
func ReadProcess(root string, pid int) (strategy.Process, error) {
	dir := filepath.Join(root, strconv.Itoa(pid))
	p := strategy.Process{PID: pid}
	cmd, err := os.ReadFile(filepath.Join(dir, "cmdline"))
	if err != nil {
		return p, err
	}
	p.Cmdline = strings.TrimSpace(string(bytes.ReplaceAll(bytes.TrimRight(cmd, "\x00"), []byte{0}, []byte{' '})))
	p.Exe, _ = os.Readlink(filepath.Join(dir, "exe"))
	if comm, err := os.ReadFile(filepath.Join(dir, "comm")); err == nil {
		p.Comm = strings.TrimSpace(string(comm))
	}
	if cg, err := os.ReadFile(filepath.Join(dir, "cgroup")); err == nil {
		p.Cgroup, p.CgroupV1 = parseCgroups(string(cg))
	}
	return p, nil
}

// parseCgroups picks the unified-hierarchy path ("0::/path") and the v1 cpu
// controller's path ("4:cpu,cpuacct:/path") of /proc/PID/cgroup.
func parseCgroups(s string) (v2, v1 string) {
	for _, line := range strings.Split(s, "\n") {
		if rest, ok := strings.CutPrefix(line, "0::"); ok {
			v2 = rest
			continue
		}
		_, rest, _ := strings.Cut(line, ":")
		ctrls, path, ok := strings.Cut(rest, ":")
		if ok && ctrls != "" && slices.Contains(strings.Split(ctrls, ","), "cpu") {
			v1 = path
		}
	}
	return v2, v1
}

// ListPIDs returns the thread-group ids in procfs.
func ListPIDs(root string) ([]int, error) {
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil, err
	}
	pids := make([]int, 0, len(ents))
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil && e.IsDir() {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}
