// SPDX-License-Identifier: Apache-2.0

package podcgroup

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Mountinfo samples in the shape of real nodes (trimmed to the lines that
// matter plus neighbours that must be ignored).
const (
	mountinfoV2 = `22 27 0:21 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
26 22 0:23 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
27 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw
31 22 0:27 / /sys/fs/bpf rw,nosuid,nodev,noexec,relatime shared:12 - bpf bpf rw,mode=700
`
	// Ubuntu 20.04 style hybrid: tmpfs root, controllers co-mounted,
	// cgroup2 at unified.
	mountinfoHybrid = `25 22 0:22 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
26 25 0:23 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate
27 25 0:24 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,xattr,name=systemd
31 25 0:28 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:15 - cgroup cgroup rw,cpu,cpuacct
32 25 0:29 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:16 - cgroup cgroup rw,memory
33 25 0:30 / /sys/fs/cgroup/net_cls,net_prio rw,nosuid,nodev,noexec,relatime shared:17 - cgroup cgroup rw,net_cls,net_prio
`
	// CentOS 7 style legacy: no cgroup2 at all.
	mountinfoV1 = `24 18 0:20 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:6 - tmpfs tmpfs ro,mode=755
25 24 0:21 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:7 - cgroup cgroup rw,xattr,release_agent=/usr/lib/systemd/systemd-cgroups-agent,name=systemd
28 24 0:24 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:10 - cgroup cgroup rw,cpuacct,cpu
29 24 0:25 / /sys/fs/cgroup/cpuset rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,cpuset
30 24 0:26 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:12 - cgroup cgroup rw,memory
`
)

func TestParseLayout(t *testing.T) {
	const root = "/sys/fs/cgroup"
	tests := []struct {
		name, mountinfo, root string
		want                  Layout
		wantErr               string
	}{
		{name: "v2", mountinfo: mountinfoV2, root: root,
			want: Layout{Version: Unified, Unified: "/sys/fs/cgroup"}},
		{name: "hybrid", mountinfo: mountinfoHybrid, root: root,
			want: Layout{Version: Hybrid, Unified: "/sys/fs/cgroup/unified", CPU: "/sys/fs/cgroup/cpu,cpuacct", Systemd: "/sys/fs/cgroup/systemd"}},
		{name: "v1", mountinfo: mountinfoV1, root: root,
			want: Layout{Version: Legacy, CPU: "/sys/fs/cgroup/cpu,cpuacct", Systemd: "/sys/fs/cgroup/systemd"}},
		{name: "v1 separate cpu hierarchy", root: root,
			mountinfo: "40 31 0:37 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,name=systemd\n" +
				"32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n" +
				"33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct\n",
			want: Layout{Version: Legacy, CPU: "/sys/fs/cgroup/cpu", Systemd: "/sys/fs/cgroup/systemd"}},
		{name: "v1 name=systemd only", root: root,
			mountinfo: "40 31 0:37 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,name=systemd\n",
			want:      Layout{Version: Legacy, Systemd: "/sys/fs/cgroup/systemd"}},
		{name: "configurable root", root: "/host/sys/fs/cgroup",
			mountinfo: strings.ReplaceAll(mountinfoHybrid, " /sys/fs/cgroup", " /host/sys/fs/cgroup") + mountinfoV2,
			want:      Layout{Version: Hybrid, Unified: "/host/sys/fs/cgroup/unified", CPU: "/host/sys/fs/cgroup/cpu,cpuacct", Systemd: "/host/sys/fs/cgroup/systemd"}},
		{name: "escaped mount point", root: `/tmp/a b`,
			mountinfo: `26 22 0:23 / /tmp/a\040b rw - cgroup2 cgroup2 rw` + "\n",
			want:      Layout{Version: Unified, Unified: "/tmp/a b"}},
		{name: "optional fields and mounts elsewhere", root: root,
			mountinfo: "90 26 0:23 / /run/k3s/cgroup rw shared:9 master:3 - cgroup2 cgroup2 rw\n" +
				"91 26 0:23 /kubepods /sys/fs/cgroup/foo/bar rw shared:9 - cgroup2 cgroup2 rw\n" + mountinfoV2,
			want: Layout{Version: Unified, Unified: "/sys/fs/cgroup"}},
		{name: "cgroup2 wins over v1 below it", root: root,
			mountinfo: mountinfoV2 + "50 26 0:40 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n",
			want:      Layout{Version: Unified, Unified: "/sys/fs/cgroup"}},
		{name: "stacked mount hides cgroup2", root: root,
			mountinfo: mountinfoHybrid + "60 25 0:50 / /sys/fs/cgroup/unified rw - tmpfs tmpfs rw\n",
			want:      Layout{Version: Legacy, CPU: "/sys/fs/cgroup/cpu,cpuacct", Systemd: "/sys/fs/cgroup/systemd"}},
		{name: "nothing mounted", root: root, mountinfo: "27 1 254:1 / / rw - ext4 /dev/vda1 rw\n",
			wantErr: "no cgroup or cgroup2 filesystem mounted at or directly below /sys/fs/cgroup"},
		{name: "v1 without cpu or systemd", root: root,
			mountinfo: "30 24 0:26 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n",
			wantErr:   "neither the cpu controller nor name=systemd"},
		{name: "garbage", root: root, mountinfo: "hello world\n", wantErr: `line 1: not a mountinfo line: "hello world"`},
		{name: "relative root", root: "sys/fs/cgroup", mountinfo: mountinfoV2, wantErr: "must be an absolute path"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseLayout([]byte(tc.mountinfo), tc.root)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestDetectLayoutFile(t *testing.T) {
	f := filepath.Join(t.TempDir(), "mountinfo")
	if err := os.WriteFile(f, []byte(mountinfoV1), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := DetectLayout(f, DefaultRoot)
	if err != nil || l.Version != Legacy || l.CPU != "/sys/fs/cgroup/cpu,cpuacct" {
		t.Fatalf("DetectLayout = %+v, %v", l, err)
	}
	if _, err := DetectLayout(filepath.Join(t.TempDir(), "missing"), DefaultRoot); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("missing file: err = %v, want the path in it", err)
	}
}
