// SPDX-License-Identifier: Apache-2.0

package crdstore

import (
	"context"
	"fmt"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"github.com/swiftlane/swiftlane/apis/swiftlane/v1alpha1"
)

// informerCopy is a replica's copy of one kind of object in the namespace,
// fed by an informer (list, then watch). Every event wakes waitFor, so a
// writer can return once its own write is in the copy: a replica reads its
// own writes; others see them when their watches deliver them.
type informerCopy struct {
	idx cache.Indexer

	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every event
}

func (c *informerCopy) broadcast() {
	c.mu.Lock()
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
}

// waitFor waits until cond holds, checking it after every event, for at
// most syncTimeout; what names the write in the error.
func (c *informerCopy) waitFor(ctx context.Context, ns, what string, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, syncTimeout)
	defer cancel()
	for {
		c.mu.Lock()
		ch := c.changed
		c.mu.Unlock()
		if cond() {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("%s was written, but the watch of namespace %s has not delivered it (%w): check the Kubernetes API server", what, ns, ctx.Err())
		}
	}
}

// stripManagedFields keeps the copy small: the server-side apply
// bookkeeping is about as large as a small object and never read here.
func stripManagedFields(o any) (any, error) {
	if m, ok := o.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	return o, nil
}

// startInformer checks access to res in the namespace and runs an informer
// of its objects (obj: the type) until run ends, closing done then; it
// returns once the first list is in.
func (s *Store) startInformer(ctx, run context.Context, done chan<- struct{}, res schema.GroupVersionResource, obj runtime.Object, idx cache.Indexers) (*informerCopy, error) {
	if err := s.rc.Verb("GET").Namespace(s.o.Namespace).Resource(res.Resource).VersionedParams(&metav1.ListOptions{Limit: 1}, s.pc).Do(ctx).Error(); err != nil {
		return nil, s.accessError(res.Resource, err)
	}
	c := &informerCopy{changed: make(chan struct{})}
	st, ctrl := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: cache.NewListWatchFromClient(s.rc, res.Resource, s.o.Namespace, fields.Everything()),
		ObjectType:    obj,
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { c.broadcast() },
			UpdateFunc: func(any, any) { c.broadcast() },
			DeleteFunc: func(any) { c.broadcast() },
		},
		Indexers:  idx,
		Transform: stripManagedFields,
	})
	c.idx = st.(cache.Indexer)
	go func() {
		defer close(done)
		ctrl.RunWithContext(run)
	}()
	if !cache.WaitForCacheSync(ctx.Done(), ctrl.HasSynced) {
		return nil, fmt.Errorf("%s.%s in namespace %s: the first list did not arrive: %w", res.Resource, v1alpha1.GroupVersion.Group, s.o.Namespace, ctx.Err())
	}
	return c, nil
}
