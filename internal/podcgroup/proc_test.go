// SPDX-License-Identifier: Apache-2.0

package podcgroup

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// v1Lines renders the v1 lines of /proc/PID/cgroup as a kernel with the
// usual controllers prints them, every hierarchy showing path p.
func v1Lines(p string) string {
	var b strings.Builder
	for _, h := range []string{
		"12:hugetlb", "11:pids", "10:memory", "9:cpu,cpuacct", "8:perf_event", "7:devices",
		"6:freezer", "5:net_cls,net_prio", "4:blkio", "3:rdma", "2:cpuset", "1:name=systemd",
	} {
		b.WriteString(h + ":" + p + "\n")
	}
	return b.String()
}

func TestParseProcCgroup(t *testing.T) {
	u_ := strings.ReplaceAll(uidA, "-", "_")
	bu := "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + u_ + ".slice"
	tests := []struct {
		name string
		data string
		want ProcessPod // want.Path "" means: not in a pod
	}{
		{"v2 systemd containerd", "0::" + bu + "/cri-containerd-" + ctrA + ".scope\n",
			ProcessPod{UID: uidA, QOS: Burstable, Driver: Systemd, ContainerID: ctrA, Runtime: Containerd, Path: bu + "/cri-containerd-" + ctrA + ".scope"}},
		{"v2 cgroupfs containerd guaranteed", "0::/kubepods/pod" + uidA + "/" + ctrA + "\n",
			ProcessPod{UID: uidA, QOS: Guaranteed, Driver: Cgroupfs, ContainerID: ctrA, Path: "/kubepods/pod" + uidA + "/" + ctrA}},
		{"v2 systemd cri-o under crun's container subgroup", "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + u_ + ".slice/crio-" + ctrA + ".scope/container\n",
			ProcessPod{UID: uidA, QOS: BestEffort, Driver: Systemd, ContainerID: ctrA, Runtime: CRIO, Path: "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + u_ + ".slice/crio-" + ctrA + ".scope/container"}},
		{"v2 systemd cri-o conmon", "0::/kubepods.slice/kubepods-pod" + u_ + ".slice/crio-conmon-" + ctrA + ".scope\n",
			ProcessPod{UID: uidA, QOS: Guaranteed, Driver: Systemd, ContainerID: ctrA, Runtime: CRIO, Conmon: true, Path: "/kubepods.slice/kubepods-pod" + u_ + ".slice/crio-conmon-" + ctrA + ".scope"}},
		{"v2 cgroupfs cri-o sandbox", "0::/kubepods/burstable/pod" + uidA + "/crio-" + sandbox + "\n",
			ProcessPod{UID: uidA, QOS: Burstable, Driver: Cgroupfs, ContainerID: sandbox, Runtime: CRIO, Path: "/kubepods/burstable/pod" + uidA + "/crio-" + sandbox}},
		{"v2 process in the pod cgroup itself", "0::" + bu + "\n",
			ProcessPod{UID: uidA, QOS: Burstable, Driver: Systemd, Path: bu}},
		{"v2 kubelet cgroup root", "0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod" + u_ + ".slice/cri-containerd-" + ctrA + ".scope\n",
			ProcessPod{UID: uidA, QOS: BestEffort, Driver: Systemd, ContainerID: ctrA, Runtime: Containerd, Path: "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod" + u_ + ".slice/cri-containerd-" + ctrA + ".scope"}},
		{"v2 cgroupfs custom root, static pod", "0::/custom/kubepods/besteffort/pod" + uidStatic + "/" + ctrA + "\n",
			ProcessPod{UID: uidStatic, QOS: BestEffort, Driver: Cgroupfs, ContainerID: ctrA, Path: "/custom/kubepods/besteffort/pod" + uidStatic + "/" + ctrA}},
		{"v2 seen from another cgroup namespace", "0::/../../kubepods-burstable-pod" + u_ + ".slice/cri-containerd-" + ctrA + ".scope\n",
			ProcessPod{UID: uidA, QOS: Burstable, Driver: Systemd, ContainerID: ctrA, Runtime: Containerd, Path: "/../../kubepods-burstable-pod" + u_ + ".slice/cri-containerd-" + ctrA + ".scope"}},
		{"v2 deleted cgroup", "0::/kubepods/pod" + uidA + "/" + ctrA + " (deleted)\n",
			ProcessPod{UID: uidA, QOS: Guaranteed, Driver: Cgroupfs, ContainerID: ctrA, Path: "/kubepods/pod" + uidA + "/" + ctrA}},
		{"v1 systemd docker", v1Lines("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + u_ + ".slice/docker-" + ctrA + ".scope"),
			ProcessPod{UID: uidA, QOS: Burstable, Driver: Systemd, ContainerID: ctrA, Runtime: Docker, Path: "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + u_ + ".slice/docker-" + ctrA + ".scope"}},
		{"v1 cgroupfs", v1Lines("/kubepods/besteffort/pod" + uidA + "/" + ctrA),
			ProcessPod{UID: uidA, QOS: BestEffort, Driver: Cgroupfs, ContainerID: ctrA, Path: "/kubepods/besteffort/pod" + uidA + "/" + ctrA}},
		{"v1 pod only in the cpu hierarchy",
			"10:memory:/\n9:cpu,cpuacct:/kubepods/pod" + uidA + "/" + ctrA + "\n1:name=systemd:/system.slice/containerd.service\n",
			ProcessPod{UID: uidA, QOS: Guaranteed, Driver: Cgroupfs, ContainerID: ctrA, Path: "/kubepods/pod" + uidA + "/" + ctrA}},
		{"v1 pod only in name=systemd",
			"9:cpu,cpuacct:/\n1:name=systemd:/kubepods/pod" + uidA + "/" + ctrA + "\n",
			ProcessPod{UID: uidA, QOS: Guaranteed, Driver: Cgroupfs, ContainerID: ctrA, Path: "/kubepods/pod" + uidA + "/" + ctrA}},
		{"hybrid, cgroup2 line not joined (old runc)",
			v1Lines("/kubepods/burstable/pod"+uidA+"/"+ctrA) + "0::/system.slice/containerd.service\n",
			ProcessPod{UID: uidA, QOS: Burstable, Driver: Cgroupfs, ContainerID: ctrA, Path: "/kubepods/burstable/pod" + uidA + "/" + ctrA}},
		{"hybrid, all joined", v1Lines(bu+"/cri-containerd-"+ctrA+".scope") + "0::" + bu + "/cri-containerd-" + ctrA + ".scope\n",
			ProcessPod{UID: uidA, QOS: Burstable, Driver: Systemd, ContainerID: ctrA, Runtime: Containerd, Path: bu + "/cri-containerd-" + ctrA + ".scope"}},

		{"host process", "0::/system.slice/sshd.service\n", ProcessPod{}},
		{"root cgroup v1", v1Lines("/"), ProcessPod{}},
		{"kubepods QoS level", "0::/kubepods.slice/kubepods-burstable.slice\n", ProcessPod{}},
		{"podman container", "0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-" + ctrA + ".scope\n", ProcessPod{}},
		{"pod-looking slice outside kubepods", "0::/system.slice/foo-pod" + u_ + ".slice\n", ProcessPod{}},
		{"pod-looking dir outside kubepods", "0::/custom/pod" + uidA + "/" + ctrA + "\n", ProcessPod{}},
		{"cgroupfs QoS name not a QoS", "0::/kubepods/critical/pod" + uidA + "\n", ProcessPod{}},
		{"bad UID", "0::/kubepods/pod" + uidA[:35] + "/" + ctrA + "\n", ProcessPod{}},
		{"empty", "", ProcessPod{}},
		{"garbage", "not a cgroup file\n::\n", ProcessPod{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := parseProcCgroup(tc.data, "/")
			if ok != (tc.want.Path != "") || got != tc.want {
				t.Errorf("got %+v, %v\nwant %+v", got, ok, tc.want)
			}
		})
	}
}

func TestContainerSegmentUnknownNames(t *testing.T) {
	for _, s := range []string{"container", "init.scope", "cri-containerd-" + ctrA[:10] + ".scope", ctrA + ".scope", "crio-" + ctrA + "0"} {
		if rt, id, conmon, ok := containerSegment(s); ok {
			t.Errorf("containerSegment(%q) = %q %q %v, want not a container", s, rt, id, conmon)
		}
	}
}

func TestPodOfProcess(t *testing.T) {
	proc := t.TempDir()
	write := func(pid, data string) {
		mkdirs(t, filepath.Join(proc, pid))
		if err := os.WriteFile(filepath.Join(proc, pid, "cgroup"), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("42", "0::/kubepods/burstable/pod"+uidA+"/"+ctrA+"\n")
	write("43", "0::/init.scope\n")

	p, ok, err := PodOfProcess(proc, 42)
	if err != nil || !ok || p.UID != uidA || p.ContainerID != ctrA || p.QOS != Burstable {
		t.Fatalf("pid 42: %+v %v %v", p, ok, err)
	}
	if p, ok, err := PodOfProcess(proc, 43); err != nil || ok {
		t.Fatalf("pid 43: %+v %v %v, want not in a pod", p, ok, err)
	}
	if _, _, err := PodOfProcess(proc, 44); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "process 44") {
		t.Fatalf("gone process: err = %v, want fs.ErrNotExist naming the pid", err)
	}
}
