// SPDX-License-Identifier: Apache-2.0

// Package strategy says which processes get which scheduling class: the
// Strategy type shared by the config file, the API and the agent, the
// matching of processes against strategies, and the Applier that keeps the
// scheduler's maps in step with the processes on this machine.
package strategy

import (
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"strings"

	"gopkg.in/yaml.v3"
)

// Class is a scheduling class, most urgent first. The values are the BPF
// scheduler's (enum swl_class in internal/sched/bpf/intf.h).
type Class uint32

const (
	// Critical tasks wake onto an idle CPU or preempt a non-critical task,
	// and are dispatched before everything else, within a CPU budget.
	Critical Class = 0
	// High tasks age 4x slower than normal ones.
	High Class = 1
	// Normal is every task without a strategy.
	Normal Class = 2
	// Background tasks age 8x faster than normal ones and yield to them.
	Background Class = 3
)

var classNames = [...]string{"critical", "high", "normal", "background"}

func (c Class) String() string {
	if int(c) < len(classNames) {
		return classNames[c]
	}
	return fmt.Sprintf("class(%d)", uint32(c))
}

// ParseClass accepts a class name.
func ParseClass(s string) (Class, error) {
	for i, n := range classNames {
		if strings.EqualFold(s, n) {
			return Class(i), nil
		}
	}
	return 0, fmt.Errorf("unknown class %q: use one of %s", s, strings.Join(classNames[:], ", "))
}

func (c Class) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

func (c *Class) UnmarshalText(b []byte) error {
	v, err := ParseClass(string(b))
	if err != nil {
		return err
	}
	*c = v
	return nil
}

func (c *Class) UnmarshalYAML(n *yaml.Node) error { return c.UnmarshalText([]byte(n.Value)) }

// Selector is one pod label that must match (all selectors must match).
type Selector struct {
	Key   string `yaml:"key" json:"key"`
	Value string `yaml:"value" json:"value"`
}

// Bounds of execution_time (the per-strategy slice), in ns.
const (
	MinSliceNs = 50_000
	MaxSliceNs = 1_000_000_000
)

// Strategy gives the processes it matches a class and optionally a slice.
// A process matches when every matcher that is set matches it.
type Strategy struct {
	// Name identifies the strategy in logs, stats and the API.
	Name string `yaml:"name" json:"name,omitempty"`
	// Class is critical, high, normal or background.
	Class *Class `yaml:"class" json:"class,omitempty"`
	// Priority is the generation-1 form: true means critical.
	Priority *bool `yaml:"priority" json:"priority,omitempty"`
	// ExecutionTime is the slice for matched tasks in ns; 0 keeps the scheduler's.
	ExecutionTime uint64 `yaml:"execution_time" json:"execution_time,omitempty"`
	// CommandRegex (RE2) is matched against the full command line and the
	// executable path (and the thread name of kernel threads).
	CommandRegex string `yaml:"command_regex" json:"command_regex,omitempty"`
	// PID selects one process (all its threads).
	PID int `yaml:"pid" json:"pid,omitempty"`
	// CgroupPath selects every process in a cgroup v2 directory and below,
	// relative to the cgroup root (e.g. /kubepods.slice/...). Applied in BPF,
	// so processes that join the cgroup later are covered at once.
	CgroupPath string `yaml:"cgroup_path" json:"cgroup_path,omitempty"`
	// CgroupV1 says CgroupPath is in the cgroup v1 cpu hierarchy (set by the
	// Kubernetes agent on v1 nodes): BPF cannot match v1 cgroups, so such a
	// strategy is matched per process, on exec and fork events.
	CgroupV1 bool `yaml:"-" json:"-"`
	// Inherit extends the strategy to children the process forks later.
	Inherit bool `yaml:"inherit" json:"inherit,omitempty"`
	// Selectors are pod labels; they need pod information (the agent with
	// Kubernetes) and match nothing on a plain host.
	Selectors []Selector `yaml:"selectors" json:"selectors,omitempty"`
}

// FieldError is a validation error naming the field (as in the file) to fix.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

var nameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$`)

// EffectiveClass resolves class and the generation-1 priority flag.
func (s *Strategy) EffectiveClass() Class {
	if s.Class != nil {
		return *s.Class
	}
	if s.Priority != nil && *s.Priority {
		return Critical
	}
	return Normal
}

// Validate checks every field; the error is a *FieldError.
func (s *Strategy) Validate() error {
	if s.Name != "" && !nameRE.MatchString(s.Name) {
		return &FieldError{"name", fmt.Sprintf("%q is not a valid name: use 1-63 lower-case letters, digits, '.', '_' or '-'", s.Name)}
	}
	if s.Class == nil && s.Priority == nil {
		return &FieldError{"class", "missing: set class to critical, high, normal or background (or priority: true)"}
	}
	if s.Class != nil && int(*s.Class) >= len(classNames) {
		return &FieldError{"class", fmt.Sprintf("unknown class %d: use one of %s", uint32(*s.Class), strings.Join(classNames[:], ", "))}
	}
	if s.Class != nil && s.Priority != nil && *s.Priority != (*s.Class == Critical) {
		return &FieldError{"priority", fmt.Sprintf("priority: %v contradicts class: %s; set only one of them", *s.Priority, s.Class)}
	}
	if s.ExecutionTime != 0 && (s.ExecutionTime < MinSliceNs || s.ExecutionTime > MaxSliceNs) {
		return &FieldError{"execution_time", fmt.Sprintf("%d ns is out of range: use %d..%d ns, or 0 for the scheduler's slice", s.ExecutionTime, MinSliceNs, MaxSliceNs)}
	}
	if s.CommandRegex != "" {
		if _, err := regexp.Compile(s.CommandRegex); err != nil {
			return &FieldError{"command_regex", fmt.Sprintf("invalid RE2 regular expression: %v", err)}
		}
	}
	if s.PID < 0 {
		return &FieldError{"pid", fmt.Sprintf("%d is not a process id", s.PID)}
	}
	if s.CgroupPath != "" {
		if !strings.HasPrefix(s.CgroupPath, "/") || path.Clean(s.CgroupPath) != s.CgroupPath || strings.Contains(s.CgroupPath, "..") {
			return &FieldError{"cgroup_path", fmt.Sprintf("%q must be a clean absolute path below the cgroup root, e.g. /system.slice/upf.service", s.CgroupPath)}
		}
	}
	for i, sel := range s.Selectors {
		if sel.Key == "" {
			return &FieldError{fmt.Sprintf("selectors[%d].key", i), "missing: a pod label key is required"}
		}
	}
	if s.CommandRegex == "" && s.PID == 0 && s.CgroupPath == "" && len(s.Selectors) == 0 {
		return &FieldError{"command_regex", "a strategy needs at least one matcher: command_regex, pid, cgroup_path or selectors"}
	}
	return nil
}

// String is a short human description, for logs.
func (s *Strategy) String() string {
	b, _ := json.Marshal(s)
	return string(b)
}
