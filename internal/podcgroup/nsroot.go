// SPDX-License-Identifier: Apache-2.0

package podcgroup

import (
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// NamespaceRoot is where the cgroup namespace of the process reading
// procRoot sits in the node's cgroup hierarchy, which is mounted at mount:
// "/" on the host. The kernel writes /proc/PID/cgroup paths relative to the
// reader's cgroup namespace, and a container runtime gives each container
// its own on cgroup v2 (containerd's default): from the agent's pod, a
// process in /kubepods/besteffort/pod<uid>/<id> shows as
// /../../../besteffort/pod<uid>/<id>, which names neither the kubepods
// root nor, for a pod of the agent's own QoS class, the class. Kubernetes
// has no way to share the host's cgroup namespace with a pod, so the agent
// finds its namespace's root in the host's hierarchy (the chart mounts it):
// the cgroup whose cgroup.procs lists the agent itself, less the agent's
// own namespace-relative path. Computed once per (procRoot, mount); "/"
// when the reader is in the host's namespace, or when it cannot be told.
func NamespaceRoot(procRoot, mount string) string {
	key := procRoot + "\x00" + mount
	nsRoots.Lock()
	defer nsRoots.Unlock()
	if r, ok := nsRoots.m[key]; ok {
		return r
	}
	r := namespaceRoot(procRoot, mount)
	nsRoots.m[key] = r
	return r
}

var nsRoots = struct {
	sync.Mutex
	m map[string]string
}{m: map[string]string{}}

func namespaceRoot(procRoot, mount string) string {
	own, err := v2Path(filepath.Join(procRoot, "self", "cgroup"))
	if err != nil || strings.HasPrefix(own, "/..") {
		return "/"
	}
	// PID 1 of the node sits at or near the root: from a namespace below
	// it, its path climbs out with "..". Without that, this is the host's
	// namespace (or PID 1 is in ours, without hostPID: nothing to resolve).
	initPath, err := v2Path(filepath.Join(procRoot, "1", "cgroup"))
	if err != nil || !strings.HasPrefix(initPath, "/..") {
		return "/"
	}
	self, err := os.Readlink(filepath.Join(procRoot, "self"))
	if err != nil {
		return "/"
	}
	var found string
	filepath.WalkDir(mount, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil // an unreadable cgroup (gone meanwhile), or one of its files
		}
		b, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		if err == nil && slices.Contains(strings.Fields(string(b)), self) {
			found = "/" + strings.TrimPrefix(filepath.ToSlash(strings.TrimPrefix(p, mount)), "/")
			return fs.SkipAll
		}
		return nil
	})
	if found == "" || (own != "/" && !strings.HasSuffix(found, own)) {
		return "/"
	}
	return path.Clean("/" + strings.TrimSuffix(found, strings.TrimSuffix(own, "/")))
}

// v2Path is the cgroup v2 ("0::") path in a /proc/PID/cgroup file.
func v2Path(file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			return p, nil
		}
	}
	return "", fs.ErrNotExist
}

// Absolute turns p, a path as /proc/PID/cgroup gives it to a reader whose
// cgroup namespace is rooted at nsRoot (NamespaceRoot), into the node's
// path.
func Absolute(nsRoot, p string) string {
	if nsRoot == "/" || nsRoot == "" || p == "" {
		return p
	}
	deleted := strings.HasSuffix(p, " (deleted)")
	abs := path.Join(nsRoot, strings.TrimSuffix(p, " (deleted)"))
	if deleted {
		abs += " (deleted)"
	}
	return abs
}
