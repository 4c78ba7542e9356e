// SPDX-License-Identifier: Apache-2.0

// Package kubeagent is the node agent when Kubernetes is the control plane.
// Informers watch SchedulingStrategies, the pods bound to this node (a field
// selector on spec.nodeName, so a node never holds the cluster's pods),
// namespaces and this node's Node object; every change queues one resync of
// the node (sample-controller's informer → workqueue → reconcile, with a
// single key: a node has few strategies and pods, and one pass keeps
// precedence simple).
//
// A resync expands each strategy into one scheduler-core strategy per matched
// pod, keyed by the pod's cgroup directory: the BPF scheduler matches cgroup
// ids against every ancestor of a task's cgroup, so a process started in the
// pod later is covered at once, without a rescan. Each agent writes only its
// own entry of a strategy's status (server-side apply, one field manager per
// node) and its own SchedulingNode. Status is written by its own worker after
// the maps are updated: API calls (client-side rate limited) never delay the
// next resync.
package kubeagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/swiftlane/swiftlane/apis/swiftlane/v1alpha1"
	"github.com/swiftlane/swiftlane/internal/crdconv"
	"github.com/swiftlane/swiftlane/internal/podcgroup"
	"github.com/swiftlane/swiftlane/internal/strategy"
)

// Modes, as in the REST agent.
const (
	ModeSchedule = "schedule"
	ModeObserve  = "observe"
)

// ConditionApplied is the condition each node reports per strategy.
const ConditionApplied = "Applied"

// PodCgroups finds the cgroup of a pod on this node.
type PodCgroups interface {
	PodCgroup(pod *corev1.Pod) (podcgroup.Cgroup, error)
}

// Resolver finds pods' cgroups the way the kubelet names them.
type Resolver struct{ *podcgroup.Resolver }

// PodCgroup implements PodCgroups.
func (r Resolver) PodCgroup(pod *corev1.Pod) (podcgroup.Cgroup, error) {
	return r.Pod(string(pod.UID), podcgroup.QOSClass(pod.Status.QOSClass))
}

// Options configure an Agent.
type Options struct {
	Config *rest.Config
	Node   string
	// SystemNamespace is where strategies may reach beyond their own
	// namespace (namespaceSelector) and match without a pod selector.
	SystemNamespace string
	Applier         *strategy.Applier
	Cgroups         PodCgroups
	// Mode is ModeSchedule or ModeObserve; Reason says why observe.
	Mode, Reason    string
	Version, Kernel string
	// Interval is the SchedulingNode heartbeat and status refresh period (default 10 s).
	Interval time.Duration
	// SchedulerState reports sched_ext's state (nil: "unknown").
	SchedulerState func() string
	Log            *slog.Logger
	// OnSynced runs after each resync applied to the scheduler (tests, benchmarks).
	OnSynced func(SyncTimes)
	// ProcRoot is where a process's cgroup file tells its container (default /proc).
	ProcRoot string
}

// Agent is one node's Kubernetes agent. Run it once.
type Agent struct {
	o      Options
	core   kubernetes.Interface
	crd    *rest.RESTClient
	queue  workqueue.TypedRateLimitingInterface[string]
	status workqueue.TypedRateLimitingInterface[string] // writes of the last resync's statuses
	pods   corelisters.PodLister
	nss    corelisters.NamespaceLister
	nodes  corelisters.NodeLister
	strats cache.Indexer
	// eventAt is when the first change no resync has taken yet reached the
	// handlers (unix ns; 0: none).
	eventAt atomic.Int64

	mu sync.Mutex
	// expansion is what the Applier holds: index → (strategy, pod).
	expansion []expanded
	// plans are the last resync's, for the status worker.
	plans []plan
	// reported is the last status written per strategy (namespace/name).
	reported map[string]nodeStatus
	started  metav1.Time
}

// expanded is one scheduler-core strategy: a SchedulingStrategy applied to
// one pod (pod empty for node-wide strategies of the system namespace).
type expanded struct {
	key    string      // namespace/name of the SchedulingStrategy
	pod    string      // namespace/name of the pod
	podObj *corev1.Pod // the pod (the informer's copy: read only)
}

// nodeStatus is this node's entry of one strategy's status, as last written.
type nodeStatus struct {
	generation     int64
	pods, procs    int32
	status, reason string
	message        string
	appliedAt      metav1.Time
	transition     metav1.Time
}

const resyncKey, statusKey = "node", "status"

// SyncTimes is when one resync passed each stage, so the time from a change
// to the scheduler's maps can be split up. Event is zero when no Kubernetes
// change started it (a retry, observe mode's periodic resync).
type SyncTimes struct {
	Event    time.Time // the first change behind it reached the informer handlers
	Start    time.Time // the worker took it
	Expanded time.Time // strategies expanded to pods' cgroups and compiled
	Applied  time.Time // the Applier returned: the maps hold the result
}

// New checks the options and builds the clients.
func New(o Options) (*Agent, error) {
	if o.Config == nil || o.Applier == nil || o.Cgroups == nil || o.Node == "" {
		return nil, errors.New("kubeagent: Config, Applier, Cgroups and Node are required")
	}
	if o.SystemNamespace == "" {
		o.SystemNamespace = "swiftlane-system"
	}
	if o.Interval <= 0 {
		o.Interval = 10 * time.Second
	}
	if o.Mode == "" {
		o.Mode = ModeSchedule
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.ProcRoot == "" {
		o.ProcRoot = "/proc"
	}
	core, err := kubernetes.NewForConfig(o.Config)
	if err != nil {
		return nil, err
	}
	crd, err := v1alpha1.NewRESTClient(o.Config)
	if err != nil {
		return nil, err
	}
	return &Agent{o: o, core: core, crd: crd, reported: map[string]nodeStatus{}, started: metav1.Now()}, nil
}

// Run watches, resyncs and heartbeats until ctx ends.
func (a *Agent) Run(ctx context.Context) error {
	a.queue = retryQueue("swiftlane-agent")
	defer a.queue.ShutDown()
	a.status = retryQueue("swiftlane-agent-status")
	defer a.status.ShutDown()

	onNode := informers.NewSharedInformerFactoryWithOptions(a.core, 0,
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
			lo.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", a.o.Node).String()
		}))
	cluster := informers.NewSharedInformerFactory(a.core, 0)
	self := informers.NewSharedInformerFactoryWithOptions(a.core, 0,
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
			lo.FieldSelector = fields.OneTermEqualSelector("metadata.name", a.o.Node).String()
		}))
	podInf := onNode.Core().V1().Pods()
	nsInf := cluster.Core().V1().Namespaces()
	nodeInf := self.Core().V1().Nodes()
	a.pods, a.nss, a.nodes = podInf.Lister(), nsInf.Lister(), nodeInf.Lister()

	lw := cache.NewListWatchFromClient(a.crd, v1alpha1.StrategiesResource.Resource, metav1.NamespaceAll, fields.Everything())
	stratInf := cache.NewSharedIndexInformer(lw, &v1alpha1.SchedulingStrategy{}, 0, cache.Indexers{})
	a.strats = stratInf.GetIndexer()

	enqueue := func(any) {
		a.eventAt.CompareAndSwap(0, time.Now().UnixNano())
		a.queue.Add(resyncKey)
	}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, DeleteFunc: enqueue,
		UpdateFunc: func(old, cur any) {
			// Our own status writes come back as updates; only spec,
			// labels or pod state changes need a resync.
			if o, ok := old.(*v1alpha1.SchedulingStrategy); ok {
				if c := cur.(*v1alpha1.SchedulingStrategy); o.Generation == c.Generation {
					return
				}
			}
			enqueue(cur)
		},
	}
	for _, inf := range []cache.SharedIndexInformer{podInf.Informer(), nsInf.Informer(), nodeInf.Informer(), stratInf} {
		if _, err := inf.AddEventHandler(handler); err != nil {
			return err
		}
	}
	onNode.Start(ctx.Done())
	cluster.Start(ctx.Done())
	self.Start(ctx.Done())
	go stratInf.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), podInf.Informer().HasSynced, nsInf.Informer().HasSynced,
		nodeInf.Informer().HasSynced, stratInf.HasSynced) {
		return ctx.Err()
	}
	a.o.Log.Info("kubernetes caches synced", "node", a.o.Node)

	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); a.worker() }()
	go func() { defer wg.Done(); a.statusWorker(ctx) }()
	go func() { defer wg.Done(); a.heartbeats(ctx) }()
	a.queue.Add(resyncKey)
	<-ctx.Done()
	a.queue.ShutDown()
	a.status.ShutDown()
	wg.Wait()
	return nil
}

// retryQueue is a work queue whose failed keys come back after 100 ms,
// doubling up to 30 s.
func retryQueue(name string) workqueue.TypedRateLimitingInterface[string] {
	return workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, 30*time.Second),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: name})
}

func (a *Agent) worker() {
	for {
		key, quit := a.queue.Get()
		if quit {
			return
		}
		var t SyncTimes
		if ns := a.eventAt.Swap(0); ns != 0 {
			t.Event = time.Unix(0, ns)
		}
		t.Start = time.Now()
		retry, err := a.sync(t)
		switch {
		case err != nil:
			a.o.Log.Warn("resync failed; retrying", "err", err)
			a.queue.AddRateLimited(key)
		case retry:
			// Pods whose cgroup is not there yet (the kubelet creates it
			// after binding): look again, backing off.
			a.queue.AddRateLimited(key)
		default:
			a.queue.Forget(key)
		}
		a.queue.Done(key)
	}
}

// plan is one resync's result for one strategy.
type plan struct {
	s                *v1alpha1.SchedulingStrategy
	forNode          bool
	pods, unresolved int
	reason, message  string // a reason when the strategy cannot apply as written
	first            int    // index of its first expansion, -1 if none
}

// statusWorker writes the statuses of the last resync, retrying failures
// with backoff.
func (a *Agent) statusWorker(ctx context.Context) {
	for {
		key, quit := a.status.Get()
		if quit {
			return
		}
		a.mu.Lock()
		plans := a.plans
		a.mu.Unlock()
		if err := a.writeStatuses(ctx, plans); err != nil && ctx.Err() == nil {
			a.o.Log.Warn("status write failed; retrying", "err", err)
			a.status.AddRateLimited(key)
		} else {
			a.status.Forget(key)
		}
		a.status.Done(key)
	}
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

// counts returns per strategy key the processes the strategy applies to.
func (a *Agent) counts() map[string]int32 {
	a.mu.Lock()
	exp := a.expansion
	a.mu.Unlock()
	procs := map[string]int32{}
	for _, ap := range a.o.Applier.Applied() {
		if ap.Index >= 0 && ap.Index < len(exp) {
			procs[exp[ap.Index].key]++
		}
	}
	return procs
}

// workloads lists the processes strategies apply to, for the node report
// (it reads each one's cgroup in procfs to name its container).
func (a *Agent) workloads() []v1alpha1.Workload {
	a.mu.Lock()
	exp := a.expansion
	a.mu.Unlock()
	wl := []v1alpha1.Workload{}
	for _, ap := range a.o.Applier.Applied() {
		if ap.Index < 0 || ap.Index >= len(exp) {
			continue
		}
		if len(wl) == crdconv.MaxWorkloads {
			break
		}
		x := exp[ap.Index]
		w := v1alpha1.Workload{PID: int32(ap.PID), Strategy: x.key, Class: ap.Class.String(),
			Inherited: ap.Inherited, Cmdline: crdconv.Truncate(ap.Cmdline, 256), Pod: x.pod}
		if x.podObj != nil {
			w.PodUID = string(x.podObj.UID)
			w.Container, w.ContainerID = a.containerOf(x.podObj, ap.PID)
		}
		wl = append(wl, w)
	}
	return wl
}

// containerOf names the container of pod a process runs in, from the
// container id in its cgroup path and the pod's container statuses ("" when
// the process is not in one of them, e.g. in the pod cgroup itself).
func (a *Agent) containerOf(pod *corev1.Pod, pid int) (name, id string) {
	pp, ok, err := podcgroup.PodOfProcess(a.o.ProcRoot, pid)
	if err != nil || !ok || pp.ContainerID == "" || pp.Conmon || pp.UID != string(pod.UID) {
		return "", ""
	}
	for _, list := range [][]corev1.ContainerStatus{pod.Status.ContainerStatuses, pod.Status.InitContainerStatuses, pod.Status.EphemeralContainerStatuses} {
		for _, cs := range list {
			if _, cid, ok := strings.Cut(cs.ContainerID, "://"); ok && cid == pp.ContainerID {
				return cs.Name, pp.ContainerID
			}
		}
	}
	return "", pp.ContainerID
}

// writeStatuses applies this node's entry of each strategy's status where it
// changed. Strategies not for this node get an empty apply, which removes
// the entry this node's field manager owns.
func (a *Agent) writeStatuses(ctx context.Context, plans []plan) error {
	procs := a.counts()
	now := metav1.Now()
	var errs []error
	for _, p := range plans {
		key := p.s.Namespace + "/" + p.s.Name
		a.mu.Lock()
		prev, had := a.reported[key]
		a.mu.Unlock()
		if !had {
			prev = a.fromObject(p.s)
		}
		if !p.forNode {
			if prev.generation == 0 && !had {
				continue // never reported here
			}
			if err := a.applyStatus(ctx, p.s, nil); err != nil {
				errs = append(errs, err)
				continue
			}
			a.mu.Lock()
			a.reported[key] = nodeStatus{}
			a.mu.Unlock()
			continue
		}
		cur := nodeStatus{generation: p.s.Generation, pods: int32(p.pods), procs: procs[key], message: p.message}
		switch {
		case p.reason != "":
			cur.status, cur.reason = string(metav1.ConditionFalse), p.reason
		case a.o.Mode == ModeObserve:
			cur.status, cur.reason = string(metav1.ConditionFalse), "ObserveMode"
			cur.message = strings.TrimSpace(a.o.Reason + " " + cur.message)
		case p.unresolved > 0:
			cur.status, cur.reason = string(metav1.ConditionFalse), "CgroupNotFound"
		default:
			cur.status, cur.reason = string(metav1.ConditionTrue), "Applied"
			if cur.message == "" {
				cur.message = fmt.Sprintf("%d pod(s), %d process(es) in the scheduler's maps", cur.pods, cur.procs)
			}
		}
		cur.appliedAt, cur.transition = prev.appliedAt, prev.transition
		if cur.pods != prev.pods || cur.procs != prev.procs || cur.generation != prev.generation || cur.appliedAt.IsZero() {
			cur.appliedAt = now
		}
		if cur.status != prev.status || cur.reason != prev.reason || cur.transition.IsZero() {
			cur.transition = now
		}
		if had && cur == prev {
			continue
		}
		if err := a.applyStatus(ctx, p.s, &cur); err != nil {
			errs = append(errs, err)
			continue
		}
		a.mu.Lock()
		a.reported[key] = cur
		a.mu.Unlock()
	}
	// Forget strategies that are gone.
	a.mu.Lock()
	for key := range a.reported {
		if !slices.ContainsFunc(plans, func(p plan) bool { return p.s.Namespace+"/"+p.s.Name == key }) {
			delete(a.reported, key)
		}
	}
	a.mu.Unlock()
	return errors.Join(errs...)
}

// fromObject reads this node's entry back from the object (after a restart,
// so transition times survive it).
func (a *Agent) fromObject(s *v1alpha1.SchedulingStrategy) nodeStatus {
	for _, n := range s.Status.Nodes {
		if n.Node != a.o.Node {
			continue
		}
		ns := nodeStatus{generation: n.ObservedGeneration, pods: n.Pods, procs: n.Processes, appliedAt: n.AppliedAt}
		if c := meta.FindStatusCondition(n.Conditions, ConditionApplied); c != nil {
			ns.status, ns.reason, ns.message, ns.transition = string(c.Status), c.Reason, c.Message, c.LastTransitionTime
		}
		return ns
	}
	return nodeStatus{}
}

func (a *Agent) fieldManager() string { return "swiftlane-agent-" + a.o.Node }

// applyStatus server-side applies this node's entry (nil: no entry).
func (a *Agent) applyStatus(ctx context.Context, s *v1alpha1.SchedulingStrategy, st *nodeStatus) error {
	nodes := []v1alpha1.StrategyNodeStatus{}
	if st != nil {
		nodes = append(nodes, v1alpha1.StrategyNodeStatus{
			Node: a.o.Node, ObservedGeneration: st.generation, Pods: st.pods, Processes: st.procs, AppliedAt: st.appliedAt,
			Conditions: []metav1.Condition{{Type: ConditionApplied, Status: metav1.ConditionStatus(st.status), Reason: st.reason,
				Message: crdconv.Truncate(st.message, 1024), ObservedGeneration: st.generation, LastTransitionTime: st.transition}},
		})
	}
	body, err := json.Marshal(map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(), "kind": "SchedulingStrategy",
		"metadata": map[string]any{"name": s.Name, "namespace": s.Namespace},
		"status":   map[string]any{"nodes": nodes},
	})
	if err != nil {
		return err
	}
	err = a.crd.Patch(types.ApplyPatchType).Namespace(s.Namespace).Resource(v1alpha1.StrategiesResource.Resource).
		Name(s.Name).SubResource("status").Param("fieldManager", a.fieldManager()).Param("force", "true").
		Body(body).Do(ctx).Error()
	if apierrors.IsNotFound(err) {
		return nil // deleted meanwhile; its delete event resyncs
	}
	if err != nil {
		return fmt.Errorf("status of strategy %s/%s: %w", s.Namespace, s.Name, err)
	}
	return nil
}

// heartbeats keeps this node's SchedulingNode current and refreshes the
// strategies' process counts (processes come and go without any Kubernetes
// event: the scheduler's exec/fork/exit events update the Applier).
func (a *Agent) heartbeats(ctx context.Context) {
	tick := time.NewTicker(a.o.Interval)
	defer tick.Stop()
	for {
		if a.o.Mode == ModeObserve {
			// No scheduler, no process events: resolve again before reporting.
			a.queue.Add(resyncKey)
		} else {
			a.refreshCounts()
		}
		if err := a.heartbeat(ctx); err != nil && ctx.Err() == nil {
			a.o.Log.Warn("SchedulingNode heartbeat failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// refreshCounts queues a status write when a strategy's process count moved
// since it was reported; it writes only what changed.
func (a *Agent) refreshCounts() {
	procs := a.counts()
	a.mu.Lock()
	defer a.mu.Unlock()
	for key, st := range a.reported {
		if st.generation != 0 && st.procs != procs[key] {
			a.status.Add(statusKey)
			return
		}
	}
}

func (a *Agent) heartbeat(ctx context.Context) error {
	wl := a.workloads()
	state := "unknown"
	if a.o.SchedulerState != nil {
		state = a.o.SchedulerState()
	}
	nodeLabels := map[string]string{}
	md := map[string]any{"name": a.o.Node}
	if n, err := a.nodes.Get(a.o.Node); err == nil {
		nodeLabels = n.Labels
		// Owned by the Node: deleting the node garbage-collects its record.
		md["ownerReferences"] = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: n.Name, UID: n.UID}}
	}
	obj := map[string]any{"apiVersion": v1alpha1.GroupVersion.String(), "kind": "SchedulingNode", "metadata": md}
	body, _ := json.Marshal(obj)
	if err := a.crd.Patch(types.ApplyPatchType).Resource(v1alpha1.NodesResource.Resource).Name(a.o.Node).
		Param("fieldManager", a.fieldManager()).Param("force", "true").Body(body).Do(ctx).Error(); err != nil {
		return fmt.Errorf("apply SchedulingNode %s: %w", a.o.Node, err)
	}
	obj["status"] = v1alpha1.SchedulingNodeStatus{
		Version: a.o.Version, Kernel: a.o.Kernel, Mode: a.o.Mode, Reason: a.o.Reason, Labels: nodeLabels,
		HeartbeatSeconds: int32(max(a.o.Interval.Round(time.Second), time.Second) / time.Second),
		SchedulerState:   state, RegisteredAt: a.started, LastHeartbeat: metav1.Now(), Workloads: wl,
	}
	body, _ = json.Marshal(obj)
	if err := a.crd.Patch(types.ApplyPatchType).Resource(v1alpha1.NodesResource.Resource).Name(a.o.Node).
		SubResource("status").Param("fieldManager", a.fieldManager()).Param("force", "true").Body(body).Do(ctx).Error(); err != nil {
		return fmt.Errorf("status of SchedulingNode %s: %w", a.o.Node, err)
	}
	return nil
}
