// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/swiftlane/swiftlane/bench/internal/benchlab"
)

// TortureKernel tallies the bench-torture runs on one kernel. A run is one
// boot running TestTorture (test/vm/torture_test.go: every mode and
// strategy case); it survived when the test passed. A boot that never
// reached the test (the lab failed) is a lab error, not a run.
type TortureKernel struct {
	Alias     string                 `json:"alias,omitempty"`
	Runs      int                    `json:"runs"`
	Survived  int                    `json:"survived"`
	LabErrors int                    `json:"lab_errors,omitempty"`
	Cases     map[string]TortureCase `json:"cases,omitempty"`
	Failures  []string               `json:"failures,omitempty"`
}

// TortureCase tallies one subtest of TestTorture (e.g. kernel/strategies).
type TortureCase struct {
	Runs     int `json:"runs"`
	Survived int `json:"survived"`
}

// tortureModes are the scheduler modes the torture goal asks for.
var tortureModes = []string{"kernel", "userspace"}

// coversModes reports whether every mode had a case (mode/…) run at least
// runs times: a tally of kernel mode alone says nothing of user-space mode.
func (k TortureKernel) coversModes(modes []string, runs int) bool {
	for _, m := range modes {
		found := false
		for name, c := range k.Cases {
			if strings.HasPrefix(name, m+"/") && c.Runs >= runs {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

var (
	tortureKernelRE = regexp.MustCompile(`(?m)^torture-kernel: (\S+)`)
	labExitRE       = regexp.MustCompile(`(?m)^lab-exit: (\d+)`)
	testResultRE    = regexp.MustCompile(`(?m)^\s*--- (PASS|FAIL): TestTorture(/\S+)? \(`)
)

// tallyTorture reads DIR/<kernel alias>/run-*.log, as mk/bench-torture.sh
// writes them, and writes {kernel release: TortureKernel} to out.
func tallyTorture(dir, out string) error {
	logs, err := filepath.Glob(filepath.Join(dir, "*", "run-*.log"))
	if err != nil {
		return err
	}
	if len(logs) == 0 {
		return fmt.Errorf("no %s/*/run-*.log: run `make bench-torture`", dir)
	}
	sort.Strings(logs)
	byAlias := map[string]*TortureKernel{}
	release := map[string]string{}
	for _, path := range logs {
		alias := filepath.Base(filepath.Dir(path))
		k := byAlias[alias]
		if k == nil {
			k = &TortureKernel{Alias: alias, Cases: map[string]TortureCase{}}
			byAlias[alias] = k
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if m := tortureKernelRE.FindSubmatch(b); m != nil {
			release[alias] = string(m[1])
		}
		tallyRun(k, path, b)
	}
	// Two aliases can name one kernel (older and newest, when backports
	// has a single sched_ext kernel left): their runs add up.
	res := map[string]*TortureKernel{}
	for _, alias := range sortedKeys(byAlias) {
		k, name := byAlias[alias], alias
		if r := release[alias]; r != "" {
			name = r
		}
		if prev := res[name]; prev != nil {
			prev.Alias += "," + alias
			prev.Runs += k.Runs
			prev.Survived += k.Survived
			prev.LabErrors += k.LabErrors
			prev.Failures = append(prev.Failures, k.Failures...)
			for c, n := range k.Cases {
				p := prev.Cases[c]
				p.Runs += n.Runs
				p.Survived += n.Survived
				prev.Cases[c] = p
			}
			continue
		}
		res[name] = k
	}
	for _, name := range sortedKeys(res) {
		k := res[name]
		fmt.Printf("torture %s (%s): %d of %d runs survived, %d lab errors\n", name, k.Alias, k.Survived, k.Runs, k.LabErrors)
		for _, f := range k.Failures {
			fmt.Println("  ", f)
		}
	}
	return benchlab.WriteJSON(out, res)
}

// tallyRun adds one run's log to k.
func tallyRun(k *TortureKernel, path string, b []byte) {
	exit := -1
	if m := labExitRE.FindSubmatch(b); m != nil {
		exit, _ = strconv.Atoi(string(m[1]))
	}
	if !strings.Contains(string(b), "=== RUN   TestTorture") {
		k.LabErrors++
		return
	}
	k.Runs++
	passed := false
	var failed []string
	for _, m := range testResultRE.FindAllSubmatch(b, -1) {
		sub := strings.TrimPrefix(string(m[2]), "/")
		ok := string(m[1]) == "PASS"
		if sub == "" {
			passed = ok
			continue
		}
		c := k.Cases[sub]
		c.Runs++
		if ok {
			c.Survived++
		} else {
			failed = append(failed, sub)
		}
		k.Cases[sub] = c
	}
	if passed && exit == 0 {
		k.Survived++
		return
	}
	why := fmt.Sprintf("exit %d", exit)
	switch {
	case exit == 124:
		why = "the VM run timed out (wedged guest?)"
	case exit == 125:
		why = "the guest died or the VM failed midway (exit 125)"
	case exit == -1:
		why = "no exit status in the log"
	}
	if len(failed) > 0 {
		why += "; failed: " + strings.Join(failed, ", ")
	}
	k.Failures = append(k.Failures, fmt.Sprintf("%s: %s", path, why))
}
