// SPDX-License-Identifier: Apache-2.0

package kubesource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/swiftlane/swiftlane/internal/lb/services"
)

// LabelServiceProxyName marks a Service as handled by a proxy other than
// kube-proxy (kube-proxy skips Services that carry it).
const LabelServiceProxyName = "service.kubernetes.io/service-proxy-name"

// DefaultDebounce is how long the Source keeps collecting changes after the
// first one of a burst before it applies them.
const DefaultDebounce = 100 * time.Millisecond

// Options configure a Source.
type Options struct {
	// Node holds the node settings every Config carries (its Services are
	// ignored): what Kubernetes does not describe.
	Node *services.Config
	// ProxyName, when set, serves only Services labelled
	// service.kubernetes.io/service-proxy-name=ProxyName, so the load
	// balancer can run next to kube-proxy for the Services given to it.
	// Empty serves the Services without that label, as kube-proxy does.
	ProxyName string
	// Debounce is how long changes are collected after the first one
	// before they are applied together (default DefaultDebounce).
	Debounce time.Duration
	Log      *slog.Logger
}

// Source watches Services and EndpointSlices and hands each new Config to
// an apply function. Run it once.
type Source struct {
	o      Options
	client kubernetes.Interface

	svcs   corelisters.ServiceLister
	slices cache.Indexer

	mu    sync.Mutex
	dirty map[string]bool // namespace/name of Services to translate again
	kick  chan struct{}   // capacity 1: something is dirty

	// Owned by Run's goroutine.
	translated map[string][]services.Service
	notes      map[string][]Note
	conflicts  []Note // between Services (external IPs), logged when they change
}

// New checks the options. Nothing is watched until Run.
func New(client kubernetes.Interface, o Options) (*Source, error) {
	if client == nil || o.Node == nil {
		return nil, errors.New("kubesource: client and Options.Node are required")
	}
	if o.Debounce <= 0 {
		o.Debounce = DefaultDebounce
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return &Source{
		o: o, client: client,
		dirty:      map[string]bool{},
		kick:       make(chan struct{}, 1),
		translated: map[string][]services.Service{},
		notes:      map[string][]Note{},
	}, nil
}

const bySvcIndex = "service"

// sliceService is the namespace/name of the Service a slice belongs to.
func sliceService(s *discoveryv1.EndpointSlice) string {
	name := s.Labels[discoveryv1.LabelServiceName]
	if name == "" {
		return ""
	}
	return s.Namespace + "/" + name
}

// selectors are the label selectors of the two informers. Services: the
// ones this proxy serves (see Options.ProxyName). Slices: those that name a
// Service and are not for a headless one; they are joined through the
// Services lister, so slices whose Service is not served are never used
// (and slices written by hand need not copy the Service's labels).
func (s *Source) selectors() (svcSel, sliceSel string, err error) {
	var proxy *labels.Requirement
	if s.o.ProxyName == "" {
		proxy, err = labels.NewRequirement(LabelServiceProxyName, selection.DoesNotExist, nil)
	} else {
		proxy, err = labels.NewRequirement(LabelServiceProxyName, selection.Equals, []string{s.o.ProxyName})
	}
	if err != nil {
		return "", "", fmt.Errorf("--service-proxy-name %q: %w", s.o.ProxyName, err)
	}
	named, _ := labels.NewRequirement(discoveryv1.LabelServiceName, selection.Exists, nil)
	notHeadless, _ := labels.NewRequirement(corev1.IsHeadlessService, selection.DoesNotExist, nil)
	return labels.NewSelector().Add(*proxy).String(), labels.NewSelector().Add(*named, *notHeadless).String(), nil
}

// stripManagedFields keeps the informer caches small: field ownership is
// the largest part of most objects and is never read here.
func stripManagedFields(obj any) (any, error) {
	if a, err := meta.Accessor(obj); err == nil {
		a.SetManagedFields(nil)
	}
	return obj, nil
}

// Run watches until ctx ends. apply receives each new Config: the first
// once both caches are in sync (so a restart never applies a partial view),
// then one per burst of changes, Options.Debounce after its first change.
// Only Services touched by a change are translated again, and the balancer
// rewrites only the entries that differ. A failed apply is retried with
// backoff (1 s doubling to 30 s) or at the next change, whichever is first.
func (s *Source) Run(ctx context.Context, apply func(*services.Config) error) error {
	svcSel, sliceSel, err := s.selectors()
	if err != nil {
		return err
	}
	svcFactory := informers.NewSharedInformerFactoryWithOptions(s.client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = svcSel }),
		informers.WithTransform(stripManagedFields))
	sliceFactory := informers.NewSharedInformerFactoryWithOptions(s.client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = sliceSel }),
		informers.WithTransform(stripManagedFields))
	svcInf := svcFactory.Core().V1().Services()
	sliceInf := sliceFactory.Discovery().V1().EndpointSlices()
	if err := sliceInf.Informer().AddIndexers(cache.Indexers{bySvcIndex: func(obj any) ([]string, error) {
		if es, ok := obj.(*discoveryv1.EndpointSlice); ok {
			if k := sliceService(es); k != "" {
				return []string{k}, nil
			}
		}
		return nil, nil
	}}); err != nil {
		return err
	}
	s.svcs = svcInf.Lister()
	s.slices = sliceInf.Informer().GetIndexer()

	svcReg, err := svcInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { s.markObj(obj) },
		UpdateFunc: func(_, obj any) { s.markObj(obj) },
		DeleteFunc: func(obj any) { s.markObj(obj) },
	})
	if err != nil {
		return err
	}
	sliceReg, err := sliceInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { s.markSlice(obj) },
		UpdateFunc: func(old, obj any) {
			s.markSlice(old) // the service-name label may have changed
			s.markSlice(obj)
		},
		DeleteFunc: func(obj any) { s.markSlice(obj) },
	})
	if err != nil {
		return err
	}

	ctx, cancel := context.WithCancel(ctx)
	defer func() {
		cancel()
		svcFactory.Shutdown()
		sliceFactory.Shutdown()
	}()
	svcFactory.Start(ctx.Done())
	sliceFactory.Start(ctx.Done())
	s.o.Log.Info("watching Services and EndpointSlices", "services", svcSel, "endpointslices", sliceSel)
	// The registrations' HasSynced also wait for the handlers to have seen
	// every initial object, so all of them are dirty for the first flush.
	if !cache.WaitForCacheSync(ctx.Done(), svcReg.HasSynced, sliceReg.HasSynced) {
		if ctx.Err() != nil {
			return nil
		}
		return errors.New("kubesource: caches did not sync")
	}

	const minBackoff, maxBackoff = time.Second, 30 * time.Second
	backoff := minBackoff
	var retry <-chan time.Time
	flush := func() {
		cfg := s.flush()
		if err := cfg.Validate(); err != nil {
			// Translation only emits what Validate accepts; reaching this
			// is a bug, and applying would replace good state with bad.
			s.o.Log.Error("translated config is invalid; not applied", "err", err)
			return
		}
		if err := apply(cfg); err != nil {
			s.o.Log.Error("apply failed; will retry", "err", err, "in", backoff)
			retry = time.After(backoff)
			backoff = min(2*backoff, maxBackoff)
			return
		}
		retry, backoff = nil, minBackoff
	}
	flush() // the initial full view: every object was marked by its Add
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.kick:
			// Let the rest of a burst (a rollout, a resync) join.
			t := time.NewTimer(s.o.Debounce)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			}
			// The changes that arrived while waiting are in this flush;
			// their kicks must not cause a second, empty one.
			select {
			case <-s.kick:
			default:
			}
		case <-retry:
		}
		flush()
	}
}

func (s *Source) mark(key string) {
	if key == "" {
		return
	}
	s.mu.Lock()
	s.dirty[key] = true
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

func (s *Source) markObj(obj any) {
	k, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err == nil {
		s.mark(k)
	}
}

func (s *Source) markSlice(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if es, ok := obj.(*discoveryv1.EndpointSlice); ok {
		s.mark(sliceService(es))
	}
}

// flush translates the dirty Services again from the caches and assembles
// the whole Config. Notes are logged when a Service's notes change, so each
// is logged once rather than on every update.
func (s *Source) flush() *services.Config {
	s.mu.Lock()
	dirty := s.dirty
	s.dirty = map[string]bool{}
	s.mu.Unlock()
	for _, key := range slices.Sorted(maps.Keys(dirty)) {
		ns, name, _ := cache.SplitMetaNamespaceKey(key)
		svc, err := s.svcs.Services(ns).Get(name)
		if apierrors.IsNotFound(err) {
			delete(s.translated, key)
			delete(s.notes, key)
			continue
		}
		if err != nil {
			s.o.Log.Error("service lister", "service", key, "err", err)
			continue
		}
		objs, err := s.slices.ByIndex(bySvcIndex, key)
		if err != nil {
			s.o.Log.Error("endpointslice index", "service", key, "err", err)
			continue
		}
		eps := make([]*discoveryv1.EndpointSlice, 0, len(objs))
		for _, o := range objs {
			eps = append(eps, o.(*discoveryv1.EndpointSlice))
		}
		out, notes := translateService(s.o.Node, svc, eps)
		s.translated[key] = out
		if !slices.Equal(notes, s.notes[key]) {
			for _, n := range notes {
				s.o.Log.Log(context.Background(), n.Level, n.Reason, "service", n.Service)
			}
			s.notes[key] = notes
		}
	}
	cfg, conflicts := assemble(s.o.Node, s.translated)
	if !slices.Equal(conflicts, s.conflicts) {
		for _, n := range conflicts {
			s.o.Log.Log(context.Background(), n.Level, n.Reason, "service", n.Service)
		}
		s.conflicts = conflicts
	}
	return cfg
}
