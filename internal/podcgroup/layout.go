// SPDX-License-Identifier: Apache-2.0

// Package podcgroup maps Kubernetes pods and containers to their cgroups on
// this node, and processes back to the pod they run in.
//
// The kubelet names a pod's cgroup after the pod UID, its QoS class, its
// --cgroup-root and its cgroup driver (systemd or cgroupfs); the container
// runtime names each container's cgroup below it. Resolver reproduces that
// naming (and searches the kubepods subtree when the QoS class is unknown);
// CgroupID turns a cgroup v2 directory into the id the scheduler's BPF side
// matches against a task's cgroup ancestors. On cgroup v1 there is no such
// id: the caller falls back to per-process matching with PodOfProcess.
//
// The caller must see the node's cgroup hierarchy and procfs: on Kubernetes
// that means hostPID and the host's cgroup filesystem. Its own cgroup
// namespace may be a container's: NamespaceRoot and Absolute turn the
// paths procfs then gives into the node's.
package podcgroup

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Defaults for DetectLayout on a real node.
const (
	DefaultMountinfo = "/proc/self/mountinfo"
	DefaultRoot      = "/sys/fs/cgroup"
)

// Version is how the cgroup hierarchies are mounted.
type Version int

const (
	// Unified is cgroup v2 only: one cgroup2 hierarchy at the root.
	Unified Version = iota + 1
	// Legacy is cgroup v1 only: one hierarchy per controller group.
	Legacy
	// Hybrid is systemd's hybrid mode: v1 controller hierarchies plus a
	// cgroup2 hierarchy without controllers (usually at <root>/unified). The
	// cgroup2 one is the kernel's default hierarchy, the one BPF sees.
	Hybrid
)

// String names the layout as in messages and logs.
func (v Version) String() string {
	switch v {
	case Unified:
		return "unified (cgroup v2)"
	case Legacy:
		return "legacy (cgroup v1)"
	case Hybrid:
		return "hybrid (cgroup v1 controllers + cgroup v2)"
	}
	return fmt.Sprintf("Version(%d)", int(v))
}

// Layout says where the cgroup hierarchies are mounted. Paths are absolute
// mount points; tests build one by hand over a temporary directory.
type Layout struct {
	Version Version
	// Unified is the cgroup2 mount point (Unified and Hybrid), "" on Legacy.
	Unified string
	// CPU is the mount point of the v1 hierarchy holding the cpu controller
	// (often co-mounted as cpu,cpuacct), "" if there is none.
	CPU string
	// Systemd is the mount point of the v1 name=systemd hierarchy, "" if none.
	Systemd string
}

// v1 is the v1 hierarchy pod directories are looked up in: the cpu one, else
// name=systemd (which both kubelet drivers also populate).
func (l Layout) v1() string {
	if l.CPU != "" {
		return l.CPU
	}
	return l.Systemd
}

// DetectLayout reads a mountinfo file (DefaultMountinfo on a node) and
// returns how cgroups are mounted at root (DefaultRoot on a node). Only
// mounts at root or directly below it count, so cgroup mounts elsewhere
// (a container's view, a second mount for tooling) do not confuse it.
func DetectLayout(mountinfo, root string) (Layout, error) {
	data, err := os.ReadFile(mountinfo)
	if err != nil {
		return Layout{}, fmt.Errorf("cgroup layout: %w", err)
	}
	l, err := parseLayout(data, root)
	if err != nil {
		return Layout{}, fmt.Errorf("cgroup layout from %s: %w", mountinfo, err)
	}
	return l, nil
}

type cgroupMount struct {
	v2      bool
	options []string // super options: controllers and name=… for v1
}

func parseLayout(data []byte, root string) (Layout, error) {
	root = filepath.Clean(root)
	if !filepath.IsAbs(root) {
		return Layout{}, fmt.Errorf("cgroup root %q must be an absolute path such as %s", root, DefaultRoot)
	}
	// Keyed by mount point; a later line for the same point is a mount
	// stacked on top and hides the earlier one.
	mounts := map[string]cgroupMount{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			continue
		}
		// id parent maj:min root mountpoint options [optional…] - fstype source superoptions
		pre, post, ok := strings.Cut(line, " - ")
		fields, tail := strings.Fields(pre), strings.Fields(post)
		if !ok || len(fields) < 6 || len(tail) < 2 {
			return Layout{}, fmt.Errorf("line %d: not a mountinfo line: %q", n, line)
		}
		point := unescapeMountinfo(fields[4])
		switch tail[0] {
		case "cgroup2":
			mounts[point] = cgroupMount{v2: true}
		case "cgroup":
			var opts []string
			if len(tail) >= 3 {
				opts = strings.Split(tail[2], ",")
			}
			mounts[point] = cgroupMount{options: opts}
		default:
			delete(mounts, point) // something else stacked over a cgroup mount
		}
	}
	if err := sc.Err(); err != nil {
		return Layout{}, err
	}

	var l Layout
	var v2Below []string
	haveV1 := false
	for point, m := range mounts {
		if point != root && filepath.Dir(point) != root {
			continue
		}
		if m.v2 {
			if point == root {
				l.Unified = point
			} else {
				v2Below = append(v2Below, point)
			}
			continue
		}
		if point == root {
			continue // a v1 hierarchy on the root itself is not a layout we know
		}
		haveV1 = true
		for _, o := range m.options {
			switch o {
			case "cpu":
				l.CPU = point
			case "name=systemd":
				l.Systemd = point
			}
		}
	}
	switch {
	case l.Unified != "":
		l.Version, l.CPU, l.Systemd = Unified, "", ""
	case haveV1:
		l.Version = Legacy
		if len(v2Below) > 0 {
			l.Version, l.Unified = Hybrid, pickUnified(v2Below, root)
		}
		if l.CPU == "" && l.Systemd == "" {
			return Layout{}, fmt.Errorf("cgroup v1 is mounted under %s but neither the cpu controller nor name=systemd is", root)
		}
	default:
		return Layout{}, fmt.Errorf("no cgroup or cgroup2 filesystem mounted at or directly below %s", root)
	}
	return l, nil
}

// pickUnified prefers systemd's <root>/unified when several cgroup2 mounts
// sit below root.
func pickUnified(points []string, root string) string {
	for _, p := range points {
		if p == filepath.Join(root, "unified") {
			return p
		}
	}
	best := points[0]
	for _, p := range points[1:] {
		if p < best {
			best = p
		}
	}
	return best
}

// unescapeMountinfo undoes the kernel's octal escaping of space, tab,
// newline and backslash in mountinfo paths.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }
