// SPDX-License-Identifier: Apache-2.0
//go:build vmtest

package vm

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

const (
	cgroupFS = "/sys/fs/cgroup"
	// CPU requests of the two pods: 1:3.
	podAMillis, podBMillis = 250, 750
	// How long each pair of pods is measured, in how many intervals.
	weightWindow  = 10 * time.Second
	weightSamples = 10
	// Largest relative error of the CPU-time ratio under swiftlane.
	weightTolerance = 0.10
)

// k8sCPUWeight is the cgroup v2 cpu.weight the kubelet writes for a CPU
// request: millicores to cpu.shares, then shares to weight.
func k8sCPUWeight(millicores int) int {
	shares := min(max(millicores*1024/1000, 2), 262144)
	return 1 + ((shares-2)*9999)/262142
}

// cgDir is a cgroup the test creates, relative to /sys/fs/cgroup, and the
// cpu.weight it gets (0: the kernel's default, 100); pod marks the weights
// that come from a pod's request.
type cgDir struct {
	path   string
	weight int
	pod    bool
}

// podLayout is a cgroup tree holding two "pods" whose processes run in
// podA and podB.
type podLayout struct {
	name       string
	dirs       []cgDir // parents before children
	podA, podB string
}

// flatPods: the two pods are top-level cgroups.
func flatPods() podLayout {
	return podLayout{
		name: "flat",
		dirs: []cgDir{
			{"swl-cgw-pod-a", k8sCPUWeight(podAMillis), true},
			{"swl-cgw-pod-b", k8sCPUWeight(podBMillis), true},
		},
		podA: "swl-cgw-pod-a",
		podB: "swl-cgw-pod-b",
	}
}

// kubepodsPods: the tree the kubelet's systemd cgroup driver builds for two
// Burstable pods with one container each, under a test-owned top so it
// cannot meet a real kubepods.slice: kubepods.slice weighted by the node's
// allocatable CPUs, the QoS slice by its pods' requests, each pod slice and
// container scope by the request.
func kubepodsPods() podLayout {
	top := "swl-cgweight.slice"
	kube := top + "/kubepods.slice"
	burst := kube + "/kubepods-burstable.slice"
	pod := func(id string, millis int) []cgDir {
		p := fmt.Sprintf("%s/kubepods-burstable-pod%s.slice", burst, id)
		return []cgDir{
			{p, k8sCPUWeight(millis), true},
			{p + "/cri-containerd-" + id + ".scope", k8sCPUWeight(millis), true},
		}
	}
	dirs := []cgDir{
		{top, 0, false},
		{kube, k8sCPUWeight(runtime.NumCPU() * 1000), false},
		{burst, k8sCPUWeight(podAMillis + podBMillis), false},
	}
	a, b := pod("a", podAMillis), pod("b", podBMillis)
	dirs = append(append(dirs, a...), b...)
	return podLayout{name: "kubepods", dirs: dirs, podA: a[1].path, podB: b[1].path}
}

// Two saturating pods with CPU requests 1:3 must get CPU time 1:3 under
// swiftlane, as under the kernel's fair class, both as top-level cgroups and
// nested the way the kubelet nests them. Under swiftlane the weights arrive
// the ways they do on a node: the flat pods exist when it attaches and get
// their weights while they run (ops.cgroup_set_weight, on active cgroups);
// the kubepods tree is created while it is attached (ops.cgroup_init) and
// its pods' weights written once they run.
func TestCgroupWeights(t *testing.T) {
	waitState(t, "disabled")
	flat, kube := flatPods(), kubepodsPods()
	want := float64(k8sCPUWeight(podBMillis)) / float64(k8sCPUWeight(podAMillis))
	eevdf, swl := map[string]float64{}, map[string]float64{}

	makeCgroups(t, flat.dirs, true)
	removeKube := makeCgroups(t, kube.dirs, true)
	for _, l := range []podLayout{flat, kube} {
		eevdf[l.name] = podRatio(t, l, nil)
	}
	removeKube()
	setWeights(t, flat.dirs, func(cgDir) int { return 100 })

	mark := logMark(t)
	p := startScheduler(t, noStrategies)
	podWeights := func(d cgDir) int { return d.weight }
	swl[flat.name] = podRatio(t, flat, func() { setWeights(t, flat.dirs, podWeights) })
	makeCgroups(t, kube.dirs, false)
	swl[kube.name] = podRatio(t, kube, func() { setWeights(t, kube.dirs, podWeights) })
	if !p.alive() {
		t.Fatalf("swiftlane exited during the measurements:\n%s", p.out)
	}
	requireState(t, "enabled", "swiftlane")

	for _, l := range []podLayout{flat, kube} {
		t.Logf("%s: CPU time pod B / pod A = %.2f under swiftlane, %.2f under the fair class (weights %d:%d, want %.2f)",
			l.name, swl[l.name], eevdf[l.name], k8sCPUWeight(podAMillis), k8sCPUWeight(podBMillis), want)
		if math.Abs(swl[l.name]/want-1) > weightTolerance {
			t.Errorf("%s: swiftlane gave the pods CPU time %.2f:1, want %.2f:1 within %.0f%%",
				l.name, swl[l.name], want, weightTolerance*100)
		}
	}
	mergeK8sResults(t, map[string]any{
		"cpu_weight_ratio":            swl[kube.name],
		"cpu_weight_ratio_eevdf":      eevdf[kube.name],
		"cpu_weight_ratio_flat":       swl[flat.name],
		"cpu_weight_ratio_flat_eevdf": eevdf[flat.name],
	})
	checkKernelLog(t, mark)
}

// makeCgroups creates dirs, enabling the cpu controller on every level
// above them, with their weights (the pods' only if podWeights). remove,
// also run by the test's cleanup, deletes them again.
func makeCgroups(t *testing.T, dirs []cgDir, podWeights bool) (remove func()) {
	t.Helper()
	var made []string
	remove = func() {
		for len(made) > 0 {
			d := made[len(made)-1]
			made = made[:len(made)-1]
			if err := os.Remove(d); err != nil {
				t.Errorf("remove cgroup: %v", err)
			}
		}
	}
	t.Cleanup(remove)
	for _, d := range dirs {
		enableCPUController(t, filepath.Dir(d.path)) // its ancestors' came earlier in dirs
		abs := filepath.Join(cgroupFS, d.path)
		if err := os.Mkdir(abs, 0o755); err != nil {
			t.Fatalf("create cgroup: %v", err)
		}
		made = append(made, abs)
		if d.weight != 0 && (podWeights || !d.pod) {
			writeCgroupFile(t, filepath.Join(abs, "cpu.weight"), strconv.Itoa(d.weight))
		}
	}
	return remove
}

// setWeights writes weight(d) to the pod cgroups among dirs.
func setWeights(t *testing.T, dirs []cgDir, weight func(cgDir) int) {
	t.Helper()
	for _, d := range dirs {
		if d.pod {
			writeCgroupFile(t, filepath.Join(cgroupFS, d.path, "cpu.weight"), strconv.Itoa(weight(d)))
		}
	}
}

// enableCPUController turns on the cpu controller for dir's children
// (dir relative to /sys/fs/cgroup, "." for the root).
func enableCPUController(t *testing.T, dir string) {
	t.Helper()
	ctl := filepath.Join(cgroupFS, dir, "cgroup.subtree_control")
	b, err := os.ReadFile(ctl)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(strings.Fields(string(b)), "cpu") {
		writeCgroupFile(t, ctl, "+cpu")
	}
}

func writeCgroupFile(t *testing.T, path, v string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(v), 0); err != nil {
		t.Fatalf("write %q to %s: %v", v, path, err)
	}
}

// podRatio runs the same CPU hogs in both pods, more than there are CPUs in
// each, calls running (if not nil) once they all run, and returns pod B's
// CPU time over pod A's: the median of the ratios of weightSamples
// consecutive intervals. Under TCG the host sometimes stops a vCPU for
// hundreds of milliseconds and the guest charges the whole stall to
// whichever task it was running, so one interval can be far off either way;
// the median is not moved by a few of them, while a scheduler that gets the
// shares wrong gets them wrong in most intervals. The ratio of the window's
// totals is logged alongside.
func podRatio(t *testing.T, l podLayout, running func()) float64 {
	t.Helper()
	workers := 2 * runtime.NumCPU()
	stopA := startStressIn(t, l.podA, workers)
	defer stopA()
	stopB := startStressIn(t, l.podB, workers)
	defer stopB()
	waitProcs(t, l.podA, workers+1)
	waitProcs(t, l.podB, workers+1)
	if running != nil {
		running()
	}

	a, b := []int64{cpuUsage(t, l.podA)}, []int64{cpuUsage(t, l.podB)}
	tick := time.NewTicker(weightWindow / weightSamples)
	defer tick.Stop()
	for range weightSamples {
		<-tick.C // the measurement intervals themselves
		a, b = append(a, cpuUsage(t, l.podA)), append(b, cpuUsage(t, l.podB))
	}
	// An interval in which the pods together got less than a tenth of the
	// CPUs is one the host did not run the VM in: it says nothing. One pod
	// starved while the other ran is a sample like any other (0 or +Inf).
	interval := float64((weightWindow / weightSamples).Microseconds())
	var ratios []float64
	for i := 1; i < len(a); i++ {
		da, db := a[i]-a[i-1], b[i]-b[i-1]
		if float64(da+db) < 0.1*interval*float64(runtime.NumCPU()) {
			t.Logf("%s: interval %d skipped: the pods got only %d + %d µs of CPU", l.name, i, da, db)
			continue
		}
		ratios = append(ratios, float64(db)/float64(da))
	}
	if len(ratios) < weightSamples/2 {
		t.Fatalf("%s: the pods ran in only %d of %d intervals: is the host overloaded?", l.name, len(ratios), weightSamples)
	}
	slices.Sort(ratios)
	median := (ratios[(len(ratios)-1)/2] + ratios[len(ratios)/2]) / 2
	total := float64(b[len(b)-1]-b[0]) / float64(a[len(a)-1]-a[0])
	t.Logf("%s: pod A %.2f s, pod B %.2f s of CPU in %v: ratio of totals %.2f, median of %d intervals %.2f (range %.2f .. %.2f)",
		l.name, float64(a[len(a)-1]-a[0])/1e6, float64(b[len(b)-1]-b[0])/1e6, weightWindow,
		total, len(ratios), median, ratios[0], ratios[len(ratios)-1])
	return median
}

// startStressIn starts `stress-ng --cpu workers` inside a cgroup (created
// there by clone3, so no instant of it runs elsewhere); stop ends it.
func startStressIn(t *testing.T, dir string, workers int) (stop func()) {
	t.Helper()
	fd, err := unix.Open(filepath.Join(cgroupFS, dir), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open cgroup: %v", err)
	}
	defer unix.Close(fd)
	cmd := exec.Command("stress-ng", "--temp-path", t.TempDir(), "--quiet", "--cpu", strconv.Itoa(workers))
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("stress-ng in %s: %v", dir, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	stop = func() {
		select {
		case <-done:
			return
		default:
		}
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}
	t.Cleanup(stop)
	return stop
}

// waitProcs polls until the cgroup holds n processes (stress-ng and its
// workers): cgroup.procs has no change notification.
func waitProcs(t *testing.T, dir string, n int) {
	t.Helper()
	deadline := time.Now().Add(stateTimeout)
	for {
		b, err := os.ReadFile(filepath.Join(cgroupFS, dir, "cgroup.procs"))
		if err != nil {
			t.Fatal(err)
		}
		got := len(strings.Fields(string(b)))
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("cgroup %s holds %d processes after %v, want %d", dir, got, stateTimeout, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cpuUsage reads usage_usec from the cgroup's cpu.stat.
func cpuUsage(t *testing.T, dir string) int64 {
	t.Helper()
	f, err := os.Open(filepath.Join(cgroupFS, dir, "cpu.stat"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "usage_usec "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("cpu.stat of %s: %v", dir, err)
			}
			return n
		}
	}
	t.Fatalf("cpu.stat of %s has no usage_usec", dir)
	return 0
}
