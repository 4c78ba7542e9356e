// SPDX-License-Identifier: Apache-2.0

// Package crdconv converts between a SchedulingStrategy's spec and the
// scheduler core's strategy.Strategy, for the two readers of the CRD: the
// Kubernetes store (the REST API's view of the objects) and the Kubernetes
// node agent (what its node applies). What only one of them needs stays
// with it: the store's namespaces, node selector and annotations, the
// agent's expansion of pod selectors into the pods' cgroups.
package crdconv

import (
	"fmt"
	"math"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/swiftlane/swiftlane/apis/swiftlane/v1alpha1"
	"github.com/swiftlane/swiftlane/internal/apitypes"
	"github.com/swiftlane/swiftlane/internal/strategy"
)

// MaxWorkloads caps the processes a SchedulingNode lists: the object is read
// by people (kubectl get -o yaml), not an inventory, and etcd refuses values
// over 1.5 MiB.
const MaxWorkloads = 256

// MaxCarriers caps the GTP-U carriers a SchedulingNode lists (a node runs a
// handful: its gNBs and UPFs); the API takes no more either.
const MaxCarriers = apitypes.MaxCarriers

// Carriers converts and caps automatic mode's carriers for a SchedulingNode.
func Carriers(cs []apitypes.Carrier) []v1alpha1.Carrier {
	out := make([]v1alpha1.Carrier, 0, min(len(cs), MaxCarriers))
	for _, c := range cs[:min(len(cs), MaxCarriers)] {
		out = append(out, v1alpha1.Carrier{
			PID: int32(min(c.PID, math.MaxInt32)), Command: Truncate(c.Command, apitypes.MaxCommandLength), Class: c.Class,
			Function: Truncate(c.Function, apitypes.MaxFunctionLen), Since: microTime(c.Since), LastPacket: microTime(c.LastPacket),
			// The API bounds the rate; a direct caller's NaN or overflow must not wrap.
			Packets: int64(min(c.Packets, math.MaxInt64)), PacketsPerSecond: int64(math.Round(max(0, min(c.PacketsPerSecond, 1<<40)))),
		})
	}
	return out
}

// microTime keeps a zero time zero (the field is then omitted).
func microTime(t time.Time) metav1.MicroTime {
	if t.IsZero() {
		return metav1.MicroTime{}
	}
	return metav1.NewMicroTime(t)
}

// APICarriers is the reverse of Carriers (times to the microsecond, rates rounded).
func APICarriers(cs []v1alpha1.Carrier) []apitypes.Carrier {
	var out []apitypes.Carrier
	for _, c := range cs {
		out = append(out, apitypes.Carrier{
			PID: int(c.PID), Command: c.Command, Class: c.Class, Function: c.Function,
			Since: c.Since.UTC(), LastPacket: c.LastPacket.UTC(),
			Packets: uint64(max(c.Packets, 0)), PacketsPerSecond: float64(c.PacketsPerSecond),
		})
	}
	return out
}

// Strategy is the scheduler-core part of spec: class (the CRD's default
// when empty, for objects written before the default existed), matchers
// and slice. Selectors and validation are the caller's: the store and the
// agent accept different selectors.
func Strategy(spec v1alpha1.SchedulingStrategySpec) (strategy.Strategy, error) {
	var s strategy.Strategy
	class := spec.Class
	if class == "" {
		class = v1alpha1.ClassCritical
	}
	c, err := strategy.ParseClass(class)
	if err != nil {
		return s, fmt.Errorf("spec.class: %w", err)
	}
	s.Class = &c
	s.CommandRegex, s.CgroupPath, s.Inherit, s.PID = spec.CommandRegex, spec.CgroupPath, spec.Inherit, int(spec.PID)
	if sl := spec.Slice; sl != nil && sl.Duration != 0 {
		if sl.Duration < 0 {
			return s, fmt.Errorf("spec.slice %v is negative", sl.Duration)
		}
		s.ExecutionTime = uint64(sl.Duration)
	}
	return s, nil
}

// Spec is the reverse of Strategy: s's class, matchers and slice as a spec,
// or a *strategy.FieldError for what the spec's fields cannot hold.
func Spec(s strategy.Strategy) (v1alpha1.SchedulingStrategySpec, error) {
	spec := v1alpha1.SchedulingStrategySpec{
		Class:        s.EffectiveClass().String(),
		CommandRegex: s.CommandRegex,
		CgroupPath:   s.CgroupPath,
		Inherit:      s.Inherit,
	}
	if s.PID > math.MaxInt32 {
		return spec, &strategy.FieldError{Field: "pid", Msg: fmt.Sprintf("%d is not a process id: use at most %d", s.PID, math.MaxInt32)}
	}
	spec.PID = int32(s.PID)
	if s.ExecutionTime > 0 {
		if s.ExecutionTime > math.MaxInt64 {
			return spec, &strategy.FieldError{Field: "execution_time", Msg: fmt.Sprintf("%d ns is out of range: use %d..%d ns", s.ExecutionTime, strategy.MinSliceNs, strategy.MaxSliceNs)}
		}
		spec.Slice = &metav1.Duration{Duration: time.Duration(s.ExecutionTime)}
	}
	return spec, nil
}

// fields pairs each spec field with the API's name for it.
var fields = [...][2]string{
	{"class", "class"},
	{"slice", "execution_time"},
	{"commandRegex", "command_regex"},
	{"pid", "pid"},
	{"cgroupPath", "cgroup_path"},
	{"inherit", "inherit"},
	{"podSelector", "selectors"},
	{"namespaceSelector", "namespaces"},
	{"nodeSelector", "node_selector"},
}

// APIField is the API's name for a spec field ("" if it has none), so an
// error the Kubernetes API server reports names the field the client wrote.
func APIField(specField string) string {
	for _, f := range fields {
		if f[0] == specField {
			return f[1]
		}
	}
	return ""
}

// SpecField is the spec's name for an API field (the name itself if the
// spec has no other), so an error from the scheduler core names the field
// the object's author wrote.
func SpecField(apiField string) string {
	for _, f := range fields {
		if f[1] == apiField {
			return f[0]
		}
	}
	return apiField
}

// Unmatchable converts and caps a node's unmatchable strategies for a
// SchedulingNode (never nil: an empty list clears the field in a merge patch).
func Unmatchable(us []apitypes.Unmatchable) []v1alpha1.UnmatchableStrategy {
	out := make([]v1alpha1.UnmatchableStrategy, 0, min(len(us), apitypes.MaxUnmatchable))
	for _, u := range us[:min(len(us), apitypes.MaxUnmatchable)] {
		out = append(out, v1alpha1.UnmatchableStrategy{Strategy: Truncate(u.Strategy, apitypes.MaxUnmatchableName),
			Reason: Truncate(u.Reason, apitypes.MaxUnmatchableReason), Fix: Truncate(u.Fix, apitypes.MaxUnmatchableFix)})
	}
	return out
}

// APIUnmatchable is the reverse of Unmatchable.
func APIUnmatchable(us []v1alpha1.UnmatchableStrategy) []apitypes.Unmatchable {
	var out []apitypes.Unmatchable
	for _, u := range us {
		out = append(out, apitypes.Unmatchable{Strategy: u.Strategy, Reason: u.Reason, Fix: u.Fix})
	}
	return out
}

// Truncate cuts s to at most n bytes without splitting a UTF-8 sequence, for
// status fields the CRD bounds.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}
