// SPDX-License-Identifier: Apache-2.0

package strategy

import (
	"strings"
	"testing"
)

// A selectors strategy can never match on a plain host: it is listed with
// the reason and the fix, under its name or, without one, its index.
func TestUnmatchable(t *testing.T) {
	high := High
	gnb := Strategy{Name: "gnb", Class: &high, CommandRegex: "nr-gnb"}
	pods := Strategy{Name: "pods", Class: &high, Selectors: []Selector{{Key: "app", Value: "ueransim"}}}
	both := Strategy{Name: "both", Class: &high, CommandRegex: "x", Selectors: []Selector{{Key: "app"}}}
	unnamed := Strategy{Class: &high, Selectors: []Selector{{Key: "app"}}}

	set, err := Compile([]Strategy{gnb, pods, both, unnamed})
	if err != nil {
		t.Fatal(err)
	}
	got := set.Unmatchable()
	if len(got) != 3 || got[0].Strategy != "pods" || got[0].Index != 1 || got[1].Strategy != "both" || got[2].Strategy != "strategies[3]" ||
		got[0].Reason != ReasonNoPodSource || !strings.Contains(got[0].Fix, "command_regex, pid or cgroup_path") {
		t.Fatalf("Set.Unmatchable: %+v", got)
	}
	if l := set.Label(4); l != "" {
		t.Errorf("Label out of range = %q, want empty", l)
	}
	// Labels name what a name cannot (the Kubernetes agent's expansions);
	// "" keeps the name; the set labelled is a copy.
	labelled := set.WithLabels([]string{"", "team/pods", "", "swiftlane-system/any (pod team/a)"})
	if got := labelled.Unmatchable(); len(got) != 3 || got[0].Strategy != "team/pods" || got[1].Strategy != "both" || got[2].Strategy != "swiftlane-system/any (pod team/a)" {
		t.Errorf("labelled Unmatchable: %+v", got)
	}
	if labelled.Label(0) != "gnb" || set.Label(1) != "pods" {
		t.Errorf("labels: %q %q, want the name kept and the original set unchanged", labelled.Label(0), set.Label(1))
	}
}
