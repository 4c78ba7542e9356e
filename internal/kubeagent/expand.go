// SPDX-License-Identifier: Apache-2.0

package kubeagent

// A resync: strategies in precedence order, each expanded into scheduler-core
// strategies (one per matched pod, scoped by its cgroup), handed to the Applier.

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/swiftlane/swiftlane/apis/swiftlane/v1alpha1"
	"github.com/swiftlane/swiftlane/internal/crdconv"
	"github.com/swiftlane/swiftlane/internal/strategy"
)

// expanded is one scheduler-core strategy: a SchedulingStrategy applied to
// one pod (pod empty for node-wide strategies of the system namespace).
type expanded struct {
	key    string      // namespace/name of the SchedulingStrategy
	pod    string      // namespace/name of the pod
	podObj *corev1.Pod // the pod (the informer's copy: read only)
}

// plan is one resync's result for one strategy.
type plan struct {
	s                *v1alpha1.SchedulingStrategy
	forNode          bool
	pods, unresolved int
	reason, message  string // a reason when the strategy cannot apply as written
	first            int    // index of its first expansion, -1 if none
}

// sync recomputes what this node applies and hands it to the Applier, then
// queues the status writes. It reads only the informers' caches: no API call
// comes before the maps are written. It reports retry when some matched pods
// had no cgroup yet.
func (a *Agent) sync(t SyncTimes) (retry bool, err error) {
	nodeLabels := map[string]string{}
	if n, err := a.nodes.Get(a.o.Node); err == nil {
		nodeLabels = n.Labels
	}
	strats := a.strategies()
	var list []strategy.Strategy
	var exp []expanded
	plans := make([]plan, 0, len(strats))
	for _, s := range strats {
		p := plan{s: s, forNode: labels.SelectorFromSet(s.Spec.NodeSelector).Matches(labels.Set(nodeLabels)), first: -1}
		if p.forNode {
			base, err := coreStrategy(s)
			if err != nil {
				p.reason, p.message = "InvalidStrategy", err.Error()
			} else {
				a.expand(s, base, &p, &list, &exp)
			}
		}
		retry = retry || p.unresolved > 0
		plans = append(plans, p)
	}
	set, err := strategy.Compile(list)
	if err != nil { // each entry validated by coreStrategy; a bug if reached
		return false, fmt.Errorf("compile expanded strategies: %w", err)
	}
	// The expansions have no names: the Applier's log lines and the
	// node's /metrics name the SchedulingStrategy (and pod) instead.
	labels := make([]string, len(exp))
	for i, x := range exp {
		labels[i] = x.key
		if x.pod != "" {
			labels[i] += " (pod " + x.pod + ")"
		}
	}
	set = set.WithLabels(labels)
	t.Expanded = time.Now()
	a.mu.Lock()
	a.expansion = exp
	a.mu.Unlock()
	if err := a.o.Applier.SetStrategies(set); err != nil {
		a.o.Log.Warn("some strategies could not be applied", "err", err)
	}
	t.Applied = time.Now()
	a.mu.Lock()
	a.plans = plans
	a.mu.Unlock()
	a.status.Add(statusKey)
	a.logSync(t, len(strats), len(list))
	if a.o.OnSynced != nil {
		a.o.OnSynced(t)
	}
	return retry, nil
}

// logSync logs a resync's stages at debug level: event_unix_us anchors them
// on the wall clock, so another process (the VM test) can line them up with
// its own request times.
func (a *Agent) logSync(t SyncTimes, strategies, entries int) {
	attrs := []any{"strategies", strategies, "entries", entries}
	if !t.Event.IsZero() {
		attrs = append(attrs, "event_unix_us", t.Event.UnixMicro(), "queue", t.Start.Sub(t.Event))
	}
	attrs = append(attrs, "expand", t.Expanded.Sub(t.Start), "apply", t.Applied.Sub(t.Expanded))
	a.o.Log.Debug("resync applied", attrs...)
}

// strategies in precedence order (the API server's too).
func (a *Agent) strategies() []*v1alpha1.SchedulingStrategy {
	var out []*v1alpha1.SchedulingStrategy
	for _, obj := range a.strats.List() {
		out = append(out, obj.(*v1alpha1.SchedulingStrategy))
	}
	sort.Slice(out, func(i, j int) bool { return v1alpha1.Precedes(out[i], out[j]) })
	return out
}

// coreStrategy is the part of a SchedulingStrategy the scheduler core
// understands (everything but the pod and namespace selectors).
func coreStrategy(s *v1alpha1.SchedulingStrategy) (strategy.Strategy, error) {
	out, err := crdconv.Strategy(s.Spec)
	if err != nil {
		return out, err
	}
	if err := out.Validate(); err != nil && !(s.Spec.PodSelector != nil && isMatcherMissing(err)) {
		return out, fmt.Errorf("spec.%s", specField(err))
	}
	return out, nil
}

// isMatcherMissing: a pod-selecting strategy gets its matcher (the pod's
// cgroup) when expanded.
func isMatcherMissing(err error) bool {
	var fe *strategy.FieldError
	return errors.As(err, &fe) && strings.Contains(fe.Msg, "at least one matcher")
}

// specField renames a core field error into the CRD's field names.
func specField(err error) string {
	var fe *strategy.FieldError
	if !errors.As(err, &fe) {
		return err.Error()
	}
	return crdconv.SpecField(fe.Field) + ": " + fe.Msg
}

// expand appends the strategy's scheduler-core entries to list.
func (a *Agent) expand(s *v1alpha1.SchedulingStrategy, base strategy.Strategy, p *plan, list *[]strategy.Strategy, exp *[]expanded) {
	key := s.Namespace + "/" + s.Name
	system := s.Namespace == a.o.SystemNamespace
	if s.Spec.PodSelector == nil {
		if !system {
			p.reason, p.message = "PodSelectorRequired", fmt.Sprintf("outside %s a strategy must select pods (spec.podSelector): it may only reach its own namespace's pods", a.o.SystemNamespace)
			return
		}
		p.first = len(*list)
		*list = append(*list, base)
		*exp = append(*exp, expanded{key: key})
		return
	}
	podSel, err := metav1.LabelSelectorAsSelector(s.Spec.PodSelector)
	if err != nil {
		p.reason, p.message = "InvalidStrategy", "spec.podSelector: "+err.Error()
		return
	}
	inScope := func(ns string) bool { return ns == s.Namespace }
	if s.Spec.NamespaceSelector != nil {
		if !system {
			p.message = fmt.Sprintf("spec.namespaceSelector ignored: only strategies in %s may reach other namespaces", a.o.SystemNamespace)
		} else {
			nsSel, err := metav1.LabelSelectorAsSelector(s.Spec.NamespaceSelector)
			if err != nil {
				p.reason, p.message = "InvalidStrategy", "spec.namespaceSelector: "+err.Error()
				return
			}
			inScope = func(ns string) bool {
				n, err := a.nss.Get(ns)
				return err == nil && nsSel.Matches(labels.Set(n.Labels))
			}
		}
	}
	pods, _ := a.pods.List(podSel)
	sort.Slice(pods, func(i, j int) bool { return pods[i].Namespace+"/"+pods[i].Name < pods[j].Namespace+"/"+pods[j].Name })
	for _, pod := range pods {
		if !inScope(pod.Namespace) || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		p.pods++
		cg, err := a.o.Cgroups.PodCgroup(pod)
		if err != nil {
			p.unresolved++
			a.o.Log.Debug("pod cgroup not found (yet)", "pod", pod.Namespace+"/"+pod.Name, "err", err)
			continue
		}
		e := base
		// The pod's cgroup scopes the strategy; a cgroupPath of its own
		// cannot also hold (the pod is not under it), so the pod wins.
		// On cgroup v1 the match happens per process (exec/fork events),
		// not in BPF.
		e.CgroupPath, e.CgroupV1 = cg.Path, cg.V1
		if p.first < 0 {
			p.first = len(*list)
		}
		*list = append(*list, e)
		*exp = append(*exp, expanded{key: key, pod: pod.Namespace + "/" + pod.Name, podObj: pod})
	}
	if p.unresolved > 0 && p.message == "" {
		p.message = fmt.Sprintf("%d matched pod(s) have no cgroup on this node yet", p.unresolved)
	}
}
