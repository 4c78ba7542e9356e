// SPDX-License-Identifier: Apache-2.0

package strategy

import (
	"errors"
	"strings"
	"testing"
)

func class(c Class) *Class { return &c }

func TestMatchUsesFullCommandLineNotComm(t *testing.T) {
	set, err := Compile([]Strategy{
		{Name: "gnb", Class: class(Critical), CommandRegex: `nr-gnb -c /etc/gnb\.yaml`},
		{Name: "by-exe", Class: class(High), CommandRegex: `^/usr/local/bin/upf-with-a-very-long-name$`},
		{Name: "kthread", Class: class(High), CommandRegex: `^ksoftirqd/`},
	})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		p    Process
		want int
	}{
		{Process{PID: 1, Cmdline: "nr-gnb -c /etc/gnb.yaml", Comm: "nr-gnb"}, 0},
		{Process{PID: 2, Cmdline: "upf", Exe: "/usr/local/bin/upf-with-a-very-long-name", Comm: "upf-with-a-very"}, 1},
		{Process{PID: 3, Comm: "ksoftirqd/0"}, 2},
		{Process{PID: 4, Cmdline: "bash", Comm: "ksoftirqd/0"}, -1}, // comm only counts for kernel threads
	}
	for _, c := range cases {
		got, ok := set.Match(c.p)
		if !ok {
			got = -1
		}
		if got != c.want {
			t.Errorf("%+v: matched %d, want %d", c.p, got, c.want)
		}
	}
}

func TestMatchersCombineAndSelectorsNeedPods(t *testing.T) {
	set, err := Compile([]Strategy{
		{Class: class(High), PID: 10, CommandRegex: "x"},
		{Class: class(High), Selectors: []Selector{{Key: "app", Value: "gnb"}}},
		{Class: class(Background), CgroupPath: "/batch.slice"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := set.Match(Process{PID: 10, Cmdline: "y"}); ok {
		t.Error("pid matched but regex did not: must not match")
	}
	if i, ok := set.Match(Process{PID: 11, Cmdline: "x", Cgroup: "/batch.slice/job-1.scope"}); !ok || i != 2 {
		t.Errorf("cgroup descendant: got %d %v", i, ok)
	}
	if _, ok := set.Match(Process{PID: 12, Cmdline: "x", Cgroup: "/batch.slicer"}); ok {
		t.Error("cgroup prefix without a path boundary must not match")
	}
}

func TestPriorityAndClassMustAgree(t *testing.T) {
	yes := true
	s := Strategy{Class: class(Background), Priority: &yes, PID: 1}
	err := s.Validate()
	if fe, ok := err.(*FieldError); !ok || fe.Field != "priority" {
		t.Fatalf("got %v", err)
	}
}

func TestCgroupV1StrategyMatchesPerProcess(t *testing.T) {
	c := Critical
	set, err := Compile([]Strategy{{Class: &c, CgroupPath: "/kubepods/burstable/podu", CgroupV1: true}})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := set.Match(Process{PID: 1, CgroupV1: "/kubepods/burstable/podu/c1", Cgroup: "/"}); !ok {
		t.Error("a process in the pod's v1 cpu cgroup should match")
	}
	if _, ok := set.Match(Process{PID: 2, Cgroup: "/kubepods/burstable/podu/c1"}); ok {
		t.Error("a v1 strategy must not match on the v2 path")
	}
}

// A lone brace is refused with the fix: RE2 would take it as a literal, the
// ECMA-262 dialect of the API's schema (format: regex) as an error.
func TestCommandRegexLoneBrace(t *testing.T) {
	critical := Critical
	for re, lone := range map[string]int{
		"x{2}": -1, "x{2,}": -1, "x{2,5}": -1, `\{`: -1, `a\}`: -1, "[{}]": -1, "[]{]": -1, "[^]}]": -1, `\p{Greek}+`: -1, `\x{41}`: -1,
		"{": 0, "a{": 1, "a}": 1, "a{,3}": 1, "a{x}": 1, "nr-gnb{": 6, "\u00bf{\u0005": 2,
	} {
		if got := loneBrace(re); got != lone {
			t.Errorf("loneBrace(%q) = %d, want %d", re, got, lone)
		}
		s := Strategy{Name: "s", Class: &critical, CommandRegex: re}
		err := s.Validate()
		if (err != nil) != (lone >= 0) {
			t.Errorf("Validate(%q): %v, want an error: %v", re, err, lone >= 0)
		}
		var fe *FieldError
		if err != nil && (!errors.As(err, &fe) || fe.Field != "command_regex" || !strings.Contains(err.Error(), `escape it as \`)) {
			t.Errorf("Validate(%q): %v, want a command_regex error saying how to escape it", re, err)
		}
	}
}
