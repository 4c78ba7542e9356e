// SPDX-License-Identifier: Apache-2.0

// Command report turns one conformance run's JUnit report into its column
// of bench/results/conformance.json and prints the summary line (make
// test-conformance):
//
//	go run ./test/conformance/cmd/report -junit build/conformance/kube_proxy/junit_01.xml \
//	    -column kube_proxy -release v1.36.3 -out bench/results/conformance.json
//
// The kube_proxy run starts the file afresh (every other column "not run");
// a later column's run is merged into it.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/swiftlane/swiftlane/test/conformance"
)

func main() {
	junit := flag.String("junit", "", "JUnit report of e2e.test (--report-dir's junit_01.xml)")
	column := flag.String("column", conformance.KubeProxy, "the run's column: "+conformance.KubeProxy+" or "+conformance.Swiftlane)
	release := flag.String("release", "", "Kubernetes release of the cluster and e2e.test")
	out := flag.String("out", "bench/results/conformance.json", "results file")
	focus := flag.String("focus", "", "the run's --ginkgo.focus if it ran a part of the tests (CONFORMANCE_FOCUS): the file's other results stay")
	flag.Parse()
	if err := run(*junit, *column, *release, *focus, *out); err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
}

func run(junit, column, release, focus, out string) error {
	if junit == "" {
		return fmt.Errorf("-junit is required: the junit_01.xml e2e.test wrote")
	}
	cases, err := conformance.ReadJUnit(junit)
	if err != nil {
		return err
	}
	// A whole kube_proxy pass starts the file again; a swiftlane pass, or
	// a part of either, fills in what the file has.
	r := &conformance.Results{}
	if focus == "" {
		focus = conformance.Focus
	}
	if column != conformance.KubeProxy || focus != conformance.Focus {
		if r, err = conformance.Read(out); err != nil {
			return err
		}
	}
	if release != "" {
		r.Release = release
	}
	r.Focus, r.Skip = conformance.Focus, conformance.SkipRegexp()
	mergeErr := r.MergeFocused(column, focus, cases)
	if err := r.Write(out); err != nil {
		return err
	}
	fmt.Println(r.Summary())
	return mergeErr
}
