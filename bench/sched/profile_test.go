// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The default profile's hogs are today's command line; the heavy profile's
// background on 2 CPUs (the lab's) is the one profile.go describes.
func TestProfileCommandLines(t *testing.T) {
	yaml := "/tmp/h.yaml"
	want := []string{"--temp-path", "/tmp", "--cpu", strconv.Itoa(2 * runtime.NumCPU()), "--cpu-method", "int64",
		"--timeout", "20s", "--metrics-brief", "--yaml", yaml}
	t.Setenv("TMPDIR", "/tmp")
	if got := hogArgs(20*time.Second+400*time.Millisecond, yaml); !slices.Equal(got, want) {
		t.Errorf("hogs: %q\nwant %q", got, want)
	}
	if p, _ := selectProfile("default"); p.background != nil || p.backgroundArgs(2) != "" {
		t.Error("the default profile has a background")
	}
	heavy, err := selectProfile("heavy")
	if err != nil {
		t.Fatal(err)
	}
	args, workers := heavy.background(2)
	wantBG := "--cpu 12 --cpu-method matrixprod --switch 2 --timer 2 --timer-freq 1000 --fork 1"
	if got := strings.Join(args, " "); got != wantBG || workers != 17 {
		t.Errorf("heavy background: %q, %d workers\nwant %q, 17", got, workers, wantBG)
	}
	if got := heavy.backgroundArgs(2); got != "stress-ng "+wantBG {
		t.Errorf("recorded as %q", got)
	}
	// -background-scale multiplies the per-CPU workers, not the fork loop.
	*bgScale = 2
	defer func() { *bgScale = 1 }()
	if args, workers := heavy.background(2); !strings.Contains(strings.Join(args, " "), "--cpu 24 ") || workers != 33 {
		t.Errorf("scaled by 2: %q, %d workers, want --cpu 24 and 33", args, workers)
	}
}

// The installed stress-ng (the lab's: the guest runs the host's) accepts
// every profile's options and starts as many workers as startHogs waits for:
// a dry run (-n) parses the command line and prints what it would dispatch.
func TestProfileStressNGDryRun(t *testing.T) {
	if _, err := exec.LookPath("stress-ng"); err != nil {
		t.Skip("stress-ng not installed (make deps)")
	}
	for _, cpus := range []int{1, 2, 4} {
		for _, p := range profiles {
			if p.background == nil {
				continue
			}
			args, workers := p.background(cpus)
			if got := dryRunWorkers(t, args); got != workers {
				t.Errorf("%s on %d CPUs: stress-ng dispatches %d workers, startHogs waits for %d", p.name, cpus, got, workers)
			}
		}
	}
	if got := dryRunWorkers(t, hogArgs(time.Second, filepath.Join(t.TempDir(), "h.yaml"))); got != nHogs() {
		t.Errorf("hogs: stress-ng dispatches %d workers, want %d", got, nHogs())
	}
}

var dispatchRE = regexp.MustCompile(`dispatching hogs: (.*)`)

func dryRunWorkers(t *testing.T, args []string) int {
	t.Helper()
	out, err := exec.Command("stress-ng", append([]string{"-n", "--temp-path", t.TempDir(), "--timeout", "1s"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("stress-ng -n %q: %v: %s", args, err, out)
	}
	m := dispatchRE.FindSubmatch(out)
	if m == nil {
		t.Fatalf("stress-ng -n %q printed no dispatch line: %s", args, out)
	}
	n := 0
	for _, part := range strings.Split(strings.TrimSpace(string(m[1])), ", ") {
		count, _, _ := strings.Cut(part, " ")
		c, err := strconv.Atoi(count)
		if err != nil {
			t.Fatalf("dispatch line %q: %v", m[1], err)
		}
		n += c
	}
	return n
}

func TestSelectProfile(t *testing.T) {
	if _, err := selectProfile("hevy"); err == nil || !strings.Contains(err.Error(), "-profile") || !strings.Contains(err.Error(), "default, heavy") {
		t.Errorf("unknown profile: %v", err)
	}
	for profile, want := range map[string]string{"": "sched", "default": "sched", "heavy": "sched-heavy"} {
		if got := resultName(profile); got != want {
			t.Errorf("resultName(%q) = %q, want %q", profile, got, want)
		}
	}
}

// The heavy profile's report checks issue #39's two goals; the default
// profile's does not.
func TestHeavyGoals(t *testing.T) {
	boot := BootReport{Boot: 1, Kernel: "7.3.4", CPUs: 2, Settings: Settings{Profile: "heavy", Workloads: "probe"},
		Order: []string{"eevdf", "swiftlane-critical"}, Variants: map[string]*VariantRun{
			"eevdf":              {Metrics: map[string]float64{"probe_idle_avg_us": 900, "probe_loaded_avg_us": 5400}},
			"swiftlane-critical": {Metrics: map[string]float64{"probe_idle_avg_us": 950, "probe_loaded_avg_us": 1200}},
		}}
	rep, err := mergeReports([]BootReport{boot})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Goal{}
	for _, g := range goals(rep) {
		got[g.Goal] = g
	}
	for goal, want := range map[string]struct {
		value string
		met   bool
	}{
		"heavy profile: EEVDF's loaded probe average >= 5x its idle one":         {"6.00x", true},
		"heavy profile: critical probe average >= 5x better than EEVDF's loaded": {"4.50x better", false},
	} {
		g, ok := got[goal]
		if !ok || g.Met == nil || *g.Met != want.met || g.Value != want.value {
			t.Errorf("%s: %+v, want %s met=%v", goal, g, want.value, want.met)
		}
	}
	rep.Settings.Profile = ""
	for _, g := range goals(rep) {
		if strings.HasPrefix(g.Goal, "heavy profile") {
			t.Errorf("default profile checks %q", g.Goal)
		}
	}
}

// mk/vm.mk refuses an unknown SCHED_PROFILE before booting: its list must
// be -profile's.
func TestMakeProfiles(t *testing.T) {
	b, err := os.ReadFile("../../mk/vm.mk")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`\$\(filter \$\(SCHED_PROFILE\),([^)]*)\)`).FindSubmatch(b)
	if m == nil {
		t.Fatal("mk/vm.mk does not check SCHED_PROFILE")
	}
	if got := strings.Fields(string(m[1])); !slices.Equal(got, profileNames()) {
		t.Errorf("mk/vm.mk allows %q, -profile %q", got, profileNames())
	}
}
