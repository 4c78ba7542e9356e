// SPDX-License-Identifier: Apache-2.0

package strategy

// Reasons a strategy matches nothing where it is applied.
const (
	// ReasonNoPodSource: pod selectors, and nothing here resolves pods
	// (swiftlane run and the REST agent; the Kubernetes agent expands
	// selectors into pod cgroups before its Applier sees them).
	ReasonNoPodSource = "selectors_without_pod_source"
	// ReasonCgroupMissing: a cgroup_path strategy whose directory does not
	// exist under the cgroup root (yet, or any more).
	ReasonCgroupMissing = "cgroup_not_found"
)

// Unmatchable is a strategy that can match no process where it is applied.
type Unmatchable struct {
	Index    int
	Strategy string // its name, or strategies[i]
	Reason   string // one of the Reason constants
	Fix      string // what the operator can do about it
}

// Unmatchable lists the strategies that can never match here because of
// what they ask for (what the machine has is internal/applier's to check).
// Validation has compiled every command_regex with the RE2 the matcher
// uses, so no regex is invalid here.
func (s *Set) Unmatchable() []Unmatchable {
	var out []Unmatchable
	for i := range s.items {
		if len(s.items[i].s.Selectors) > 0 {
			out = append(out, Unmatchable{Index: i, Strategy: s.Label(i), Reason: ReasonNoPodSource,
				Fix: "pod selectors need the Kubernetes agent (swiftlane api --store kubernetes); here match with command_regex, pid or cgroup_path instead"})
		}
	}
	return out
}
