// SPDX-License-Identifier: Apache-2.0

package cmd

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

// swiftlane stats lists a strategy that matches nothing here with its
// reason, as the node's /metrics exports it.
func TestStatsShowsUnmatchable(t *testing.T) {
	metrics := `# HELP swiftlane_strategies_unmatchable 1 for each strategy that can match no process on this node, with the reason.
# TYPE swiftlane_strategies_unmatchable gauge
swiftlane_strategies_unmatchable{reason="selectors_without_pod_source",strategy="pods"} 1
# HELP swiftlane_strategy_processes Processes a strategy currently applies to, by class.
# TYPE swiftlane_strategy_processes gauge
swiftlane_strategy_processes{class="critical"} 2
`
	var out bytes.Buffer
	if err := printStats(&out, strings.NewReader(metrics)); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^strategies_unmatchable\{reason=selectors_without_pod_source,strategy=pods\}\s+1$`).MatchString(out.String()) {
		t.Errorf("stats:\n%s", out.String())
	}
}
