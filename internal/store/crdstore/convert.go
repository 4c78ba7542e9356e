// SPDX-License-Identifier: Apache-2.0

package crdstore

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/swiftlane/swiftlane/apis/swiftlane/v1alpha1"
	"github.com/swiftlane/swiftlane/internal/apitypes"
	"github.com/swiftlane/swiftlane/internal/crdconv"
	"github.com/swiftlane/swiftlane/internal/strategy"
)

// AnnotationCreatedRevision holds a strategy's precedence key; see
// v1alpha1.Precedes.
const AnnotationCreatedRevision = v1alpha1.AnnotationCreatedRevision

// namespaceLabel is the label the API server puts on every namespace (its
// name); apitypes.Strategy.Namespaces is a namespaceSelector on it.
const namespaceLabel = "kubernetes.io/metadata.name"

// maxCmdlineBytes bounds a workload's command line in a SchedulingNode.
const maxCmdlineBytes = 1024

// toObject is the SchedulingStrategy for a strategy the API accepted. The
// API server's own validation (schema, CEL) runs when it is written; this
// only refuses what the object cannot hold at all.
func toObject(ns string, s apitypes.Strategy) (*v1alpha1.SchedulingStrategy, error) {
	spec, err := crdconv.Spec(s.Strategy)
	if err != nil {
		return nil, err
	}
	if len(s.Selectors) > 0 {
		ml := make(map[string]string, len(s.Selectors))
		for i, sel := range s.Selectors {
			if _, dup := ml[sel.Key]; dup {
				return nil, &strategy.FieldError{Field: fmt.Sprintf("selectors[%d].key", i),
					Msg: fmt.Sprintf("%q appears twice: a pod has one value per label (the Kubernetes store keeps selectors as podSelector.matchLabels); use each key once", sel.Key)}
			}
			ml[sel.Key] = sel.Value
		}
		spec.PodSelector = &metav1.LabelSelector{MatchLabels: ml}
	}
	if len(s.Namespaces) > 0 {
		spec.NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: namespaceLabel, Operator: metav1.LabelSelectorOpIn, Values: slices.Clone(s.Namespaces)},
		}}
	}
	if len(s.NodeSelector) > 0 {
		spec.NodeSelector = maps.Clone(s.NodeSelector)
	}
	o := &v1alpha1.SchedulingStrategy{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "SchedulingStrategy"},
		ObjectMeta: metav1.ObjectMeta{Name: s.Name, Namespace: ns},
		Spec:       spec,
	}
	if s.Owner != "" {
		o.Annotations = map[string]string{v1alpha1.AnnotationOwner: s.Owner}
	}
	return o, nil
}

// fromObject is the API's view of a SchedulingStrategy, or why the API
// cannot show it faithfully. Revision is left for the caller.
func fromObject(o *v1alpha1.SchedulingStrategy) (apitypes.Strategy, error) {
	var s apitypes.Strategy
	core, err := crdconv.Strategy(o.Spec)
	s.Strategy, s.Name = core, o.Name
	if err != nil {
		return s, err
	}
	if ps := o.Spec.PodSelector; ps != nil {
		if len(ps.MatchExpressions) > 0 {
			return s, errors.New("spec.podSelector.matchExpressions: the API's selectors are label equalities only; use matchLabels")
		}
		if len(ps.MatchLabels) == 0 {
			return s, errors.New("spec.podSelector is {} (every pod in scope): the API's selectors cannot say that; list labels in matchLabels")
		}
		for _, k := range slices.Sorted(maps.Keys(ps.MatchLabels)) {
			s.Selectors = append(s.Selectors, strategy.Selector{Key: k, Value: ps.MatchLabels[k]})
		}
	}
	if nsel := o.Spec.NamespaceSelector; nsel != nil {
		if s.Namespaces, err = namespacesOf(nsel); err != nil {
			return s, err
		}
	}
	if len(o.Spec.NodeSelector) > 0 {
		s.NodeSelector = maps.Clone(o.Spec.NodeSelector)
	}
	if v, ok := o.Annotations[AnnotationCreatedRevision]; ok {
		if s.CreatedRevision, err = strconv.ParseUint(v, 10, 64); err != nil {
			return s, fmt.Errorf("annotation %s=%q is not a revision: use a decimal number, or remove it", AnnotationCreatedRevision, v)
		}
	}
	s.Owner = o.Annotations[v1alpha1.AnnotationOwner]
	if err := s.Validate(); err != nil {
		return s, fmt.Errorf("not a valid API strategy: %w", err)
	}
	return s, nil
}

// namespacesOf reads the one namespaceSelector shape the API writes
// (kubernetes.io/metadata.name In [...]) and its one-namespace matchLabels
// equivalent.
func namespacesOf(sel *metav1.LabelSelector) ([]string, error) {
	switch {
	case len(sel.MatchLabels) == 0 && len(sel.MatchExpressions) == 1:
		e := sel.MatchExpressions[0]
		if e.Key == namespaceLabel && e.Operator == metav1.LabelSelectorOpIn && len(e.Values) > 0 {
			return slices.Clone(e.Values), nil
		}
	case len(sel.MatchExpressions) == 0 && len(sel.MatchLabels) == 1:
		if v, ok := sel.MatchLabels[namespaceLabel]; ok {
			return []string{v}, nil
		}
	}
	return nil, fmt.Errorf("spec.namespaceSelector: the API's namespaces can say only `%s In [names]`", namespaceLabel)
}

// createdRevision is an object's precedence key (0 without a valid annotation).
func createdRevision(o *v1alpha1.SchedulingStrategy) uint64 {
	v, _ := strconv.ParseUint(o.Annotations[AnnotationCreatedRevision], 10, 64)
	return v
}

func setCreatedRevision(o *v1alpha1.SchedulingStrategy, rev uint64) {
	if o.Annotations == nil {
		o.Annotations = map[string]string{}
	}
	o.Annotations[AnnotationCreatedRevision] = strconv.FormatUint(rev, 10)
}

// parseRevision reads a resourceVersion as the etcd revision it is. The
// Kubernetes API calls resourceVersions opaque; every kube-apiserver backed
// by etcd3 (the only storage it has) uses the revision, and list, watch and
// write revisions then compare as numbers, which the change log needs.
func parseRevision(rv string) (uint64, error) {
	v, err := strconv.ParseUint(rv, 10, 64)
	if err != nil || v == 0 {
		return 0, fmt.Errorf("resourceVersion %q is not an etcd revision: this store needs a kube-apiserver backed by etcd", rv)
	}
	return v, nil
}

// cloneStrategy copies everything a caller could change in place.
func cloneStrategy(s apitypes.Strategy) apitypes.Strategy {
	if s.Class != nil {
		c := *s.Class
		s.Class = &c
	}
	if s.Priority != nil {
		p := *s.Priority
		s.Priority = &p
	}
	s.Selectors = slices.Clone(s.Selectors)
	s.Namespaces = slices.Clone(s.Namespaces)
	s.NodeSelector = maps.Clone(s.NodeSelector)
	return s
}

// sameView reports whether two API views are equal apart from revisions.
func sameView(a, b apitypes.Strategy) bool {
	a.Revision, b.Revision = 0, 0
	na, nb := a.EffectiveClass(), b.EffectiveClass()
	a.Class, b.Class, a.Priority, b.Priority = &na, &nb, nil, nil
	return a.Name == b.Name && *a.Class == *b.Class && a.ExecutionTime == b.ExecutionTime &&
		a.CommandRegex == b.CommandRegex && a.PID == b.PID && a.CgroupPath == b.CgroupPath &&
		a.Inherit == b.Inherit && slices.Equal(a.Selectors, b.Selectors) &&
		slices.Equal(a.Namespaces, b.Namespaces) && maps.Equal(a.NodeSelector, b.NodeSelector) &&
		a.CreatedRevision == b.CreatedRevision && a.Owner == b.Owner
}

// celRules name the API field for the CRD's spec-level CEL rules, which the
// API server reports against "spec" (the rules carry no fieldPath), with
// the message in the API's terms.
var celRules = []struct{ match, field, msg string }{
	{"namespaceSelector needs podSelector", "namespaces", "namespaces scope pod selectors; set selectors too, or leave namespaces out"},
	{"set at least one matcher", "command_regex", "a strategy needs at least one matcher: command_regex, pid, cgroup_path or selectors"},
}

// invalidToField turns the API server's 422 (schema or CEL) into a
// *strategy.FieldError naming the API's field, prefixed (e.g.
// "strategies[2].") for list writes. ok is false for other errors.
func invalidToField(err error, prefix string) (*strategy.FieldError, bool) {
	var se *apierrors.StatusError
	if !apierrors.IsInvalid(err) || !errors.As(err, &se) {
		return nil, false
	}
	var causes []metav1.StatusCause
	if d := se.ErrStatus.Details; d != nil {
		causes = d.Causes
	}
	if len(causes) == 0 {
		return &strategy.FieldError{Field: strings.TrimSuffix(prefix, "."), Msg: "rejected by the Kubernetes API server: " + se.ErrStatus.Message}, true
	}
	c := causes[0] // the first is enough to fix; the API reports one field at a time
	// The API turns ": use ..." into the hint.
	field := ""
	msg := "refused by the Kubernetes API server: " + c.Message + ": use a value the SchedulingStrategy CRD accepts (kubectl explain schedulingstrategy." + c.Field + ")"
	path := strings.Split(c.Field, ".")
	switch {
	case c.Field == "metadata.name":
		field = "name"
		msg = "refused by the Kubernetes API server: " + c.Message + ": use lower-case letters, digits, '-' and '.' (a Kubernetes object name)"
	case c.Field == "spec":
		for _, r := range celRules {
			if strings.Contains(c.Message, r.match) {
				field, msg = r.field, r.msg
			}
		}
	case len(path) >= 2 && path[0] == "spec":
		field = crdconv.APIField(strings.SplitN(path[1], "[", 2)[0])
	}
	if field == "" {
		msg = c.Field + ": " + msg
	}
	return &strategy.FieldError{Field: prefix + field, Msg: msg}, true
}

// Node conversion.

func nodeFromObject(o *v1alpha1.SchedulingNode, counters *apitypes.Counters) apitypes.Node {
	st := o.Status
	n := apitypes.Node{
		Name: o.Name,
		Registration: apitypes.Registration{
			Labels: maps.Clone(st.Labels), Version: st.Version, Kernel: st.Kernel, Mode: st.Mode, Reason: st.Reason,
			HeartbeatSeconds: int(st.HeartbeatSeconds),
		},
		Heartbeat: apitypes.Heartbeat{
			SchedulerState: st.SchedulerState, AppliedRevision: uint64(max(st.AppliedRevision, 0)), Counters: counters,
		},
	}
	if !st.RegisteredAt.IsZero() {
		n.RegisteredAt = st.RegisteredAt.UTC()
	}
	if !st.LastHeartbeat.IsZero() {
		n.LastHeartbeat = st.LastHeartbeat.UTC()
	}
	for _, w := range st.Workloads {
		sw := apitypes.Workload{PID: int(w.PID), Strategy: w.Strategy, Class: w.Class, Inherited: w.Inherited, Cmdline: w.Cmdline,
			PodUID: w.PodUID, Container: w.Container, ContainerID: w.ContainerID}
		if ns, name, ok := strings.Cut(w.Pod, "/"); ok {
			sw.Namespace, sw.PodName = ns, name
		}
		n.Workloads = append(n.Workloads, sw)
	}
	n.Carriers = crdconv.APICarriers(st.Carriers)
	n.Unmatchable = crdconv.APIUnmatchable(st.Unmatchable)
	return n
}

// workloadsOf converts and caps a heartbeat's workloads: the first
// crdconv.MaxWorkloads in the agent's order, command lines cut at maxCmdlineBytes.
func workloadsOf(ws []apitypes.Workload) []v1alpha1.Workload {
	out := make([]v1alpha1.Workload, 0, min(len(ws), crdconv.MaxWorkloads))
	for _, w := range ws[:min(len(ws), crdconv.MaxWorkloads)] {
		vw := v1alpha1.Workload{PID: int32(min(w.PID, math.MaxInt32)), Strategy: w.Strategy, Class: w.Class, Inherited: w.Inherited, Cmdline: crdconv.Truncate(w.Cmdline, maxCmdlineBytes),
			PodUID: crdconv.Truncate(w.PodUID, 64), Container: crdconv.Truncate(w.Container, 253), ContainerID: crdconv.Truncate(w.ContainerID, 128)}
		if w.PodName != "" {
			vw.Pod = w.Namespace + "/" + w.PodName
		}
		out = append(out, vw)
	}
	return out
}
