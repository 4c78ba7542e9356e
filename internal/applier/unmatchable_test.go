// SPDX-License-Identifier: Apache-2.0

package applier

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/swiftlane/swiftlane/internal/strategy"
)

// A selectors strategy can never match on a plain host, and a cgroup_path
// strategy whose directory is missing matches nothing: the Applier lists
// both with the reason, logs them once when they appear, and drops them
// when they go.
func TestUnmatchable(t *testing.T) {
	high := strategy.High
	gnb := strategy.Strategy{Name: "gnb", Class: &high, CommandRegex: "nr-gnb"}
	pods := strategy.Strategy{Name: "pods", Class: &high, Selectors: []strategy.Selector{{Key: "app", Value: "ueransim"}}}
	upf := strategy.Strategy{Name: "upf", Class: &high, CgroupPath: "/upf.slice"}

	var logs bytes.Buffer
	a := New(NewRecorder(), "/proc", "/sys/fs/cgroup", slog.New(slog.NewTextHandler(&logs, nil)))
	a.SetCgroupIDFunc(func(dir string) (uint64, error) {
		if strings.HasSuffix(dir, "/upf.slice") {
			return 0, errors.New("no such file or directory")
		}
		return 7, nil
	})
	s1, _ := strategy.Compile([]strategy.Strategy{gnb, pods, upf})
	if err := a.SetStrategies(s1); err != nil {
		t.Fatal(err)
	}
	got := a.Unmatchable()
	if len(got) != 2 || got[0].Strategy != "pods" || got[1].Strategy != "upf" || got[1].Reason != strategy.ReasonCgroupMissing {
		t.Fatalf("Applier.Unmatchable: %+v", got)
	}
	for _, want := range []string{"strategy=pods reason=selectors_without_pod_source", "strategy=upf reason=cgroup_not_found"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs.String())
		}
	}
	// The same problems again are not logged again.
	n := strings.Count(logs.String(), "matches no process here")
	if err := a.SetStrategies(s1); err != nil {
		t.Fatal(err)
	}
	if m := strings.Count(logs.String(), "matches no process here"); m != n {
		t.Errorf("logged again: %d lines, then %d", n, m)
	}
	// Fixed: nothing unmatchable is left.
	s2, _ := strategy.Compile([]strategy.Strategy{gnb})
	if err := a.SetStrategies(s2); err != nil {
		t.Fatal(err)
	}
	if got := a.Unmatchable(); len(got) != 0 {
		t.Errorf("after the fix: %+v", got)
	}
}
