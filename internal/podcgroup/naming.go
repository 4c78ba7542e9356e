// SPDX-License-Identifier: Apache-2.0

package podcgroup

import (
	"fmt"
	"path"
	"strings"
)

// The naming below follows what the kubelet's container manager
// (pkg/kubelet/cm: cgroup_manager_linux.go, pod_container_manager_linux.go),
// containerd's CRI plugin, CRI-O's cgmgr package and runc's systemd driver do:
//
//   - A pod's abstract cgroup name is [<cgroup-root parts>…, "kubepods",
//     <qos>, "pod"+UID], where <qos> is "burstable" or "besteffort" and is
//     left out for Guaranteed pods.
//   - cgroupfs driver: the parts joined with "/".
//   - systemd driver: every part has "-" replaced by "_" (systemd reads "-"
//     as a slice level), the parts are joined with "-" plus ".slice", and
//     the slice is expanded into its parent slices:
//     a-b-c.slice → /a.slice/a-b.slice/a-b-c.slice.
//   - Container cgroups sit directly below the pod's: runc's systemd driver
//     turns the runtime's "slice:prefix:id" into the scope "prefix-id.scope"
//     (prefix cri-containerd for containerd, crio for CRI-O, docker for
//     docker); with cgroupfs containerd and docker use "<id>" and CRI-O
//     "crio-<id>". CRI-O also puts conmon, its per-container monitor, in
//     crio-conmon-<id>[.scope] next to the container, and the pod sandbox
//     in crio-<sandbox id>.

const kubepods = "kubepods"

// Driver is the kubelet's cgroup driver (its --cgroup-driver).
type Driver string

// Kubelet cgroup drivers.
const (
	Systemd  Driver = "systemd"
	Cgroupfs Driver = "cgroupfs"
)

// QOSClass is a pod's status.qosClass.
type QOSClass string

// Pod QoS classes, spelled as in the pod status.
const (
	Guaranteed QOSClass = "Guaranteed"
	Burstable  QOSClass = "Burstable"
	BestEffort QOSClass = "BestEffort"
)

// qosPart is the QoS level's part of the cgroup name ("" for Guaranteed,
// whose pods sit directly in kubepods).
func qosPart(q QOSClass) string {
	switch q {
	case Burstable:
		return "burstable"
	case BestEffort:
		return "besteffort"
	}
	return ""
}

// Runtime is a container runtime, named as in the scheme of a pod status
// containerID ("containerd://…").
type Runtime string

// Container runtimes.
const (
	Containerd Runtime = "containerd"
	CRIO       Runtime = "cri-o"
	Docker     Runtime = "docker" // docker through cri-dockerd
)

// rootParts splits a kubelet --cgroup-root into name parts.
func rootParts(root string) []string {
	var parts []string
	for _, p := range strings.Split(root, "/") {
		if p != "" {
			parts = append(parts, p)
		}
	}
	return parts
}

// cgroupPath renders an abstract cgroup name as the path the driver
// creates, relative to the hierarchy root.
func cgroupPath(d Driver, parts []string) string {
	if d == Cgroupfs {
		return "/" + path.Join(parts...)
	}
	var b strings.Builder
	prefix := ""
	for _, p := range parts {
		p = strings.ReplaceAll(p, "-", "_")
		b.WriteString("/" + prefix + p + ".slice")
		prefix += p + "-"
	}
	if b.Len() == 0 {
		return "/"
	}
	return b.String()
}

// podParts is the abstract cgroup name of a pod (uid "" gives the QoS level).
func podParts(root []string, qos QOSClass, uid string) []string {
	parts := append(append([]string{}, root...), kubepods)
	if q := qosPart(qos); q != "" {
		parts = append(parts, q)
	}
	if uid != "" {
		parts = append(parts, "pod"+uid)
	}
	return parts
}

// validUID reports whether s looks like a pod UID: 32 hex digits, optionally
// dash-separated (a UUID from the API server, or the md5 hex the kubelet
// gives static pods). It also keeps path separators out of cgroup names.
func validUID(s string) bool {
	digits := 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case isHex(c):
			digits++
		case c == '-' && i > 0 && i < len(s)-1 && s[i-1] != '-':
		default:
			return false
		}
	}
	return digits == 32
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// validContainerID reports whether s is a 64-hex-digit container id, as
// containerd, CRI-O and docker all use.
func validContainerID(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isHex(s[i]) {
			return false
		}
	}
	return true
}

// parseStatusContainerID splits a pod status containerID
// ("containerd://<id>", "cri-o://<id>", "docker://<id>").
func parseStatusContainerID(s string) (Runtime, string, error) {
	scheme, id, ok := strings.Cut(s, "://")
	rt := Runtime(scheme)
	if !ok || (rt != Containerd && rt != CRIO && rt != Docker) || !validContainerID(id) {
		return "", "", fmt.Errorf("container ID %q: want <runtime>://<64 hex digits> as in the pod status, with runtime containerd, cri-o or docker", s)
	}
	return rt, id, nil
}

// containerNames are the cgroup names a runtime gives a container under each
// driver, the given driver's first.
func containerNames(rt Runtime, id string, d Driver) []struct {
	name   string
	driver Driver
} {
	var sd, fs string
	switch rt {
	case Containerd:
		sd, fs = "cri-containerd-"+id+".scope", id
	case CRIO:
		sd, fs = "crio-"+id+".scope", "crio-"+id
	case Docker:
		sd, fs = "docker-"+id+".scope", id
	}
	type named = struct {
		name   string
		driver Driver
	}
	if d == Cgroupfs {
		return []named{{fs, Cgroupfs}, {sd, Systemd}}
	}
	return []named{{sd, Systemd}, {fs, Cgroupfs}}
}

// podSegment parses one cgroup path segment as a kubelet pod cgroup:
// "…kubepods[-<qos>]-pod<uid with _>.slice" (systemd) or "pod<uid>"
// (cgroupfs; parent says whether it sits in a kubepods QoS level).
func podSegment(seg string, parents []string) (uid string, qos QOSClass, d Driver, ok bool) {
	if base, isSlice := strings.CutSuffix(seg, ".slice"); isSlice {
		parts := strings.Split(base, "-")
		last := parts[len(parts)-1]
		rest, isPod := strings.CutPrefix(last, "pod")
		if !isPod || len(parts) < 2 {
			return "", "", "", false
		}
		uid = strings.ReplaceAll(rest, "_", "-")
		switch {
		case parts[len(parts)-2] == kubepods:
			qos = Guaranteed
		case len(parts) >= 3 && parts[len(parts)-3] == kubepods:
			qos = qosOfPart(parts[len(parts)-2])
		}
		if qos == "" || !validUID(uid) {
			return "", "", "", false
		}
		return uid, qos, Systemd, true
	}
	uid, isPod := strings.CutPrefix(seg, "pod")
	if !isPod || !validUID(uid) || len(parents) == 0 {
		return "", "", "", false
	}
	parent := parents[len(parents)-1]
	switch {
	case parent == kubepods:
		qos = Guaranteed
	case len(parents) >= 2 && parents[len(parents)-2] == kubepods:
		qos = qosOfPart(parent)
	}
	if qos == "" {
		return "", "", "", false
	}
	return uid, qos, Cgroupfs, true
}

func qosOfPart(p string) QOSClass {
	switch p {
	case "burstable":
		return Burstable
	case "besteffort":
		return BestEffort
	}
	return ""
}

// containerSegment parses the cgroup name of a container below its pod.
func containerSegment(seg string) (rt Runtime, id string, conmon, ok bool) {
	name, scope := strings.CutSuffix(seg, ".scope")
	switch {
	case strings.HasPrefix(name, "cri-containerd-"):
		rt, id = Containerd, name[len("cri-containerd-"):]
	case strings.HasPrefix(name, "crio-conmon-"):
		rt, id, conmon = CRIO, name[len("crio-conmon-"):], true
	case strings.HasPrefix(name, "crio-"):
		rt, id = CRIO, name[len("crio-"):]
	case strings.HasPrefix(name, "docker-"):
		rt, id = Docker, name[len("docker-"):]
	case !scope:
		id = name // cgroupfs containerd or docker: the names do not say which
	}
	if !validContainerID(id) {
		return "", "", false, false
	}
	return rt, id, conmon, true
}
