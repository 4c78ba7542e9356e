// SPDX-License-Identifier: Apache-2.0

package applier

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/swiftlane/swiftlane/internal/strategy"
)

// ReadProcess reads a process's identity from procfs (root is usually /proc).
// It returns an error if the process is gone.
func ReadProcess(root string, pid int) (strategy.Process, error) {
	dir := filepath.Join(root, strconv.Itoa(pid))
	p, err := readOwn(dir, pid)
	if err != nil {
		return p, err
	}
	p.Exe, _ = os.Readlink(filepath.Join(dir, "exe"))
	if comm, err := readProcFile(filepath.Join(dir, "comm")); err == nil {
		p.Comm = strings.TrimSpace(string(comm))
	}
	return p, nil
}

// readForked reads a child that its parent p forked: until it execs (an
// event of its own) it runs the same executable, so that is not read
// again; its command line is (a process can rewrite its argv, as nginx's
// and PostgreSQL's workers do after the fork), and its cgroup (clone3's
// CLONE_INTO_CGROUP, as container runtimes start a container's first
// process). A kernel thread's child is read whole: kernel threads are
// matched by name, which each new one gets after the fork.
func readForked(root string, pid int, parent strategy.Process) (strategy.Process, error) {
	if parent.Cmdline == "" {
		return ReadProcess(root, pid)
	}
	p, err := readOwn(filepath.Join(root, strconv.Itoa(pid)), pid)
	p.Exe, p.Comm = parent.Exe, parent.Comm
	return p, err
}

// readOwn reads what a fork does not inherit for certain: the command line
// (an error here means the process is gone) and the cgroup.
func readOwn(dir string, pid int) (strategy.Process, error) {
	p := strategy.Process{PID: pid}
	cmd, err := readProcFile(filepath.Join(dir, "cmdline"))
	if err != nil {
		return p, err
	}
	p.Cmdline = parseCmdline(cmd)
	if cg, err := readProcFile(filepath.Join(dir, "cgroup")); err == nil {
		p.Cgroup, p.CgroupV1 = parseCgroups(string(cg))
	}
	return p, nil
}

func parseCmdline(b []byte) string {
	return strings.TrimSpace(string(bytes.ReplaceAll(bytes.TrimRight(b, "\x00"), []byte{0}, []byte{' '})))
}

// readProcFile reads a small procfs file in three system calls (open, read,
// close) where os.ReadFile takes six (two fstat, a read that finds the
// end). Matching reads a process on every exec and fork: under a fork storm
// those reads were the largest share of the scheduler process's own CPU
// time in a Go CPU profile (41 %, docs/userspace.md). A read that does not
// fill the buffer has the whole file: procfs hands a file's text out in one
// piece as far as the buffer reaches. The first buffer is os.ReadFile's
// smallest: most command lines and cgroup paths fit.
func readProcFile(name string) ([]byte, error) {
	fd, err := syscall.Open(name, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: name, Err: err}
	}
	defer syscall.Close(fd)
	buf := make([]byte, 512)
	n := 0
	for {
		m, err := syscall.Read(fd, buf[n:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "read", Path: name, Err: err}
		}
		n += m
		if m == 0 || n < len(buf) {
			return buf[:n], nil
		}
		buf = slices.Grow(buf, len(buf))[:2*len(buf)]
	}
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
