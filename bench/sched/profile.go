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
}

// profiles are what -profile selects; the first is the default.
var profiles = []profile{
	{"default", "two CPU hogs per CPU", nil},
	{"heavy", "two CPU hogs per CPU, and per CPU two bursty service workers (3 ms busy, then asleep as long), " +
		"a context-switch pair and a pipe pair at full speed, a 1 kHz timer, 16 short sleepers; one fork loop",
		heavyBackground},
}

// heavyBackground is a busy node beside the hogs, chosen for what degrades
// EEVDF's wakeup latency. EEVDF places a waking task at the queue's average
// vruntime less the lag it kept, with a deadline one slice later, and runs
// the eligible task with the earliest deadline. Against CPU hogs alone the
// probe wins every wakeup: the hogs have used their share (negative lag), the
// probe has not, so its deadline is the earliest and it waits at most for
// the running hog's protected slice (2x idle). What takes that edge away is
// many tasks in the probe's own position: ones that sleep briefly and wake
// with positive lag too, whose deadlines then compete with the probe's and
// which, once picked, run a burst the probe waits out. So: bursty service
// workers (busy 3 ms, asleep about as long: ahead of the probe and long once
// picked), messaging pairs that wake each other continuously (a pipe and a
// context-switch pair per CPU), a timer every millisecond per CPU, short
// sleepers, and fork churn (each new task is placed and enqueued). The
// stressors are in stress-ng since long before 0.15 (the lab's, from the
// host's bookworm) and in trixie's 0.18.
func heavyBackground(cpus int) ([]string, int) {
	n := cpus * *bgScale
	args := []string{
		"--cpu", fmt.Sprint(2 * n), "--cpu-load", "50", "--cpu-load-slice", "3", "--cpu-method", "int64",
		"--switch", fmt.Sprint(n),
		"--pipe", fmt.Sprint(n),
		"--timer", fmt.Sprint(n), "--timer-freq", "1000",
		"--sleep", fmt.Sprint(n), "--sleep-max", "16",
		"--fork", "1",
	}
	return args, 2*n + n + n + n + n + 1
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
