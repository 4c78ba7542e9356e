// SPDX-License-Identifier: Apache-2.0

package podcgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// ErrNotFound is wrapped by the errors Resolver returns when a cgroup does
// not exist (yet): a pod not started on this node, a container restarted
// under a new ID, or a resolver configured with another cgroup root.
var ErrNotFound = errors.New("cgroup not found")

// searchDepth bounds the fallback search below the kubepods cgroup: the
// kubelet puts pods one (Guaranteed) or two (QoS level) levels down.
const searchDepth = 3

// Cgroup is a pod's or container's cgroup on this node.
type Cgroup struct {
	// Path is relative to the hierarchy root, as /proc/PID/cgroup shows it,
	// e.g. /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice.
	Path string
	// Dir is the cgroup's directory: in the cgroup2 hierarchy if it is there
	// (Unified, and Hybrid with a runc that joins it), else in the v1 one.
	Dir string
	// V1 says Dir is in a cgroup v1 hierarchy. BPF cannot match v1 cgroups
	// by id: match the pod's processes with PodOfProcess instead.
	V1 bool
	// Driver is the naming the cgroup was found under.
	Driver Driver
}

// Resolver finds pod and container cgroups on one node.
type Resolver struct {
	layout  Layout
	root    string   // kubelet --cgroup-root as given, for messages
	parts   []string // its name parts
	drivers []Driver // naming to try, preferred first
}

// NewResolver returns a Resolver for the layout and the kubelet's
// --cgroup-root (cgroupRoot, "/" if empty) and --cgroup-driver (driver;
// "" tries systemd naming, then cgroupfs). With the systemd driver a root
// may be given as the kubelet takes it (/kubelet) or as its slice
// (/kubelet.slice); both name /kubelet.slice/kubelet-kubepods.slice.
func NewResolver(layout Layout, cgroupRoot string, driver Driver) (*Resolver, error) {
	if cgroupRoot == "" {
		cgroupRoot = "/"
	}
	if clean := path.Clean(cgroupRoot); !path.IsAbs(cgroupRoot) || clean != cgroupRoot && clean+"/" != cgroupRoot {
		return nil, fmt.Errorf("cgroup root %q: want a clean absolute path as in the kubelet's --cgroup-root (e.g. / or /kubelet)", cgroupRoot)
	}
	r := &Resolver{layout: layout, root: cgroupRoot, parts: rootParts(cgroupRoot)}
	switch driver {
	case Systemd, Cgroupfs:
		r.drivers = []Driver{driver}
	case "":
		r.drivers = []Driver{Systemd, Cgroupfs}
	default:
		return nil, fmt.Errorf("cgroup driver %q: want %q or %q as in the kubelet's --cgroup-driver, or empty to try both", driver, Systemd, Cgroupfs)
	}
	switch layout.Version {
	case Unified:
		if layout.Unified == "" {
			return nil, errors.New("cgroup layout: Unified version without a cgroup2 mount point (Layout.Unified)")
		}
	case Hybrid, Legacy:
		if layout.v1() == "" {
			return nil, fmt.Errorf("cgroup layout: %v without a cpu or name=systemd hierarchy (Layout.CPU, Layout.Systemd)", layout.Version)
		}
		if layout.Version == Hybrid && layout.Unified == "" {
			return nil, errors.New("cgroup layout: Hybrid version without a cgroup2 mount point (Layout.Unified)")
		}
	default:
		return nil, fmt.Errorf("cgroup layout: unknown version %d (use DetectLayout)", layout.Version)
	}
	return r, nil
}

type hierarchy struct {
	mount string
	v1    bool
}

// hierarchies are where pod cgroups are looked for, the BPF-usable first.
func (r *Resolver) hierarchies() []hierarchy {
	switch r.layout.Version {
	case Unified:
		return []hierarchy{{r.layout.Unified, false}}
	case Hybrid:
		return []hierarchy{{r.layout.Unified, false}, {r.layout.v1(), true}}
	}
	return []hierarchy{{r.layout.v1(), true}}
}

// partsFor is the cgroup root's parts as a driver names them: a systemd
// root given as its slice (/kubelet.slice) loses the suffix, since the
// kubelet adds it back.
func (r *Resolver) partsFor(d Driver) []string {
	if d != Systemd {
		return r.parts
	}
	out := make([]string, len(r.parts))
	for i, p := range r.parts {
		out[i] = strings.TrimSuffix(p, ".slice")
	}
	return out
}

// Pod returns the cgroup of the pod with this UID. With a QoS class (the
// pod status's qosClass) it checks where the kubelet puts such a pod; with
// qos "" or when that is not there, it searches the kubepods cgroup a few
// levels down. Cgroup.Driver says which naming matched.
func (r *Resolver) Pod(uid string, qos QOSClass) (Cgroup, error) {
	if !validUID(uid) {
		return Cgroup{}, fmt.Errorf("pod UID %q: want the pod's metadata.uid (32 hex digits, dash-separated)", uid)
	}
	switch qos {
	case "", Guaranteed, Burstable, BestEffort:
	default:
		return Cgroup{}, fmt.Errorf("pod %s: QoS class %q: want %s, %s, %s or empty (search)", uid, qos, Guaranteed, Burstable, BestEffort)
	}
	var tried, searched []string
	for _, h := range r.hierarchies() {
		if qos != "" {
			for _, d := range r.drivers {
				p := cgroupPath(d, podParts(r.partsFor(d), qos, uid))
				dir := filepath.Join(h.mount, p)
				tried = append(tried, dir)
				if ok, err := isDir(dir); err != nil {
					return Cgroup{}, fmt.Errorf("pod %s: %w", uid, err)
				} else if ok {
					return Cgroup{Path: p, Dir: dir, V1: h.v1, Driver: d}, nil
				}
			}
		}
		for _, d := range r.drivers {
			top := cgroupPath(d, podParts(r.partsFor(d), "", ""))
			searched = append(searched, filepath.Join(h.mount, top))
			p, err := searchPod(h.mount, top, uid, d, searchDepth)
			if err != nil {
				return Cgroup{}, fmt.Errorf("pod %s: %w", uid, err)
			}
			if p != "" {
				return Cgroup{Path: p, Dir: filepath.Join(h.mount, p), V1: h.v1, Driver: d}, nil
			}
		}
	}
	what := "pod " + uid
	if qos != "" {
		what += " (QoS " + string(qos) + ")"
	}
	var where []string
	if len(tried) > 0 {
		where = append(where, "tried "+strings.Join(tried, ", "))
	}
	where = append(where, fmt.Sprintf("searched %d levels below %s", searchDepth, strings.Join(searched, ", ")))
	return Cgroup{}, fmt.Errorf("%s: %w: %s; is the pod running on this node, and are the cgroup root (%s) and driver the kubelet's --cgroup-root and --cgroup-driver?",
		what, ErrNotFound, strings.Join(where, "; "), r.root)
}

// searchPod walks down from top (hierarchy-relative) for uid's pod cgroup
// under driver d's naming. It does not enter pod cgroups.
func searchPod(mount, top, uid string, d Driver, depth int) (string, error) {
	ents, err := os.ReadDir(filepath.Join(mount, top))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil // gone, or never there
	}
	if err != nil {
		return "", err
	}
	parents := strings.Split(strings.Trim(top, "/"), "/")
	var sub []string
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		got, _, gd, isPod := podSegment(e.Name(), parents)
		switch {
		case isPod && got == uid && gd == d:
			return path.Join(top, e.Name()), nil
		case !isPod:
			sub = append(sub, e.Name())
		}
	}
	if depth <= 1 {
		return "", nil
	}
	for _, s := range sub {
		p, err := searchPod(mount, path.Join(top, s), uid, d, depth-1)
		if p != "" || err != nil {
			return p, err
		}
	}
	return "", nil
}

// Container returns the cgroup of a container of pod, from the container ID
// in the pod status ("containerd://<id>", "cri-o://<id>", "docker://<id>").
// It is the container's own cgroup: CRI-O's conmon and the pod sandbox
// (pause) sit beside it in the pod's cgroup and are not included.
func (r *Resolver) Container(pod Cgroup, containerID string) (Cgroup, error) {
	rt, id, err := parseStatusContainerID(containerID)
	if err != nil {
		return Cgroup{}, err
	}
	if pod.Dir == "" {
		return Cgroup{}, fmt.Errorf("container %s: empty pod cgroup: pass the Cgroup that Resolver.Pod returned", containerID)
	}
	var tried []string
	for _, n := range containerNames(rt, id, pod.Driver) {
		dir := filepath.Join(pod.Dir, n.name)
		tried = append(tried, dir)
		if ok, err := isDir(dir); err != nil {
			return Cgroup{}, fmt.Errorf("container %s: %w", containerID, err)
		} else if ok {
			return Cgroup{Path: path.Join(pod.Path, n.name), Dir: dir, V1: pod.V1, Driver: n.driver}, nil
		}
	}
	return Cgroup{}, fmt.Errorf("container %s: %w: tried %s; has it started, or restarted under a new ID?",
		containerID, ErrNotFound, strings.Join(tried, ", "))
}

func isDir(p string) (bool, error) {
	fi, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return fi.IsDir(), nil
}
