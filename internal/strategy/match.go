// SPDX-License-Identifier: Apache-2.0

package strategy

import (
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"
)

// Process is what matching needs to know about a process (internal/applier
// reads it from procfs).
type Process struct {
	PID     int    // thread-group id
	Cmdline string // argv joined by spaces; empty for kernel threads
	Exe     string // resolved executable path; empty if unreadable
	Comm    string // kernel thread name (15 chars at most)
	Cgroup  string // cgroup v2 path, e.g. /system.slice/foo.service
	// CgroupV1 is the path in the v1 cpu hierarchy, on hosts where it exists.
	CgroupV1 string
}

// Set is a validated, compiled list of strategies. The first strategy that
// matches a process wins, so order expresses precedence.
type Set struct {
	items []compiled
}

type compiled struct {
	s  Strategy
	re *regexp.Regexp
	// label, when set (WithLabels), names it in logs and reports.
	label string
}

// Compile validates and compiles strategies; the error names the index and field.
func Compile(list []Strategy) (*Set, error) {
	set := &Set{items: make([]compiled, 0, len(list))}
	for i, s := range list {
		if err := s.Validate(); err != nil {
			return nil, &IndexError{Index: i, Err: err}
		}
		c := compiled{s: s}
		if s.CommandRegex != "" {
			c.re = regexp.MustCompile(s.CommandRegex) // validated above
		}
		set.items = append(set.items, c)
	}
	return set, nil
}

// IndexError locates a bad strategy in a list.
type IndexError struct {
	Index int
	Err   error
}

func (e *IndexError) Error() string { return fmt.Sprintf("strategies[%d].%v", e.Index, e.Err) }
func (e *IndexError) Unwrap() error { return e.Err }

// Len is the number of strategies.
func (s *Set) Len() int { return len(s.items) }

// Append returns the strategies of s followed by those of more (either may
// be nil), without compiling them again.
func (s *Set) Append(more *Set) *Set {
	out := &Set{}
	for _, x := range []*Set{s, more} {
		if x != nil {
			out.items = append(out.items, x.items...)
		}
	}
	return out
}

// WithLabels returns s with strategy i named labels[i] by Label ("" keeps
// its name), for strategies whose names say too little, such as the
// Kubernetes agent's unnamed per-pod expansions of one SchedulingStrategy.
func (s *Set) WithLabels(labels []string) *Set {
	out := &Set{items: slices.Clone(s.items)}
	for i := range out.items[:min(len(labels), len(out.items))] {
		out.items[i].label = labels[i]
	}
	return out
}

// At returns strategy i.
func (s *Set) At(i int) Strategy { return s.items[i].s }

// Label names strategy i in logs and status: its label (WithLabels), its
// name, or strategies[i] for one without (names may be empty); "" when i
// is out of range.
func (s *Set) Label(i int) string {
	if i < 0 || i >= s.Len() {
		return ""
	}
	if l := s.items[i].label; l != "" {
		return l
	}
	if n := s.items[i].s.Name; n != "" {
		return n
	}
	return fmt.Sprintf("strategies[%d]", i)
}

// Match returns the index of the first strategy matching p. Strategies with
// pod selectors never match here: pods are resolved by the agent.
func (s *Set) Match(p Process) (int, bool) {
	for i := range s.items {
		if s.items[i].matches(p) {
			return i, true
		}
	}
	return -1, false
}

// MatchFrom is Match over the strategies from index from on.
func (s *Set) MatchFrom(p Process, from int) (int, bool) {
	for i := max(from, 0); i < len(s.items); i++ {
		if s.items[i].matches(p) {
			return i, true
		}
	}
	return -1, false
}

// SamePrefix is how many leading strategies s and other share: what they
// matched, they still match, so only the rest needs matching again.
func (s *Set) SamePrefix(other *Set) int {
	n := 0
	for n < len(s.items) && n < len(other.items) && reflect.DeepEqual(s.items[n].s, other.items[n].s) {
		n++
	}
	return n
}

func (c *compiled) matches(p Process) bool {
	s := &c.s
	if len(s.Selectors) > 0 {
		return false
	}
	if s.PID != 0 && s.PID != p.PID {
		return false
	}
	if s.CgroupPath != "" {
		if s.CgroupV1 {
			if p.CgroupV1 == "" || !underCgroup(p.CgroupV1, s.CgroupPath) {
				return false
			}
		} else if !underCgroup(p.Cgroup, s.CgroupPath) {
			return false
		}
	}
	if c.re != nil {
		hit := (p.Cmdline != "" && c.re.MatchString(p.Cmdline)) ||
			(p.Exe != "" && c.re.MatchString(p.Exe)) ||
			(p.Cmdline == "" && p.Comm != "" && c.re.MatchString(p.Comm))
		if !hit {
			return false
		}
	}
	return true
}

func underCgroup(procCg, strat string) bool {
	return procCg == strat || strings.HasPrefix(procCg, strings.TrimSuffix(strat, "/")+"/")
}
