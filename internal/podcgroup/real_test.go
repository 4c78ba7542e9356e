// SPDX-License-Identifier: Apache-2.0

package podcgroup

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestRealMachine checks the package against this machine's own mounts and
// this process's own cgroups, whatever the layout (the dev host is hybrid,
// the lab VM unified).
func TestRealMachine(t *testing.T) {
	l, err := DetectLayout(DefaultMountinfo, DefaultRoot)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("layout: %v, unified %q, cpu %q, name=systemd %q", l.Version, l.Unified, l.CPU, l.Systemd)
	if _, err := NewResolver(l, "/", ""); err != nil {
		t.Fatalf("NewResolver on the detected layout: %v", err)
	}

	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			t.Fatalf("/proc/self/cgroup line %q", line)
		}
		ctrls, p := parts[1], parts[2]
		switch {
		case ctrls == "" && l.Unified != "":
			dir := filepath.Join(l.Unified, p)
			id, err := CgroupID(dir)
			if err != nil {
				t.Fatalf("own cgroup2 directory: %v", err)
			}
			// The kernel's own answer: a cgroup2 file handle carries the
			// 64-bit cgroup id, the value BPF's cgroup id helpers return.
			h, _, err := unix.NameToHandleAt(unix.AT_FDCWD, dir, 0)
			if err != nil {
				t.Fatalf("name_to_handle_at(%s): %v", dir, err)
			}
			if b := h.Bytes(); len(b) != 8 || binary.NativeEndian.Uint64(b) != id {
				t.Fatalf("CgroupID(%s) = %d, file handle says % x", dir, id, b)
			}
			t.Logf("own cgroup2 %s: id %d", dir, id)
			checked++
		case hasController(ctrls, "cpu") && l.CPU != "":
			dir := filepath.Join(l.CPU, p)
			if ok, err := isDir(dir); !ok || err != nil {
				t.Fatalf("own v1 cpu cgroup %s: is dir %v, %v", dir, ok, err)
			}
			if _, err := CgroupID(dir); err == nil || !strings.Contains(err.Error(), "not on a cgroup2 filesystem") {
				t.Fatalf("CgroupID on v1 %s: err = %v, want refusal", dir, err)
			}
			checked++
		}
	}
	if checked == 0 {
		t.Fatalf("no line of /proc/self/cgroup matched layout %+v:\n%s", l, data)
	}

	p, inPod, err := PodOfProcess("/proc", os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if inPod && !validUID(p.UID) {
		t.Fatalf("PodOfProcess(self) = %+v", p)
	}
	t.Logf("PodOfProcess(self): in pod %v %+v", inPod, p)

	if _, err := CgroupID(t.TempDir()); err == nil || !strings.Contains(err.Error(), "not on a cgroup2 filesystem") {
		t.Fatalf("CgroupID(temp dir): err = %v, want refusal", err)
	}
	if _, err := CgroupID(filepath.Join(l.Unified+l.CPU, "no-such-cgroup")); err == nil {
		t.Fatal("CgroupID of a missing directory: no error")
	}
}

// TestRealCgroupTree builds a kubelet-style pod and container cgroup in the
// real cgroup hierarchies (below this process's own cgroup), resolves it,
// moves a process into the container cgroup and reads the pod back from
// /proc: the paths the kernel prints are the ones the parser expects.
func TestRealCgroupTree(t *testing.T) {
	l, err := DetectLayout(DefaultMountinfo, DefaultRoot)
	if err != nil {
		t.Fatal(err)
	}
	own := map[string]string{}
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if parts := strings.SplitN(line, ":", 3); len(parts) == 3 {
			switch {
			case parts[1] == "":
				own["v2"] = parts[2]
			case hasController(parts[1], "cpu"):
				own["cpu"] = parts[2]
			}
		}
	}
	type hier struct {
		name, mount, own string
		v1               bool
	}
	var hs []hier
	if l.Unified != "" {
		hs = append(hs, hier{"cgroup2", l.Unified, own["v2"], false})
	}
	if l.CPU != "" {
		hs = append(hs, hier{"v1 cpu", l.CPU, own["cpu"], true})
	}
	for _, h := range hs {
		t.Run(h.name, func(t *testing.T) {
			base := filepath.Join(h.mount, h.own, fmt.Sprintf("podcgroup-test-%d", os.Getpid()))
			if err := os.Mkdir(base, 0o755); errors.Is(err, fs.ErrPermission) || errors.Is(err, unix.EROFS) {
				t.Skipf("cannot create a cgroup here: %v", err)
			} else if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { removeCgroupTree(t, base) })

			podPath := "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + strings.ReplaceAll(uidA, "-", "_") + ".slice"
			ctr := "cri-containerd-" + ctrA + ".scope"
			mkdirs(t, filepath.Join(base, podPath, ctr))

			layout := Layout{Version: Unified, Unified: base}
			if h.v1 {
				layout = Layout{Version: Legacy, CPU: base}
			}
			r, err := NewResolver(layout, "/", "")
			if err != nil {
				t.Fatal(err)
			}
			pod, err := r.Pod(uidA, "")
			if err != nil {
				t.Fatal(err)
			}
			c, err := r.Container(pod, "containerd://"+ctrA)
			if err != nil {
				t.Fatal(err)
			}
			if c.V1 != h.v1 || c.Driver != Systemd || c.Dir != filepath.Join(base, podPath, ctr) {
				t.Fatalf("Container = %+v", c)
			}
			id, err := CgroupID(c.Dir)
			if h.v1 {
				if err == nil {
					t.Fatalf("CgroupID on v1 %s = %d, want refusal", c.Dir, id)
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				hd, _, err := unix.NameToHandleAt(unix.AT_FDCWD, c.Dir, 0)
				if err != nil {
					t.Fatal(err)
				}
				podID, err := CgroupID(pod.Dir)
				if err != nil {
					t.Fatal(err)
				}
				if binary.NativeEndian.Uint64(hd.Bytes()) != id || podID == id {
					t.Fatalf("container cgroup id %d, pod %d, file handle % x", id, podID, hd.Bytes())
				}
			}

			// A process in the container cgroup; it exits when stdin closes.
			cmd := exec.Command("cat")
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() {
				stdin.Close()
				if err := cmd.Wait(); err != nil {
					t.Errorf("cat: %v", err)
				}
			}()
			pid := cmd.Process.Pid
			if err := os.WriteFile(filepath.Join(c.Dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
				t.Fatal(err)
			}
			p, ok, err := PodOfProcess("/proc", pid)
			if err != nil || !ok {
				t.Fatalf("PodOfProcess(%d) = %+v, %v, %v", pid, p, ok, err)
			}
			if p.UID != uidA || p.QOS != Burstable || p.Driver != Systemd || p.ContainerID != ctrA || p.Runtime != Containerd ||
				!strings.HasSuffix(p.Path, podPath+"/"+ctr) {
				t.Fatalf("PodOfProcess(%d) = %+v", pid, p)
			}
		})
	}
}

// removeCgroupTree removes cgroup directories deepest first (their files
// are kernel interface files that go with the directory).
func removeCgroupTree(t *testing.T, top string) {
	var dirs []string
	err := filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return err
	})
	if err != nil {
		t.Errorf("walk %s: %v", top, err)
	}
	sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
	for _, d := range dirs {
		if err := unix.Rmdir(d); err != nil {
			t.Errorf("rmdir %s: %v", d, err)
		}
	}
}
