// SPDX-License-Identifier: Apache-2.0

// Package conformance is what `make test-conformance` shares between the lab
// VM, which runs the upstream e2e.test against the one-node cluster
// (test/vm/conformance_test.go), and the host, which turns each run's JUnit
// report into bench/results/conformance.json (cmd/report): the tests
// selected, the ones left out and why, and the results' layout.
//
// One run is a column: kube_proxy (the node's kube-proxy, iptables mode)
// and swiftlane (kube-proxy removed, `swiftlane lb` in its place). A test's
// row holds each column's "pass", "fail", "skip" or "not run".
package conformance

import (
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
)

// Focus selects the sig-network conformance tests: the Services ones and
// the rest of the group (endpoints, proxy, networking between pods, ...).
const Focus = `\[sig-network\].*\[Conformance\]`

// Skip is a group of selected tests the lab cannot run, and why.
type Skip struct {
	Pattern string // a regular expression on the test's full name
	Reason  string
}

// Skips are left out of every run, each with its reason: none now. (The
// DNS tests were, until mk/conformance-images.sh built the image of their
// second prober, glibc-dns-testing, and gave agnhost dig and getent.)
var Skips []Skip

// SkipRegexp is the --ginkgo.skip value for Skips, "" for none (then pass
// no --ginkgo.skip: an empty expression matches every test).
func SkipRegexp() string {
	var p []string
	for _, s := range Skips {
		p = append(p, s.Pattern)
	}
	return strings.Join(p, "|")
}

// Columns of the results, one per run, in order.
const (
	KubeProxy = "kube_proxy"
	Swiftlane = "swiftlane"
)

// Statuses of a test in a column.
const (
	Pass    = "pass"
	Fail    = "fail"
	Skipped = "skip"
	NotRun  = "not run"
)

// Test is one row of bench/results/conformance.json.
type Test struct {
	Name      string  `json:"name"`
	KubeProxy string  `json:"kube_proxy"`
	Swiftlane string  `json:"swiftlane"`
	Seconds   float64 `json:"seconds"` // the kube_proxy run's
	// Reason says why a test was skipped or, from the first failing run,
	// how it failed.
	Reason string `json:"reason,omitempty"`
}

// Results is bench/results/conformance.json.
type Results struct {
	Release string `json:"release"` // of the cluster and of e2e.test
	Focus   string `json:"focus"`
	Skip    string `json:"skip"`
	Tests   []Test `json:"tests"`
}

// Case is one spec of a JUnit report.
type Case struct {
	Name    string
	Status  string // Pass, Fail, Skipped or NotRun (interrupted in it)
	Seconds float64
	Message string // the failure's first line, or the skip's message
}

type junitCase struct {
	Name    string  `xml:"name,attr"`
	Status  string  `xml:"status,attr"`
	Time    float64 `xml:"time,attr"`
	Skipped *struct {
		Message string `xml:"message,attr"`
	} `xml:"skipped"`
	Failure *struct {
		Message string `xml:"message,attr"`
		Text    string `xml:",chardata"`
	} `xml:"failure"`
	Error *struct {
		Type    string `xml:"type,attr"`
		Message string `xml:"message,attr"`
		Text    string `xml:",chardata"`
	} `xml:"error"`
}

// ReadJUnit reads the report e2e.test writes with --report-dir
// (junit_01.xml). Ginkgo lists every spec of the suite, those the focus
// left out as skipped; the suite's own nodes (BeforeSuite, reports) are
// returned as failed cases when they failed, since then no spec ran.
func ReadJUnit(path string) ([]Case, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc struct {
		Suites []struct {
			Cases []junitCase `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("%s: not a JUnit report: %w", path, err)
	}
	var cases []Case
	for _, s := range doc.Suites {
		for _, jc := range s.Cases {
			name, spec := strings.CutPrefix(jc.Name, "[It] ")
			c := Case{Name: name, Seconds: jc.Time}
			switch {
			case jc.Error != nil && jc.Error.Type == "interrupted":
				// The run was stopped (SIGINT) in this spec.
				c.Status, c.Message = NotRun, "interrupted"
			case jc.Failure != nil:
				c.Status, c.Message = Fail, firstLine(jc.Failure.Message, jc.Failure.Text)
			case jc.Error != nil:
				c.Status, c.Message = Fail, firstLine(jc.Error.Message, jc.Error.Text)
			case jc.Skipped != nil || jc.Status == "skipped" || jc.Status == "pending":
				c.Status = Skipped
				if jc.Skipped != nil {
					c.Message = jc.Skipped.Message
				}
			default:
				c.Status = Pass
			}
			if !spec && c.Status != Fail {
				continue // a suite node that did its job
			}
			cases = append(cases, c)
		}
	}
	if len(cases) == 0 {
		return nil, fmt.Errorf("%s lists no test", path)
	}
	return cases, nil
}

// firstLine is the first non-empty line of the first non-empty text.
func firstLine(texts ...string) string {
	for _, t := range texts {
		for l := range strings.Lines(t) {
			if l = strings.TrimSpace(l); l != "" {
				return l
			}
		}
	}
	return ""
}

// Selected says whether a test is one Focus picks, and the skip reason if
// Skips leave it out.
func Selected(name string) (ok bool, skipReason string) {
	if !regexp.MustCompile(Focus).MatchString(name) {
		return false, ""
	}
	for _, s := range Skips {
		if regexp.MustCompile(s.Pattern).MatchString(name) {
			return true, s.Reason
		}
	}
	return true, ""
}

// Merge sets column for every selected test in cases: added to r (with
// every other column "not run") if r does not have it yet. A suite node's
// failure fails the run as a whole: it is returned as an error.
func (r *Results) Merge(column string, cases []Case) error {
	return r.MergeFocused(column, Focus, cases)
}

// MergeFocused is Merge for a run of the tests focus selects (e2e.test's
// --ginkgo.focus, a subset of Focus's): a selected test outside it keeps
// what r holds for it, so runs of parts fill one file; one r does not have
// yet is added "not run" for every column, with the reason.
func (r *Results) MergeFocused(column, focus string, cases []Case) error {
	if column != KubeProxy && column != Swiftlane {
		return fmt.Errorf("column %q: want %s or %s", column, KubeProxy, Swiftlane)
	}
	inRun, err := regexp.Compile(focus)
	if err != nil {
		return fmt.Errorf("focus %q: %w", focus, err)
	}
	var errs []error
	for _, c := range cases {
		ok, reason := Selected(c.Name)
		if !ok {
			if !strings.HasPrefix(c.Name, "[") || c.Status != Fail {
				continue
			}
			errs = append(errs, fmt.Errorf("%s failed: %s", c.Name, c.Message))
			continue
		}
		i := slices.IndexFunc(r.Tests, func(t Test) bool { return t.Name == c.Name })
		if i < 0 {
			r.Tests = append(r.Tests, Test{Name: c.Name, KubeProxy: NotRun, Swiftlane: NotRun})
			i = len(r.Tests) - 1
		}
		t := &r.Tests[i]
		if !inRun.MatchString(c.Name) {
			if t.KubeProxy == NotRun && t.Swiftlane == NotRun && t.Reason == "" {
				t.Reason = "outside the focus of the runs so far"
			}
			continue
		}
		// This run says again why, for its own column: only a reason the
		// other column's run gave stays.
		other := KubeProxy
		if column == KubeProxy {
			other = Swiftlane
		}
		if !strings.HasPrefix(t.Reason, other+": ") {
			t.Reason = ""
		}
		status := c.Status
		if status == Skipped && reason == "" && c.Message == "skipped" {
			// Selected but never reached: a spec that skips itself says
			// why ("skipped - ..."); this one was left when the run was
			// interrupted.
			status = NotRun
		}
		switch {
		case status == Skipped && reason != "":
			t.Reason = reason
		case status == Skipped:
			// Skipped by the test itself (e.g. it needs two nodes).
			if t.Reason == "" {
				t.Reason = c.Message
			}
		case status == Fail && t.Reason == "":
			t.Reason = column + ": " + c.Message
		case status == NotRun && t.Reason == "":
			t.Reason = column + ": the run was stopped before this test ended"
		}
		if column == KubeProxy {
			t.KubeProxy, t.Seconds = status, c.Seconds
		} else {
			t.Swiftlane = status
		}
	}
	slices.SortFunc(r.Tests, func(a, b Test) int { return strings.Compare(a.Name, b.Name) })
	return errors.Join(errs...)
}

// Summary is one line per column: how many tests passed, failed, were
// skipped, and for swiftlane which tests kube-proxy passed and it did not.
func (r *Results) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "conformance (%s, %d sig-network tests):", r.Release, len(r.Tests))
	for _, col := range []string{KubeProxy, Swiftlane} {
		n := map[string]int{}
		var regressed []string
		for _, t := range r.Tests {
			s := t.KubeProxy
			if col == Swiftlane {
				s = t.Swiftlane
				if t.KubeProxy == Pass && s != Pass && s != NotRun {
					regressed = append(regressed, t.Name)
				}
			}
			n[s]++
		}
		if n[NotRun] == len(r.Tests) {
			fmt.Fprintf(&b, " %s not run;", col)
			continue
		}
		fmt.Fprintf(&b, " %s %d pass, %d fail, %d skip", col, n[Pass], n[Fail], n[Skipped])
		if n[NotRun] > 0 {
			fmt.Fprintf(&b, ", %d not run", n[NotRun])
		}
		if len(regressed) > 0 {
			fmt.Fprintf(&b, " (kube-proxy passes, swiftlane does not: %s)", strings.Join(regressed, "; "))
		}
		b.WriteString(";")
	}
	return strings.TrimSuffix(b.String(), ";")
}

// Read reads a results file; a missing one is empty results.
func Read(path string) (*Results, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return &Results{}, nil
	}
	if err != nil {
		return nil, err
	}
	var r Results
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &r, nil
}

// Write writes r as indented JSON.
func (r *Results) Write(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
