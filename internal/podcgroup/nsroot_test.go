// SPDX-License-Identifier: Apache-2.0

package podcgroup

import (
	"os"
	"path/filepath"
	"testing"
)

// fakeNode lays out a procfs and a cgroup hierarchy as a pod with its own
// cgroup namespace (containerd's default on cgroup v2) sees them with
// hostPID and the host's /sys/fs/cgroup mounted: the reader is PID 42, in
// /kubepods/burstable/pod<uidA>/<ctrA>, which is its namespace's root.
// (A fake: a test process cannot be put in a cgroup namespace of its
// choosing without root; TestCluster in test/vm runs the real thing.)
func fakeNode(t *testing.T, selfCgroup, initCgroup string) (procRoot, mount string) {
	t.Helper()
	dir := t.TempDir()
	procRoot, mount = filepath.Join(dir, "proc"), filepath.Join(dir, "cgroup")
	write := func(p, s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(procRoot, "42", "cgroup"), "0::"+selfCgroup+"\n")
	write(filepath.Join(procRoot, "1", "cgroup"), "0::"+initCgroup+"\n")
	if err := os.Symlink("42", filepath.Join(procRoot, "self")); err != nil {
		t.Fatal(err)
	}
	write(filepath.Join(mount, "cgroup.procs"), "1\n")
	write(filepath.Join(mount, "system.slice", "cgroup.procs"), "7\n")
	write(filepath.Join(mount, "kubepods", "besteffort", "pod"+uidB, ctrB, "cgroup.procs"), "100\n420\n")
	write(filepath.Join(mount, "kubepods", "burstable", "pod"+uidA, ctrA, "cgroup.procs"), "41\n42\n")
	return procRoot, mount
}

func TestNamespaceRoot(t *testing.T) {
	in := "/kubepods/burstable/pod" + uidA + "/" + ctrA
	for _, tc := range []struct {
		name, self, init, want string
	}{
		{"in a pod's own namespace", "/", "/../../../..", in},
		{"moved below its namespace root", "/sub", "/../../../..", "/"}, // not found: 42 is listed at the root, not in /sub
		{"host namespace", "/system.slice/swiftlane.service", "/init.scope", "/"},
		{"PID 1 is in our namespace (no hostPID)", "/", "/", "/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			procRoot, mount := fakeNode(t, tc.self, tc.init)
			if got := namespaceRoot(procRoot, mount); got != tc.want {
				t.Errorf("namespaceRoot = %q, want %q", got, tc.want)
			}
		})
	}
}

// A process of another pod, as the agent's namespace shows it, back to the
// node's path and to its pod, QoS class included.
func TestPodOfProcessFromAPod(t *testing.T) {
	procRoot, mount := fakeNode(t, "/", "/../../../..")
	root := namespaceRoot(procRoot, mount)
	for _, tc := range []struct{ seen, abs string }{
		{"/../../../besteffort/pod" + uidB + "/" + ctrB, "/kubepods/besteffort/pod" + uidB + "/" + ctrB},
		{"/../../pod" + uidB + "/" + ctrB, "/kubepods/burstable/pod" + uidB + "/" + ctrB}, // same QoS class as the agent's
		{"/", "/kubepods/burstable/pod" + uidA + "/" + ctrA},                              // the agent's own container
		{"/../../../../system.slice/sshd.service", "/system.slice/sshd.service"},
	} {
		if got := Absolute(root, tc.seen); got != tc.abs {
			t.Errorf("Absolute(%q) = %q, want %q", tc.seen, got, tc.abs)
		}
	}
	pp, ok := parseProcCgroup("0::/../../../besteffort/pod"+uidB+"/"+ctrB+"\n", root)
	if !ok || pp.UID != uidB || pp.QOS != BestEffort || pp.ContainerID != ctrB {
		t.Errorf("parseProcCgroup = %+v, %v; want pod %s, besteffort, container %s", pp, ok, uidB, ctrB)
	}
	if _, ok := parseProcCgroup("0::/../../../besteffort/pod"+uidB+"/"+ctrB+"\n", "/"); ok {
		t.Error("without the namespace root the relative path parsed as a pod: the test proves nothing")
	}
	if got := Absolute("/", "/x"); got != "/x" {
		t.Errorf("Absolute in the host namespace changed the path: %q", got)
	}
}
