// SPDX-License-Identifier: Apache-2.0

// Package crdstore is a store.Store kept in Kubernetes: strategies are
// SchedulingStrategy objects in one namespace (the object name is the
// strategy name), nodes are the cluster-scoped SchedulingNode objects.
//
// Strategies are served from an in-memory copy fed by one list and a watch
// of the namespace; that copy also keeps the change log watches resume from.
// Revisions are resourceVersions read as etcd revisions (see parseRevision):
//
//   - ListStrategies and Changes report the revision of the last change the
//     copy applied (after a (re)list: the list's resourceVersion). Strategy
//     revisions are those of the write that last changed what the API shows:
//     writes that change only status or foreign metadata are not changes.
//   - The change log starts at the list's revision and keeps the last
//     Options.LogSize changes; older or unknown ("future") revisions get
//     store.ErrCompacted, and so does everything after a relist (the watch
//     expired), since changes missed while not watching have no revisions.
//   - A write returns once the watch has delivered it, so a replica reads its
//     own writes. Replicas read each other's writes when their watches
//     deliver them (milliseconds), not before.
//
// Precedence (CreatedRevision) is the AnnotationCreatedRevision annotation.
// The generation-1 priority flag is stored as spec.class (true: critical) and
// read back as the class. ReplaceStrategies documents its partial-failure
// semantics; nodes.go how nodes are kept, revocations.go the token deny
// list, audit.go the audit history.
//
// Objects the API cannot represent (pod selectors with expressions, other
// namespace selectors, invalid RE2, ...) are not shown; they are logged and
// listed by Unrepresentable. One that becomes unrepresentable is a deletion
// in the change log, so agents stop applying what they could only half read.
package crdstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	"github.com/swiftlane/swiftlane/apis/swiftlane/v1alpha1"
	"github.com/swiftlane/swiftlane/internal/apitypes"
	"github.com/swiftlane/swiftlane/internal/store"
)

const (
	// syncTimeout bounds how long a write waits for the watch to deliver it.
	syncTimeout = 30 * time.Second
	listPage    = 500
)

// Options configure Open.
type Options struct {
	// Config reaches the Kubernetes API server.
	Config *rest.Config
	// Namespace holds the API's SchedulingStrategies.
	Namespace string
	// LogSize is how many changes the change log keeps (default store.DefaultLogSize).
	LogSize int
	// AuditSize is how many entries the audit history keeps (default
	// apitypes.DefaultAuditSize).
	AuditSize int
	Log       *slog.Logger
}

// Problem is a SchedulingStrategy the API does not show, and why.
type Problem struct {
	Name     string `json:"name"`
	Revision uint64 `json:"revision"`
	Reason   string `json:"reason"`
}

// Store is the Kubernetes-backed store. It is safe for concurrent use.
type Store struct {
	o       Options
	rc      *rest.RESTClient
	pc      runtime.ParameterCodec
	cancel  context.CancelFunc
	done    chan struct{} // the strategies' watch ended
	revDone chan struct{} // the revocations' informer ended
	rev     *informerCopy // the token deny list (revocations.go)
	audDone chan struct{} // the audit entries' informer ended
	audit   *informerCopy // the audit history (audit.go)

	mu       sync.Mutex
	objs     map[string]*entry // by name: every object in the namespace
	log      []store.Change
	start    uint64 // the log holds every change in (start, head]
	head     uint64 // revision of the last change applied, or of the last list
	seen     uint64 // revision of the last watch event applied, change or not
	resume   string // resourceVersion the watch resumes from (events and bookmarks)
	changed  chan struct{}
	onChange []func()
	problems map[string]Problem

	cmu      sync.Mutex
	counters map[string]*apitypes.Counters // by node; see Heartbeat
}

type entry struct {
	obj *v1alpha1.SchedulingStrategy
	st  *apitypes.Strategy // the API's view; nil when not shown
}

// ResolvesPodLabels says pod selectors can match: the agents of a
// Kubernetes store (the kubeagent) know every pod's labels.
func (s *Store) ResolvesPodLabels() bool { return true }

// Open lists the namespace's strategies, token revocations and audit
// entries and starts watching them. It fails if the CRDs are not installed or the credentials
// may not read them.
func Open(ctx context.Context, o Options) (*Store, error) {
	if o.Config == nil {
		return nil, errors.New("crdstore: Options.Config is required")
	}
	if errs := validation.IsDNS1123Label(o.Namespace); len(errs) > 0 {
		return nil, fmt.Errorf("namespace %q: %s", o.Namespace, errs[0])
	}
	if o.LogSize <= 0 {
		o.LogSize = store.DefaultLogSize
	}
	if o.AuditSize <= 0 {
		o.AuditSize = apitypes.DefaultAuditSize
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"}) // Status, for errors
	cfg := rest.CopyConfig(o.Config)
	cfg.GroupVersion = &v1alpha1.GroupVersion
	cfg.APIPath = "/apis"
	cfg.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	if cfg.UserAgent == "" {
		cfg.UserAgent = "swiftlane-api"
	}
	if cfg.QPS == 0 { // client-go's default (5/s) would throttle a replace of a few dozen strategies
		cfg.QPS, cfg.Burst = 50, 100
	}
	rc, err := rest.RESTClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	s := &Store{
		o: o, rc: rc, pc: runtime.NewParameterCodec(scheme), done: make(chan struct{}),
		changed: make(chan struct{}), problems: map[string]Problem{}, counters: map[string]*apitypes.Counters{},
	}
	if err := s.nodeReq("GET").VersionedParams(&metav1.ListOptions{Limit: 1}, s.pc).Do(ctx).Error(); err != nil {
		return nil, s.accessError(v1alpha1.NodesResource.Resource, err)
	}
	if err := s.relist(ctx); err != nil {
		return nil, s.accessError(v1alpha1.StrategiesResource.Resource, err)
	}
	wctx, cancel := context.WithCancel(context.Background())
	s.revDone, s.audDone = make(chan struct{}), make(chan struct{})
	if err := s.startRevocations(ctx, wctx, s.revDone); err != nil {
		cancel()
		return nil, err
	}
	if err := s.startAudit(ctx, wctx, s.audDone); err != nil {
		cancel()
		return nil, err
	}
	s.cancel = cancel
	go s.run(wctx)
	return s, nil
}

func (s *Store) accessError(resource string, err error) error {
	where := "in namespace " + s.o.Namespace
	if resource == v1alpha1.NodesResource.Resource {
		where = "(cluster-scoped)"
	}
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("%s.%s: the CRD is not installed: kubectl apply -f deploy/helm/swiftlane/crds/", resource, v1alpha1.GroupVersion.Group)
	case apierrors.IsForbidden(err), apierrors.IsUnauthorized(err):
		return fmt.Errorf("%s.%s %s: %v: grant the API's service account get, list, watch, create, update, delete on it (the Helm chart's RBAC does)", resource, v1alpha1.GroupVersion.Group, where, err)
	}
	return fmt.Errorf("%s.%s %s: %w", resource, v1alpha1.GroupVersion.Group, where, err)
}

// Close stops the watch.
func (s *Store) Close() error {
	if s.cancel != nil {
		s.cancel()
		<-s.done
		<-s.revDone
		<-s.audDone
		s.cancel = nil
	}
	return nil
}

// OnChange registers fn to run after every strategy change the watch
// applies, including those made outside this store (kubectl, another API
// replica). fn must not block.
func (s *Store) OnChange(fn func()) {
	s.mu.Lock()
	s.onChange = append(s.onChange, fn)
	s.mu.Unlock()
}

// Unrepresentable lists the SchedulingStrategies in the namespace that the
// API does not show, by name.
func (s *Store) Unrepresentable() []Problem {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Problem, 0, len(s.problems))
	for _, p := range s.problems {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func (s *Store) strategyReq(verb string) *rest.Request {
	return s.rc.Verb(verb).Namespace(s.o.Namespace).Resource(v1alpha1.StrategiesResource.Resource)
}

func (s *Store) nodeReq(verb string) *rest.Request {
	return s.rc.Verb(verb).Resource(v1alpha1.NodesResource.Resource)
}

// The in-memory copy.

// relist replaces the copy with a fresh list and restarts the change log at
// the list's revision.
func (s *Store) relist(ctx context.Context) error {
	var items []v1alpha1.SchedulingStrategy
	var listRV, cont string
	for {
		var l v1alpha1.SchedulingStrategyList
		err := s.strategyReq("GET").VersionedParams(&metav1.ListOptions{Limit: listPage, Continue: cont}, s.pc).Do(ctx).Into(&l)
		if err != nil {
			return err
		}
		if listRV == "" {
			listRV = l.ResourceVersion // pages share the first page's snapshot
		}
		items = append(items, l.Items...)
		if cont = l.Continue; cont == "" {
			break
		}
	}
	rev, err := parseRevision(listRV)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.objs = make(map[string]*entry, len(items))
	s.problems = map[string]Problem{}
	for i := range items {
		o := &items[i]
		e := &entry{obj: o, st: s.viewLocked(o)}
		if e.st != nil {
			if e.st.Revision, err = parseRevision(o.ResourceVersion); err != nil {
				s.mu.Unlock()
				return err
			}
		}
		s.objs[o.Name] = e
	}
	s.log = nil
	s.head, s.seen = max(s.head, rev), max(s.seen, rev)
	s.start = s.head
	s.resume = listRV
	s.broadcastLocked()
	subs := s.onChange
	s.mu.Unlock()
	for _, fn := range subs {
		fn()
	}
	return nil
}

// viewLocked is the API's view of an object, nil if not shown; it records
// and logs objects the API cannot represent.
func (s *Store) viewLocked(o *v1alpha1.SchedulingStrategy) *apitypes.Strategy {
	if o.DeletionTimestamp != nil { // finalizers pending: gone for the API
		delete(s.problems, o.Name)
		return nil
	}
	st, err := fromObject(o)
	if err != nil {
		rev, _ := parseRevision(o.ResourceVersion)
		if p, ok := s.problems[o.Name]; !ok || p.Reason != err.Error() {
			s.o.Log.Warn("SchedulingStrategy not shown by the API: it cannot represent it",
				"namespace", s.o.Namespace, "name", o.Name, "resourceVersion", o.ResourceVersion, "reason", err.Error())
		}
		s.problems[o.Name] = Problem{Name: o.Name, Revision: rev, Reason: err.Error()}
		return nil
	}
	delete(s.problems, o.Name)
	return &st
}

// apply folds one watch event into the copy; it reports whether the API's
// view changed.
func (s *Store) apply(typ watch.EventType, o *v1alpha1.SchedulingStrategy) (bool, error) {
	rev, err := parseRevision(o.ResourceVersion)
	if err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resume = o.ResourceVersion
	if rev <= s.seen { // already in the list this watch resumed from
		return false, nil
	}
	s.seen = rev
	defer s.broadcastLocked()
	var prev, next *apitypes.Strategy
	if old := s.objs[o.Name]; old != nil {
		prev = old.st
	}
	if typ == watch.Deleted {
		delete(s.objs, o.Name)
		delete(s.problems, o.Name)
	} else {
		next = s.viewLocked(o)
		s.objs[o.Name] = &entry{obj: o, st: next}
	}
	var c store.Change
	switch {
	case next == nil && prev == nil:
		return false, nil
	case next == nil:
		c = store.Change{Revision: rev, Type: store.Delete, Name: o.Name}
	case prev != nil && sameView(*prev, *next):
		next.Revision = prev.Revision // a status or foreign metadata write
		return false, nil
	default:
		next.Revision = rev
		cp := cloneStrategy(*next)
		c = store.Change{Revision: rev, Type: store.Put, Name: o.Name, Strategy: &cp}
	}
	s.log = append(s.log, c)
	s.head = rev
	if over := len(s.log) - s.o.LogSize; over > 0 {
		s.start = s.log[over-1].Revision
		s.log = append(s.log[:0:0], s.log[over:]...)
	}
	return true, nil
}

func (s *Store) broadcastLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// run keeps the watch going until Close: it resumes after a dropped
// connection and relists when the resume point has expired.
func (s *Store) run(ctx context.Context) {
	defer close(s.done)
	backoff := 100 * time.Millisecond
	relist := false
	for ctx.Err() == nil {
		var err error
		if relist {
			if err = s.relist(ctx); err == nil {
				relist = false
				s.o.Log.Info("SchedulingStrategies relisted; watchers resynchronise", "namespace", s.o.Namespace, "revision", s.Revision())
			}
		}
		if err == nil {
			var progressed bool
			progressed, err = s.watchOnce(ctx)
			if progressed {
				backoff = 100 * time.Millisecond
			}
		}
		switch {
		case ctx.Err() != nil:
			return
		case apierrors.IsResourceExpired(err) || apierrors.IsGone(err):
			relist = true
			continue // at once: nothing is delivered until then
		case err != nil:
			s.o.Log.Warn("watch of SchedulingStrategies failed; retrying", "namespace", s.o.Namespace, "err", err, "in", backoff)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}

// watchOnce follows one watch stream from the resume point until it ends.
func (s *Store) watchOnce(ctx context.Context) (progressed bool, err error) {
	s.mu.Lock()
	rv := s.resume
	s.mu.Unlock()
	timeout := int64(300 + time.Now().UnixNano()%300) // spread the replicas' reconnects
	w, err := s.strategyReq("GET").VersionedParams(&metav1.ListOptions{
		Watch: true, ResourceVersion: rv, AllowWatchBookmarks: true, TimeoutSeconds: &timeout,
	}, s.pc).Watch(ctx)
	if err != nil {
		return false, err
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		progressed = true
		switch ev.Type {
		case watch.Added, watch.Modified, watch.Deleted:
			o, ok := ev.Object.(*v1alpha1.SchedulingStrategy)
			if !ok {
				return true, fmt.Errorf("watch sent %T", ev.Object)
			}
			changed, err := s.apply(ev.Type, o)
			if err != nil {
				return true, err
			}
			if changed {
				s.mu.Lock()
				subs := s.onChange
				s.mu.Unlock()
				for _, fn := range subs {
					fn()
				}
			}
		case watch.Bookmark:
			if o, ok := ev.Object.(*v1alpha1.SchedulingStrategy); ok && o.ResourceVersion != "" {
				s.mu.Lock()
				s.resume = o.ResourceVersion
				s.mu.Unlock()
			}
		case watch.Error:
			return true, apierrors.FromObject(ev.Object)
		}
	}
	return progressed, nil
}

// Revision is the revision of the last change the copy applied.
func (s *Store) Revision() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.head
}

// waitUntil waits until cond (called with s.mu held) holds.
func (s *Store) waitUntil(ctx context.Context, what string, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, syncTimeout)
	defer cancel()
	for {
		s.mu.Lock()
		ok, ch := cond(), s.changed
		s.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("%s was written, but the watch of namespace %s has not delivered it (%w): check the Kubernetes API server", what, s.o.Namespace, ctx.Err())
		}
	}
}

// waitSeen waits until the watch has applied revision rev.
func (s *Store) waitSeen(ctx context.Context, what string, rev uint64) error {
	return s.waitUntil(ctx, what, func() bool { return s.seen >= rev })
}

var _ store.Store = (*Store)(nil)
