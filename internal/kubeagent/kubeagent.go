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
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/swiftlane/swiftlane/apis/swiftlane/v1alpha1"
	"github.com/swiftlane/swiftlane/internal/apitypes"
	"github.com/swiftlane/swiftlane/internal/applier"
	"github.com/swiftlane/swiftlane/internal/podcgroup"
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
	Applier         *applier.Applier
	Cgroups         PodCgroups
	// Mode is ModeSchedule or ModeObserve; Reason says why observe.
	Mode, Reason    string
	Version, Kernel string
	// Interval is the SchedulingNode heartbeat and status refresh period (default 10 s).
	Interval time.Duration
	// SchedulerState reports sched_ext's state (nil: "unknown").
	SchedulerState func() string
	// Carriers lists what automatic mode prioritises (nil: automatic mode off).
	Carriers func() []apitypes.Carrier
	Log      *slog.Logger
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

func (a *Agent) fieldManager() string { return "swiftlane-agent-" + a.o.Node }

// NewResolver finds pods' cgroups on this node: it detects the cgroup
// layout and follows the kubelet's --cgroup-root and --cgroup-driver
// (driver "": try both).
func NewResolver(cgRoot, driver string) (Resolver, error) {
	switch driver {
	case "", string(podcgroup.Systemd), string(podcgroup.Cgroupfs):
	default:
		return Resolver{}, fmt.Errorf("--kubelet-cgroup-driver %q is unknown: use systemd or cgroupfs (as the kubelet's --cgroup-driver)", driver)
	}
	layout, err := podcgroup.DetectLayout(podcgroup.DefaultMountinfo, podcgroup.DefaultRoot)
	if err != nil {
		return Resolver{}, fmt.Errorf("cgroup layout: %w", err)
	}
	res, err := podcgroup.NewResolver(layout, cgRoot, podcgroup.Driver(driver))
	if err != nil {
		return Resolver{}, fmt.Errorf("--kubelet-cgroup-root/--kubelet-cgroup-driver: %w", err)
	}
	return Resolver{res}, nil
}
