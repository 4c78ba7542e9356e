// SPDX-License-Identifier: Apache-2.0

package podcgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	uidA      = "6f1c2d3e-4b5a-4c7d-8e9f-0a1b2c3d4e5f"
	uidB      = "6f1c2d3e-4b5a-4c7d-8e9f-0a1b2c3d4e60" // same prefix as uidA
	uidStatic = "0123456789abcdef0123456789abcdef"     // kubelet's md5 UID for static pods
	ctrA      = "9a4c1f0e7b3d2a5c8e6f4b1d0c9a7e3f5b2d8c6a4e1f0b9d7c3a5e2f8b6d4c1a"
	ctrB      = "1111111111111111111111111111111111111111111111111111111111111111"
	sandbox   = "2222222222222222222222222222222222222222222222222222222222222222"
)

// Expected pod cgroup paths, written out literally so that the test does not
// share the code under test. {u} is the UID, {u_} the UID with _ for -.
var podPaths = []struct {
	driver Driver
	root   string // kubelet --cgroup-root as configured in the resolver
	qos    QOSClass
	want   string
}{
	{Systemd, "/", Guaranteed, "/kubepods.slice/kubepods-pod{u_}.slice"},
	{Systemd, "/", Burstable, "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{u_}.slice"},
	{Systemd, "/", BestEffort, "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{u_}.slice"},
	{Systemd, "/kubelet", Guaranteed, "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-pod{u_}.slice"},
	{Systemd, "/kubelet", Burstable, "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/kubelet-kubepods-burstable-pod{u_}.slice"},
	{Systemd, "/kubelet.slice", BestEffort, "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod{u_}.slice"},
	{Systemd, "/my-nodes/pool", Burstable, "/my_nodes.slice/my_nodes-pool.slice/my_nodes-pool-kubepods.slice/my_nodes-pool-kubepods-burstable.slice/my_nodes-pool-kubepods-burstable-pod{u_}.slice"},
	{Cgroupfs, "/", Guaranteed, "/kubepods/pod{u}"},
	{Cgroupfs, "/", Burstable, "/kubepods/burstable/pod{u}"},
	{Cgroupfs, "/", BestEffort, "/kubepods/besteffort/pod{u}"},
	{Cgroupfs, "/custom", Guaranteed, "/custom/kubepods/pod{u}"},
	{Cgroupfs, "/custom/", Burstable, "/custom/kubepods/burstable/pod{u}"},
	{Cgroupfs, "/a/b", BestEffort, "/a/b/kubepods/besteffort/pod{u}"},
}

func expand(s, uid string) string {
	return strings.NewReplacer("{u_}", strings.ReplaceAll(uid, "-", "_"), "{u}", uid).Replace(s)
}

// Container cgroup names per runtime and driver, literally.
var ctrNames = map[Runtime]map[Driver]string{
	Containerd: {Systemd: "cri-containerd-{c}.scope", Cgroupfs: "{c}"},
	CRIO:       {Systemd: "crio-{c}.scope", Cgroupfs: "crio-{c}"},
	Docker:     {Systemd: "docker-{c}.scope", Cgroupfs: "{c}"},
}

// Names of what else a runtime puts in the pod cgroup next to containers.
var siblings = map[Runtime]map[Driver][]string{
	Containerd: {Systemd: {"cri-containerd-{s}.scope"}, Cgroupfs: {"{s}"}},
	CRIO:       {Systemd: {"crio-{s}", "crio-conmon-{c}.scope"}, Cgroupfs: {"crio-{s}", "crio-conmon-{c}"}},
	Docker:     {Systemd: {"docker-{s}.scope"}, Cgroupfs: {"{s}"}},
}

func ctrName(tmpl, ctr string) string {
	return strings.NewReplacer("{c}", ctr, "{s}", sandbox).Replace(tmpl)
}

func mkdirs(t *testing.T, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// layouts builds each kind of node over a temporary directory: where the
// kubelet's tree gets created and where the resolver must find it.
type layoutCase struct {
	name    string
	layout  func(tmp string) Layout
	trees   func(l Layout) []string // hierarchies holding the pod tree
	wantDir func(l Layout) string   // the one the resolver must return
	wantV1  bool
}

var layoutCases = []layoutCase{
	{
		name:    "v2",
		layout:  func(tmp string) Layout { return Layout{Version: Unified, Unified: filepath.Join(tmp, "cg")} },
		trees:   func(l Layout) []string { return []string{l.Unified} },
		wantDir: func(l Layout) string { return l.Unified },
	},
	{
		name: "v1",
		layout: func(tmp string) Layout {
			return Layout{Version: Legacy, CPU: filepath.Join(tmp, "cpu,cpuacct"), Systemd: filepath.Join(tmp, "systemd")}
		},
		trees:   func(l Layout) []string { return []string{l.CPU, l.Systemd} },
		wantDir: func(l Layout) string { return l.CPU },
		wantV1:  true,
	},
	{
		name:    "v1 name=systemd only",
		layout:  func(tmp string) Layout { return Layout{Version: Legacy, Systemd: filepath.Join(tmp, "systemd")} },
		trees:   func(l Layout) []string { return []string{l.Systemd} },
		wantDir: func(l Layout) string { return l.Systemd },
		wantV1:  true,
	},
	{
		name: "hybrid, runc joins cgroup2",
		layout: func(tmp string) Layout {
			return Layout{Version: Hybrid, Unified: filepath.Join(tmp, "unified"), CPU: filepath.Join(tmp, "cpu"), Systemd: filepath.Join(tmp, "systemd")}
		},
		trees:   func(l Layout) []string { return []string{l.Unified, l.CPU, l.Systemd} },
		wantDir: func(l Layout) string { return l.Unified },
	},
	{
		name: "hybrid, v1 only",
		layout: func(tmp string) Layout {
			return Layout{Version: Hybrid, Unified: filepath.Join(tmp, "unified"), CPU: filepath.Join(tmp, "cpu"), Systemd: filepath.Join(tmp, "systemd")}
		},
		trees:   func(l Layout) []string { return []string{l.CPU, l.Systemd} },
		wantDir: func(l Layout) string { return l.CPU },
		wantV1:  true,
	},
}

func TestResolverMatrix(t *testing.T) {
	qosOther := map[QOSClass]QOSClass{Guaranteed: Burstable, Burstable: BestEffort, BestEffort: Guaranteed}
	for _, lc := range layoutCases {
		for _, pc := range podPaths {
			for _, rt := range []Runtime{Containerd, CRIO, Docker} {
				uids := []string{uidA}
				if lc.name == "v2" {
					uids = append(uids, uidStatic) // the UID form matters to naming, not to the layout
				}
				for _, uid := range uids {
					name := fmt.Sprintf("%s/%s%s/%s/%s/%s", lc.name, pc.driver, pc.root, pc.qos, rt, uid[:4])
					t.Run(name, func(t *testing.T) {
						l := lc.layout(t.TempDir())
						podPath := expand(pc.want, uid)
						decoy := expand(pc.want, uidB)
						ctr := ctrName(ctrNames[rt][pc.driver], ctrA)
						for _, h := range lc.trees(l) {
							mkdirs(t, filepath.Join(h, podPath, ctr, "container"), filepath.Join(h, decoy, ctrName(ctrNames[rt][pc.driver], ctrB)))
							for _, s := range siblings[rt][pc.driver] {
								mkdirs(t, filepath.Join(h, podPath, ctrName(s, ctrA)))
							}
						}
						want := Cgroup{Path: podPath, Dir: filepath.Join(lc.wantDir(l), podPath), V1: lc.wantV1, Driver: pc.driver}

						for _, cfg := range []Driver{pc.driver, ""} {
							r, err := NewResolver(l, pc.root, cfg)
							if err != nil {
								t.Fatal(err)
							}
							// The QoS fast path, the search, and a stale QoS (search again).
							for _, q := range []QOSClass{pc.qos, "", qosOther[pc.qos]} {
								got, err := r.Pod(uid, q)
								if err != nil {
									t.Fatalf("driver %q, Pod(%s, %q): %v", cfg, uid, q, err)
								}
								if got != want {
									t.Fatalf("driver %q, Pod(%s, %q) = %+v, want %+v", cfg, uid, q, got, want)
								}
							}
						}
						r, _ := NewResolver(l, pc.root, pc.driver)
						pod, _ := r.Pod(uid, pc.qos)
						c, err := r.Container(pod, string(rt)+"://"+ctrA)
						if err != nil {
							t.Fatal(err)
						}
						wantC := Cgroup{Path: podPath + "/" + ctr, Dir: filepath.Join(lc.wantDir(l), podPath, ctr), V1: lc.wantV1, Driver: pc.driver}
						if c != wantC {
							t.Fatalf("Container = %+v, want %+v", c, wantC)
						}
						// The other container lives in the decoy pod, not this one.
						if _, err := r.Container(pod, string(rt)+"://"+ctrB); !errors.Is(err, ErrNotFound) {
							t.Fatalf("container of another pod: err = %v, want ErrNotFound", err)
						}
						// The other driver's naming does not find this pod.
						other := Systemd
						if pc.driver == Systemd {
							other = Cgroupfs
						}
						ro, _ := NewResolver(l, pc.root, other)
						if _, err := ro.Pod(uid, pc.qos); !errors.Is(err, ErrNotFound) {
							t.Fatalf("resolver with driver %s: err = %v, want ErrNotFound", other, err)
						}
					})
				}
			}
		}
	}
}

func TestPodPathNaming(t *testing.T) {
	for _, pc := range podPaths {
		r, err := NewResolver(Layout{Version: Unified, Unified: "/cg"}, pc.root, pc.driver)
		if err != nil {
			t.Fatal(err)
		}
		got := cgroupPath(pc.driver, podParts(r.partsFor(pc.driver), pc.qos, uidA))
		if want := expand(pc.want, uidA); got != want {
			t.Errorf("%s %s %s: %s, want %s", pc.driver, pc.root, pc.qos, got, want)
		}
	}
}

// A systemd pod slice carries the UID with "_" for "-": the slice name must
// not contain the dashed UID, and it must parse back to it.
func TestSystemdUIDEscaping(t *testing.T) {
	p := cgroupPath(Systemd, podParts(nil, Burstable, uidA))
	base := filepath.Base(p)
	if base != "kubepods-burstable-pod6f1c2d3e_4b5a_4c7d_8e9f_0a1b2c3d4e5f.slice" {
		t.Fatalf("pod slice = %s", base)
	}
	uid, qos, d, ok := podSegment(base, nil)
	if !ok || uid != uidA || qos != Burstable || d != Systemd {
		t.Fatalf("podSegment(%s) = %q %q %q %v", base, uid, qos, d, ok)
	}
}

func TestResolverNotFound(t *testing.T) {
	tmp := t.TempDir()
	l := Layout{Version: Hybrid, Unified: filepath.Join(tmp, "unified"), CPU: filepath.Join(tmp, "cpu")}
	// The pod exists, but under another cgroup root than configured.
	mkdirs(t, filepath.Join(l.Unified, "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-pod"+strings.ReplaceAll(uidA, "-", "_")+".slice"),
		filepath.Join(l.Unified, "kubepods.slice/kubepods-burstable.slice"))
	r, err := NewResolver(l, "/", "")
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.Pod(uidA, Guaranteed)
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("err = %v, want ErrNotFound", err)
	}
	msg := err.Error()
	for _, want := range []string{
		"pod " + uidA + " (QoS Guaranteed)",
		filepath.Join(l.Unified, "kubepods.slice/kubepods-pod"+strings.ReplaceAll(uidA, "-", "_")+".slice"),
		filepath.Join(l.Unified, "kubepods/pod"+uidA),
		filepath.Join(l.CPU, "kubepods/pod"+uidA),
		"searched 3 levels below " + filepath.Join(l.Unified, "kubepods.slice") + ", " + filepath.Join(l.Unified, "kubepods"),
		"cgroup root (/)", "--cgroup-root",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error does not mention %q:\n%s", want, msg)
		}
	}
	if _, err := r.Pod(uidA, ""); !errors.Is(err, ErrNotFound) || strings.Contains(err.Error(), "tried") {
		t.Errorf("search only: err = %v, want ErrNotFound without fast-path paths", err)
	}

	r2, _ := NewResolver(l, "/kubelet", Systemd)
	pod, err := r2.Pod(uidA, "")
	if err != nil {
		t.Fatal(err)
	}
	_, err = r2.Container(pod, "containerd://"+ctrA)
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("container: err = %v, want ErrNotFound", err)
	}
	for _, want := range []string{filepath.Join(pod.Dir, "cri-containerd-"+ctrA+".scope"), filepath.Join(pod.Dir, ctrA), "containerd://" + ctrA} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("container error does not mention %q:\n%v", want, err)
		}
	}
}

func TestResolverSearchIgnoresOtherPodsAndContainers(t *testing.T) {
	tmp := t.TempDir()
	l := Layout{Version: Unified, Unified: tmp}
	// uidA's own cgroup is missing; a container dir named like it in
	// another pod, and a pod of uidB, must not be taken for it.
	mkdirs(t,
		filepath.Join(tmp, "kubepods/burstable/pod"+uidB, "pod"+uidA),
		filepath.Join(tmp, "kubepods/besteffort/pod"+uidB+"x"),
		filepath.Join(tmp, "kubepods/besteffort/unrelated/deeper/pod"+uidA),
	)
	r, _ := NewResolver(l, "/", Cgroupfs)
	if got, err := r.Pod(uidA, ""); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Pod = %+v, %v; want ErrNotFound", got, err)
	}
	// A regular file named like the pod is not its cgroup either.
	if err := os.WriteFile(filepath.Join(tmp, "kubepods/pod"+uidA), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := r.Pod(uidA, Guaranteed); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Pod = %+v, %v; want ErrNotFound", got, err)
	}
}

func TestResolverInputErrors(t *testing.T) {
	v2 := Layout{Version: Unified, Unified: "/sys/fs/cgroup"}
	for _, tc := range []struct {
		layout Layout
		root   string
		driver Driver
		want   string
	}{
		{v2, "kubelet", "", `cgroup root "kubelet": want a clean absolute path`},
		{v2, "/a/../b", "", `cgroup root "/a/../b"`},
		{v2, "/", "Systemd", `cgroup driver "Systemd": want "systemd" or "cgroupfs"`},
		{Layout{}, "/", "", "unknown version 0 (use DetectLayout)"},
		{Layout{Version: Unified}, "/", "", "Layout.Unified"},
		{Layout{Version: Legacy, Unified: "/x"}, "/", "", "Layout.CPU"},
		{Layout{Version: Hybrid, CPU: "/x"}, "/", "", "Hybrid version without a cgroup2 mount point"},
	} {
		if _, err := NewResolver(tc.layout, tc.root, tc.driver); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewResolver(%+v, %q, %q): err = %v, want %q", tc.layout, tc.root, tc.driver, err, tc.want)
		}
	}

	r, err := NewResolver(v2, "", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		uid  string
		qos  QOSClass
		want string
	}{
		{"", "", `pod UID "": want the pod's metadata.uid`},
		{"../../etc", "", `pod UID "../../etc"`},
		{strings.ReplaceAll(uidA, "-", "_"), "", "pod UID"},
		{uidA + "0", "", "pod UID"},
		{"-" + uidStatic, "", "pod UID"},
		{uidA, "burstable", `QoS class "burstable": want Guaranteed, Burstable, BestEffort or empty`},
	} {
		if _, err := r.Pod(tc.uid, tc.qos); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Pod(%q, %q): err = %v, want %q", tc.uid, tc.qos, err, tc.want)
		}
	}
	for _, id := range []string{
		ctrA, "containerd:/" + ctrA, "rkt://" + ctrA, "containerd://" + ctrA[:12],
		"containerd://" + ctrA + "/..", "cri-o://" + strings.ToUpper(ctrA)[:63] + "g",
	} {
		_, err := r.Container(Cgroup{Dir: "/nonexistent"}, id)
		if err == nil || !strings.Contains(err.Error(), "want <runtime>://<64 hex digits>") || errors.Is(err, ErrNotFound) {
			t.Errorf("Container(%q): err = %v", id, err)
		}
	}
	if _, err := r.Container(Cgroup{}, "containerd://"+ctrA); err == nil || !strings.Contains(err.Error(), "empty pod cgroup") {
		t.Errorf("Container of a zero Cgroup: err = %v", err)
	}
}
