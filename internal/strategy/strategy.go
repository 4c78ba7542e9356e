// SPDX-License-Identifier: Apache-2.0

// Package strategy says which processes get which scheduling class: the
// Strategy type shared by the config file, the API, the store and the
// agents, its validation, and the matching of a process against a compiled
// Set. It reads nothing from the machine: internal/applier does that on a
// node, so the API server links none of it.
package strategy

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/swiftlane/swiftlane/internal/schema"
)

// Class is a scheduling class, most urgent first. The values are the BPF
// scheduler's (enum swl_class in internal/schedext/bpf/intf.h).
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

// ClassNames are the classes' names, highest first.
func ClassNames() []string { return append([]string(nil), classNames[:]...) }

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

// Bounds of every slice setting (execution_time, the config's
// scheduler.slice_ns_* and automatic.slice_ns), in ns.
const (
	MinSliceNs = 50_000        // 50 µs: below this, switching costs dominate
	MaxSliceNs = 1_000_000_000 // 1 s
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
type FieldError = schema.FieldError

// Patterns of the string fields, shared by Validate and the API's
// /openapi.json (JSONRules). Both accept "" (the field left out).
const (
	nameBody = `[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?`
	// NamePattern: 1-63 lower-case letters, digits, '.', '_', '-', starting
	// and ending with a letter or digit.
	NamePattern = `^(` + nameBody + `)?$`
	// CgroupPattern: an absolute path below the cgroup root without empty,
	// "." or ".." components (no component starts with '.').
	CgroupPattern = `^(/|(/[^/.][^/]*)+)?$`
)

var (
	nameRE   = regexp.MustCompile(`^` + nameBody + `$`)
	cgroupRE = regexp.MustCompile(CgroupPattern)
)

const nameDoc = "use 1-63 lower-case letters, digits, '.', '_' or '-'"

// JSONRules are the field constraints the API enforces and documents.
func (Strategy) JSONRules() schema.Rules {
	return schema.Rules{
		"name":           {Pattern: NamePattern, MaxLength: 63, Doc: nameDoc},
		"class":          {Enum: classNames[:], Doc: "critical, high, normal or background"},
		"priority":       {Doc: "generation-1 form of class: true is critical, false normal"},
		"execution_time": {Min: schema.Int64(0), Max: schema.Int64(MaxSliceNs), Exclude: &[2]int64{1, MinSliceNs - 1}, Doc: "ns; 0 keeps the scheduler's slice"},
		"command_regex":  {Format: "regex", Doc: "an RE2 expression matched against the command line and executable path"},
		"pid":            {Min: schema.Int64(0), Max: schema.Int64(math.MaxInt32), Doc: "a process id; 0 or absent: any"},
		"cgroup_path":    {Pattern: CgroupPattern, Doc: "use a clean absolute path below the cgroup root, e.g. /system.slice/upf.service"},
		"selectors":      {Doc: "pod labels that must all match (needs the Kubernetes agent)"},
	}
}

// JSONAllOf documents the cross-field rules Validate enforces: a class (or
// priority) that does not contradict itself, and at least one matcher.
func (Strategy) JSONAllOf() []map[string]any {
	req := func(f string, p map[string]any) map[string]any {
		return map[string]any{"required": []string{f}, "properties": map[string]any{f: p}}
	}
	contradiction := func(classes []string, prio bool) map[string]any {
		return map[string]any{"not": map[string]any{"required": []string{"class", "priority"}, "properties": map[string]any{
			"class": map[string]any{"enum": classes}, "priority": map[string]any{"enum": []bool{prio}}}}}
	}
	return []map[string]any{
		{"anyOf": []any{map[string]any{"required": []string{"class"}}, map[string]any{"required": []string{"priority"}}}},
		contradiction([]string{"critical"}, false),
		contradiction([]string{"high", "normal", "background"}, true),
		{"anyOf": []any{
			req("command_regex", map[string]any{"minLength": 1}), req("pid", map[string]any{"minimum": 1}),
			req("cgroup_path", map[string]any{"minLength": 1}), req("selectors", map[string]any{"minItems": 1}),
		}},
	}
}

// JSONRules: a selector needs a key.
func (Selector) JSONRules() schema.Rules {
	return schema.Rules{"key": {Required: true, MinLength: 1, Doc: "a pod label key, e.g. app"}}
}

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
		return &FieldError{Field: "name", Msg: fmt.Sprintf("%q is not a valid name: %s", s.Name, nameDoc)}
	}
	if s.Class == nil && s.Priority == nil {
		return &FieldError{Field: "class", Msg: "missing: set class to critical, high, normal or background (or priority: true)"}
	}
	if s.Class != nil && int(*s.Class) >= len(classNames) {
		return &FieldError{Field: "class", Msg: fmt.Sprintf("unknown class %d: use one of %s", uint32(*s.Class), strings.Join(classNames[:], ", "))}
	}
	if s.Class != nil && s.Priority != nil && *s.Priority != (*s.Class == Critical) {
		return &FieldError{Field: "priority", Msg: fmt.Sprintf("priority: %v contradicts class: %s; set only one of them", *s.Priority, s.Class)}
	}
	if s.ExecutionTime != 0 && (s.ExecutionTime < MinSliceNs || s.ExecutionTime > MaxSliceNs) {
		return &FieldError{Field: "execution_time", Msg: fmt.Sprintf("%d ns is out of range: use %d..%d ns, or 0 for the scheduler's slice", s.ExecutionTime, MinSliceNs, MaxSliceNs)}
	}
	if s.CommandRegex != "" {
		if _, err := regexp.Compile(s.CommandRegex); err != nil {
			return &FieldError{Field: "command_regex", Msg: fmt.Sprintf("invalid RE2 regular expression: %v", err)}
		}
		if i := loneBrace(s.CommandRegex); i >= 0 {
			return &FieldError{Field: "command_regex", Msg: fmt.Sprintf("%q at byte %d is not part of a repetition like {2} or {2,5}: escape it as \\%c "+
				"(RE2 reads a lone brace as a literal, the ECMA-262 dialect of the API's schema as an error)", s.CommandRegex[i], i, s.CommandRegex[i])}
		}
	}
	if s.PID < 0 || s.PID > math.MaxInt32 {
		return &FieldError{Field: "pid", Msg: fmt.Sprintf("%d is not a process id", s.PID)}
	}
	if !cgroupRE.MatchString(s.CgroupPath) {
		return &FieldError{Field: "cgroup_path", Msg: fmt.Sprintf("%q must be a clean absolute path below the cgroup root, e.g. /system.slice/upf.service", s.CgroupPath)}
	}
	for i, sel := range s.Selectors {
		if sel.Key == "" {
			return &FieldError{Field: fmt.Sprintf("selectors[%d].key", i), Msg: "missing: a pod label key is required"}
		}
	}
	if s.CommandRegex == "" && s.PID == 0 && s.CgroupPath == "" && len(s.Selectors) == 0 {
		return &FieldError{Field: "command_regex", Msg: "a strategy needs at least one matcher: command_regex, pid, cgroup_path or selectors"}
	}
	return nil
}

// loneBrace is the offset of the first brace outside a character class
// that is not part of a repetition ({n}, {n,}, {n,m}), or -1. RE2 takes such
// a brace as a literal; ECMA-262, which the API's JSON Schema declares for
// command_regex (format: regex), refuses it, so the two would disagree.
// \p{…}, \P{…} and \x{…} are RE2 escapes and skipped whole.
func loneBrace(re string) int {
	digits := func(j int) int {
		for j < len(re) && re[j] >= '0' && re[j] <= '9' {
			j++
		}
		return j
	}
	inClass := false
	for i := 0; i < len(re); i++ {
		c := re[i]
		switch {
		case c == '\\':
			i++
			if i+1 < len(re) && (re[i] == 'p' || re[i] == 'P' || re[i] == 'x') && re[i+1] == '{' {
				if end := strings.IndexByte(re[i:], '}'); end > 0 {
					i += end
				}
			}
		case inClass:
			inClass = c != ']'
		case c == '[':
			inClass = true
			if i+1 < len(re) && re[i+1] == '^' {
				i++
			}
			if i+1 < len(re) && re[i+1] == ']' { // a leading ] is a member
				i++
			}
		case c == '{':
			j := digits(i + 1)
			if j == i+1 {
				return i
			}
			if j < len(re) && re[j] == ',' {
				j = digits(j + 1)
			}
			if j >= len(re) || re[j] != '}' {
				return i
			}
			i = j
		case c == '}':
			return i
		}
	}
	return -1
}

// String is a short human description, for logs.
func (s *Strategy) String() string {
	b, _ := json.Marshal(s)
	return string(b)
}
