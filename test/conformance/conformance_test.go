// SPDX-License-Identifier: Apache-2.0

package conformance

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A report shaped like the one e2e.test writes: the suite's own nodes, a
// spec outside the focus (skipped by the filter), and selected specs that
// passed, failed, skipped themselves or were left out by Skips.
const report = `<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="7" disabled="0" errors="0" failures="1" time="99.5">
  <testsuite name="Kubernetes e2e suite" package="/" tests="7" failures="1" skipped="4" time="99.5">
    <testcase name="[SynchronizedBeforeSuite]" classname="Kubernetes e2e suite" status="passed" time="3.2"></testcase>
    <testcase name="[It] [sig-apps] Deployment should run [Conformance]" classname="Kubernetes e2e suite" status="skipped" time="0"><skipped message="skipped"></skipped></testcase>
    <testcase name="[It] [sig-network] Services should serve a basic endpoint from pods [Conformance]" classname="Kubernetes e2e suite" status="passed" time="41.5"></testcase>
    <testcase name="[It] [sig-network] Services should have session affinity work for NodePort service [LinuxOnly] [Conformance]" classname="Kubernetes e2e suite" status="failed" time="52"><failure type="failed">[FAILED] affinity broke&#xA;at service.go:1&#xA;</failure></testcase>
    <testcase name="[It] [sig-network] Networking should reach two nodes [Conformance]" classname="Kubernetes e2e suite" status="skipped" time="0.4"><skipped message="skipped - requires at least 2 nodes"></skipped></testcase>
    <testcase name="[It] [sig-network] DNS should provide DNS for services [Conformance]" classname="Kubernetes e2e suite" status="skipped" time="0"><skipped message="skipped"></skipped></testcase>
    <testcase name="[SynchronizedAfterSuite]" classname="Kubernetes e2e suite" status="passed" time="0.1"></testcase>
  </testsuite>
</testsuites>
`

func writeReport(t *testing.T, xml string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "junit_01.xml")
	if err := os.WriteFile(p, []byte(xml), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// dnsSkip leaves the DNS tests out for a test's duration, as Skips did
// while their image was not built.
var dnsSkip = Skip{Pattern: `\[sig-network\] DNS `, Reason: "needs an image not built here"}

func withDNSSkip(t *testing.T) {
	saved := Skips
	Skips = []Skip{dnsSkip}
	t.Cleanup(func() { Skips = saved })
}

// kubeProxyRun is the results of a kube_proxy pass that wrote the JUnit
// report xml, with dnsSkip in Skips.
func kubeProxyRun(t *testing.T, xml string) *Results {
	t.Helper()
	withDNSSkip(t)
	cases, err := ReadJUnit(writeReport(t, xml))
	if err != nil {
		t.Fatal(err)
	}
	r := &Results{Release: "v1.36.3"}
	if err := r.Merge(KubeProxy, cases); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestMergeTwoRuns(t *testing.T) {
	r := kubeProxyRun(t, report)
	want := map[string]Test{
		"[sig-network] Services should serve a basic endpoint from pods [Conformance]": {KubeProxy: Pass, Swiftlane: NotRun, Seconds: 41.5},
		"[sig-network] Services should have session affinity work for NodePort service [LinuxOnly] [Conformance]": {KubeProxy: Fail, Swiftlane: NotRun, Seconds: 52,
			Reason: "kube_proxy: [FAILED] affinity broke"},
		"[sig-network] Networking should reach two nodes [Conformance]":   {KubeProxy: Skipped, Swiftlane: NotRun, Seconds: 0.4, Reason: "skipped - requires at least 2 nodes"},
		"[sig-network] DNS should provide DNS for services [Conformance]": {KubeProxy: Skipped, Swiftlane: NotRun, Reason: dnsSkip.Reason},
	}
	if len(r.Tests) != len(want) {
		t.Fatalf("%d tests, want %d (the focus only): %+v", len(r.Tests), len(want), r.Tests)
	}
	for _, got := range r.Tests {
		w, ok := want[got.Name]
		w.Name = got.Name
		if !ok || got != w {
			t.Errorf("got %+v\nwant %+v", got, w)
		}
	}
	if s := r.Summary(); s != "conformance (v1.36.3, 4 sig-network tests): kube_proxy 1 pass, 1 fail, 2 skip; swiftlane not run" {
		t.Errorf("summary %q", s)
	}

	// The second run: swiftlane passes the basic test, fails affinity too,
	// and its regression on a test kube-proxy passed is named.
	second := strings.Replace(report, `status="failed" time="52"><failure type="failed">[FAILED] affinity broke&#xA;at service.go:1&#xA;</failure>`, `status="passed" time="50">`, 1)
	second = strings.Replace(second, `from pods [Conformance]" classname="Kubernetes e2e suite" status="passed" time="41.5">`,
		`from pods [Conformance]" classname="Kubernetes e2e suite" status="failed" time="60"><failure>no route</failure>`, 1)
	cases, err := ReadJUnit(writeReport(t, second))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Merge(Swiftlane, cases); err != nil {
		t.Fatal(err)
	}
	if s := r.Summary(); !strings.HasSuffix(s, "swiftlane 1 pass, 1 fail, 2 skip (kube-proxy passes, swiftlane does not: [sig-network] Services should serve a basic endpoint from pods [Conformance])") {
		t.Errorf("summary %q", s)
	}

	out := filepath.Join(t.TempDir(), "conformance.json")
	if err := r.Write(out); err != nil {
		t.Fatal(err)
	}
	back, err := Read(out)
	if err != nil || len(back.Tests) != 4 || back.Tests[0] != r.Tests[0] {
		t.Fatalf("read back %+v, %v", back, err)
	}
}

// A run stopped by SIGINT (ginkgo then writes its report): the spec it was
// in and the selected specs it never reached are "not run", not failed or
// skipped.
func TestInterruptedRun(t *testing.T) {
	withDNSSkip(t)
	cut := strings.Replace(report, `status="failed" time="52"><failure type="failed">[FAILED] affinity broke&#xA;at service.go:1&#xA;</failure>`,
		`status="interrupted" time="30"><error type="interrupted">Interrupted by User</error>`, 1)
	cut = strings.Replace(cut, `status="passed" time="41.5"></testcase>`, `status="skipped" time="0"><skipped message="skipped"></skipped></testcase>`, 1)
	cases, err := ReadJUnit(writeReport(t, cut))
	if err != nil {
		t.Fatal(err)
	}
	r := &Results{Release: "v1.36.3"}
	if err := r.Merge(KubeProxy, cases); err != nil {
		t.Fatal(err)
	}
	if s := r.Summary(); s != "conformance (v1.36.3, 4 sig-network tests): kube_proxy 0 pass, 0 fail, 2 skip, 2 not run; swiftlane not run" {
		t.Errorf("summary %q", s)
	}
}

// A failed suite node means no spec ran: the run fails as a whole.
func TestSuiteFailure(t *testing.T) {
	bad := strings.Replace(report, `<testcase name="[SynchronizedBeforeSuite]" classname="Kubernetes e2e suite" status="passed" time="3.2"></testcase>`,
		`<testcase name="[SynchronizedBeforeSuite]" classname="Kubernetes e2e suite" status="failed" time="3.2"><failure>nodes not ready</failure></testcase>`, 1)
	cases, err := ReadJUnit(writeReport(t, bad))
	if err != nil {
		t.Fatal(err)
	}
	err = (&Results{}).Merge(KubeProxy, cases)
	if err == nil || !strings.Contains(err.Error(), "[SynchronizedBeforeSuite] failed: nodes not ready") {
		t.Fatalf("merge: %v, want the suite node's failure", err)
	}
	if err := (&Results{}).Merge("iptables", cases); err == nil || !strings.Contains(err.Error(), `column "iptables"`) {
		t.Fatalf("unknown column: %v", err)
	}
	if _, err := ReadJUnit(writeReport(t, "<html>")); err == nil {
		t.Fatal("a non-JUnit file was read")
	}
}

// A run of a part (CONFORMANCE_FOCUS) replaces its tests' results and
// leaves the others' as an earlier run left them.
func TestMergeFocusedRun(t *testing.T) {
	r := kubeProxyRun(t, report)
	// Affinity again, alone: it passes now; the basic test, outside this
	// focus, was skipped by the filter and keeps its pass.
	again := strings.Replace(report, `status="failed" time="52"><failure type="failed">[FAILED] affinity broke&#xA;at service.go:1&#xA;</failure>`, `status="passed" time="48">`, 1)
	again = strings.Replace(again, `status="passed" time="41.5"></testcase>`, `status="skipped" time="0"><skipped message="skipped"></skipped></testcase>`, 1)
	cases, err := ReadJUnit(writeReport(t, again))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.MergeFocused(KubeProxy, `Services\s.*affinity`, cases); err != nil {
		t.Fatal(err)
	}
	// The DNS test, no longer skipped, passes in a run of its own: the
	// skip's reason goes with the skip.
	Skips = nil
	dns := strings.Replace(report, `DNS should provide DNS for services [Conformance]" classname="Kubernetes e2e suite" status="skipped" time="0"><skipped message="skipped"></skipped>`,
		`DNS should provide DNS for services [Conformance]" classname="Kubernetes e2e suite" status="passed" time="30">`, 1)
	dnsCases, err := ReadJUnit(writeReport(t, dns))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.MergeFocused(KubeProxy, `\]\sDNS\s`, dnsCases); err != nil {
		t.Fatal(err)
	}
	want := map[string]Test{
		"[sig-network] Services should serve a basic endpoint from pods [Conformance]":                            {KubeProxy: Pass, Swiftlane: NotRun, Seconds: 41.5},
		"[sig-network] Services should have session affinity work for NodePort service [LinuxOnly] [Conformance]": {KubeProxy: Pass, Swiftlane: NotRun, Seconds: 48},
		"[sig-network] Networking should reach two nodes [Conformance]":                                           {KubeProxy: Skipped, Swiftlane: NotRun, Seconds: 0.4, Reason: "skipped - requires at least 2 nodes"},
		"[sig-network] DNS should provide DNS for services [Conformance]":                                         {KubeProxy: Pass, Swiftlane: NotRun, Seconds: 30},
	}
	for _, got := range r.Tests {
		w := want[got.Name]
		w.Name = got.Name
		if got != w {
			t.Errorf("got %+v\nwant %+v", got, w)
		}
	}

	// A test the file does not have yet, outside the focus: listed, not run, and why.
	r = &Results{}
	if err := r.MergeFocused(Swiftlane, `Services\s.*affinity`, cases); err != nil {
		t.Fatal(err)
	}
	for _, got := range r.Tests {
		if strings.Contains(got.Name, "basic endpoint") && (got.Swiftlane != NotRun || got.Reason != "outside the focus of the runs so far") {
			t.Errorf("a test outside the focus: %+v", got)
		}
	}
	if err := r.MergeFocused(Swiftlane, `Services(`, cases); err == nil || !strings.Contains(err.Error(), "focus") {
		t.Errorf("a focus that is no regular expression: %v", err)
	}
}
