// SPDX-License-Identifier: Apache-2.0

package podcgroup

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ProcessPod is the pod (and container) a process runs in.
type ProcessPod struct {
	UID    string   // pod metadata.uid
	QOS    QOSClass // from the QoS level the pod cgroup sits in
	Driver Driver   // naming of the pod cgroup
	// ContainerID is the bare container id ("" when the process sits in the
	// pod cgroup itself). It can also be the pod sandbox's id, or with
	// Conmon set the container CRI-O's conmon monitors.
	ContainerID string
	// Runtime is the runtime the cgroup name points to; "" for cgroupfs
	// containerd and docker, whose container cgroups are both just the id.
	Runtime Runtime
	// Conmon marks CRI-O's per-container monitor process, which runs in the
	// pod cgroup but is not part of the container.
	Conmon bool
	// Path is the cgroup path the pod was read from.
	Path string
}

// PodOfProcess reads procRoot/<pid>/cgroup (procRoot is /proc on a node)
// and returns the pod the process runs in, for every layout and driver
// Resolver knows. ok is false for processes outside pods; the error is
// for an unreadable file (it wraps fs.ErrNotExist when the process is gone).
// From inside a container the paths are made absolute first
// (NamespaceRoot, with the node's hierarchy at DefaultRoot).
func PodOfProcess(procRoot string, pid int) (p ProcessPod, ok bool, err error) {
	data, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "cgroup"))
	if err != nil {
		return ProcessPod{}, false, fmt.Errorf("pod of process %d: %w", pid, err)
	}
	p, ok = parseProcCgroup(string(data), NamespaceRoot(procRoot, DefaultRoot))
	return p, ok, nil
}

// parseProcCgroup reads /proc/PID/cgroup contents ("hier-id:controllers:path"
// lines). The cgroup2 line (0::) comes first: in hybrid mode runc may or
// may not have put the container there. Then the cpu hierarchy, then
// name=systemd, then any other v1 line.
func parseProcCgroup(data, nsRoot string) (ProcessPod, bool) {
	var v2, cpu, sd string
	var rest []string
	for _, line := range strings.Split(data, "\n") {
		_, tail, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		ctrls, p, ok := strings.Cut(tail, ":")
		if !ok {
			continue
		}
		switch {
		case ctrls == "":
			v2 = p
		case hasController(ctrls, "cpu"):
			cpu = p
		case hasController(ctrls, "name=systemd"):
			sd = p
		default:
			rest = append(rest, p)
		}
	}
	for _, p := range append([]string{v2, cpu, sd}, rest...) {
		if pp, ok := parseCgroupPath(Absolute(nsRoot, p)); ok {
			return pp, true
		}
	}
	return ProcessPod{}, false
}

func hasController(list, c string) bool {
	for _, x := range strings.Split(list, ",") {
		if x == c {
			return true
		}
	}
	return false
}

// parseCgroupPath finds the pod cgroup in a cgroup path and the container
// cgroup right below it. The path may be relative to another cgroup
// namespace (leading "/.." parts) or carry the kernel's " (deleted)" mark.
func parseCgroupPath(p string) (ProcessPod, bool) {
	p = strings.TrimSuffix(p, " (deleted)")
	if p == "" {
		return ProcessPod{}, false
	}
	segs := strings.Split(strings.Trim(p, "/"), "/")
	for i, s := range segs {
		uid, qos, d, ok := podSegment(s, segs[:i])
		if !ok {
			continue
		}
		pp := ProcessPod{UID: uid, QOS: qos, Driver: d, Path: p}
		if i+1 < len(segs) {
			if rt, id, conmon, ok := containerSegment(segs[i+1]); ok {
				pp.Runtime, pp.ContainerID, pp.Conmon = rt, id, conmon
			}
		}
		return pp, true
	}
	return ProcessPod{}, false
}
