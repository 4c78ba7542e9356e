// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"strings"
)

// profile is a saturation profile: what runs beside the CPU hogs wherever a
// workload saturates the machine (the probe's loaded phase, cyclictest,
// nginx's loaded phases).
type profile struct {
	name, describe string
	// background is stress-ng's command line (without --timeout) for the
	// load beside the hogs on a machine of cpus CPUs, and how many workers
	// it starts; nil for none.
	background func(cpus int) (args []string, workers int)
	// serverFirst: the probe's echo server starts before the idle phase and
	// serves both, so the load arrives while it runs (see heavyBackground).
	serverFirst bool
}

// profiles are what -profile selects; the first is the default.
var profiles = []profile{
	{"default", "two CPU hogs per CPU", nil, false},
	{"heavy", "two CPU hogs per CPU, and per CPU six more of another kind (matrix products), " +
		"a context-switch pair and a 1 kHz timer; one fork loop; the probe's echo server runs before the load comes",
		heavyBackground, true},
}

// heavyBackground is a busy node beside the hogs, chosen by what degrades
// EEVDF's wakeup latency, measured rather than argued (7.3.4, 2 vCPUs, the
// probe idle at 1,117 µs): CPU hogs alone took it to 3,247 µs with 2 per
// CPU, 5,852 with 4, 9,758 with 8 and 13,281 with 16. EEVDF places a waking
// task by its lag and runs the eligible task with the earliest deadline, so
// the probe's wait grows with the hogs whose deadlines fall before its own,
// about a slice for every few hogs on its CPU. Wakeup-heavy stressors do not
// degrade it: a first version of this profile (per CPU two bursty workers,
// 3 ms busy then asleep, a context-switch and a pipe pair, a timer, 16 short
// sleepers) left EEVDF's probe at 0.98-1.17x its idle average even with 8x
// those workers, and starved the hogs instead. So: 8 hogs per CPU in all,
// the 6 beyond the default's of another method (matrix products, which
// also take the cache from the probe), plus a context-switch pair and a
// 1 kHz timer per CPU and fork churn for the wakeups and new tasks a real
// node has. And the probe's echo server is already running when the load
// comes, as a network function is: with these 16 hogs and the background,
// an echo server started after them answered at its idle speed under EEVDF
// (1,197 against 1,311 µs idle), one started before them 5.8x slower (8,669
// against 1,497), and 4 hogs alone gave 2.5x and 3.1x. The stressors are
// in stress-ng since long before 0.15 (the lab's, from the host's bookworm)
// and in trixie's 0.18.
func heavyBackground(cpus int) ([]string, int) {
	n := cpus * *bgScale
	args := []string{
		"--cpu", fmt.Sprint(6 * n), "--cpu-method", "matrixprod",
		"--switch", fmt.Sprint(n),
		"--timer", fmt.Sprint(n), "--timer-freq", "1000",
		"--fork", "1",
	}
	return args, 6*n + n + n + 1
}

// loadProfile is the profile -profile selected.
var loadProfile = profiles[0]

func profileNames() []string {
	var names []string
	for _, p := range profiles {
		names = append(names, p.name)
	}
	return names
}

func selectProfile(name string) (profile, error) {
	for _, p := range profiles {
		if p.name == name {
			return p, nil
		}
	}
	return profile{}, fmt.Errorf("-profile %q: unknown saturation profile (have %s)", name, strings.Join(profileNames(), ", "))
}

// backgroundArgs is the profile's background command line on cpus CPUs as
// the report records it ("" for none).
func (p profile) backgroundArgs(cpus int) string {
	if p.background == nil {
		return ""
	}
	args, _ := p.background(cpus)
	return "stress-ng " + strings.Join(args, " ")
}

// resultName is the stem of the profile's result files: sched for the
// default (as before profiles existed), sched-NAME for the others.
func resultName(profile string) string {
	if profile == "" || profile == profiles[0].name {
		return "sched"
	}
	return "sched-" + profile
}
