// SPDX-License-Identifier: Apache-2.0

package crdstore

import (
	"context"
	"errors"
	"fmt"
	"sort"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/swiftlane/swiftlane/apis/swiftlane/v1alpha1"
	"github.com/swiftlane/swiftlane/internal/apitypes"
	"github.com/swiftlane/swiftlane/internal/store"
	"github.com/swiftlane/swiftlane/internal/strategy"
)

func (s *Store) ListStrategies(_ context.Context) ([]apitypes.Strategy, uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	list := make([]apitypes.Strategy, 0, len(s.objs))
	for _, e := range s.objs {
		if e.st != nil {
			list = append(list, cloneStrategy(*e.st))
		}
	}
	apitypes.SortByPrecedence(list)
	return list, s.head, nil
}

func (s *Store) GetStrategy(_ context.Context, name string) (apitypes.Strategy, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.objs[name]; e != nil && e.st != nil {
		return cloneStrategy(*e.st), nil
	}
	return apitypes.Strategy{}, store.ErrNotFound
}

func (s *Store) Changes(_ context.Context, after uint64, limit int) ([]store.Change, uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if after < s.start || after > s.head {
		return nil, s.head, store.ErrCompacted
	}
	i := sort.Search(len(s.log), func(i int) bool { return s.log[i].Revision > after })
	n := len(s.log) - i
	if limit > 0 {
		n = min(n, limit)
	}
	out := make([]store.Change, n)
	for k, c := range s.log[i : i+n] {
		if c.Strategy != nil {
			cp := cloneStrategy(*c.Strategy)
			c.Strategy = &cp
		}
		out[k] = c
	}
	return out, s.head, nil
}

// nextCreatedLocked is the precedence key for a strategy placed after
// every other (and after after): the current revision, or one past the
// largest key in use if that is larger (the annotation can be set by hand).
func (s *Store) nextCreatedLocked(after uint64) uint64 {
	next := max(s.head, after+1)
	for _, e := range s.objs {
		if cr := createdRevision(e.obj); cr >= next {
			next = cr + 1
		}
	}
	return next
}

// CreateStrategy and UpdateStrategy return in on errors, as the bolt store
// does (the API names the strategy in its error from it).
func (s *Store) CreateStrategy(ctx context.Context, in apitypes.Strategy) (apitypes.Strategy, error) {
	obj, err := toObject(s.o.Namespace, in)
	if err != nil {
		return in, err
	}
	s.mu.Lock()
	setCreatedRevision(obj, s.nextCreatedLocked(0))
	s.mu.Unlock()
	out, err := s.create(ctx, obj, "", false)
	if err != nil {
		return in, err
	}
	st, err := s.shownAfter(ctx, out)
	if err != nil {
		return in, err
	}
	return st, nil
}

func (s *Store) create(ctx context.Context, obj *v1alpha1.SchedulingStrategy, fieldPrefix string, dryRun bool) (*v1alpha1.SchedulingStrategy, error) {
	req := s.strategyReq("POST").Body(obj)
	if dryRun {
		req = req.Param("dryRun", metav1.DryRunAll)
	}
	var out v1alpha1.SchedulingStrategy
	if err := req.Do(ctx).Into(&out); err != nil {
		return nil, s.writeError("create", obj.Name, fieldPrefix, err)
	}
	return &out, nil
}

// shownAfter waits until the watch has delivered a write and returns the
// API's view of the object as the copy now has it.
func (s *Store) shownAfter(ctx context.Context, out *v1alpha1.SchedulingStrategy) (apitypes.Strategy, error) {
	rev, err := parseRevision(out.ResourceVersion)
	if err != nil {
		return apitypes.Strategy{}, err
	}
	if err := s.waitSeen(ctx, "strategy "+out.Name, rev); err != nil {
		return apitypes.Strategy{}, err
	}
	s.mu.Lock()
	e := s.objs[out.Name]
	if e != nil && e.st != nil {
		st := cloneStrategy(*e.st)
		s.mu.Unlock()
		return st, nil
	}
	s.mu.Unlock()
	// Gone again already (a concurrent delete), or not representable.
	st, err := fromObject(out)
	if err != nil {
		return apitypes.Strategy{}, fmt.Errorf("strategy %s was written but the API cannot show it: %v", out.Name, err)
	}
	st.Revision = rev
	return st, nil
}

// current is a copy of the cached object of a strategy that exists
// (representable or not) and is not being deleted.
func (s *Store) current(name string) *v1alpha1.SchedulingStrategy {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.objs[name]
	if e == nil || e.obj.DeletionTimestamp != nil {
		return nil
	}
	return e.obj.DeepCopy()
}

// UpdateStrategy replaces the spec of an existing object and keeps its
// precedence. An object the API cannot represent is updated too (PUT makes
// it representable). Metadata others set (labels, annotations) is kept: the
// write carries the resourceVersion it was based on, and on a conflict the
// object is read again and the spec re-applied.
func (s *Store) UpdateStrategy(ctx context.Context, in apitypes.Strategy) (apitypes.Strategy, error) {
	want, err := toObject(s.o.Namespace, in)
	if err != nil {
		return in, err
	}
	cur := s.current(in.Name)
	if cur == nil {
		return in, store.ErrNotFound
	}
	out, err := s.update(ctx, cur, "", false, func(o *v1alpha1.SchedulingStrategy) { o.Spec = want.Spec })
	if err != nil {
		return in, err
	}
	st, err := s.shownAfter(ctx, out)
	if err != nil {
		return in, err
	}
	return st, nil
}

// update writes mutate(cur) conditionally on cur's resourceVersion. On a
// conflict (which the API server reports before validating, so a dry run
// has them too) it re-reads the object and tries again, backing off, until
// the request's deadline (retryConflicts).
func (s *Store) update(ctx context.Context, cur *v1alpha1.SchedulingStrategy, fieldPrefix string, dryRun bool, mutate func(*v1alpha1.SchedulingStrategy)) (*v1alpha1.SchedulingStrategy, error) {
	name := cur.Name
	var out v1alpha1.SchedulingStrategy
	err := retryConflicts(ctx, "update strategy "+name, func(ctx context.Context) error {
		if cur == nil { // the last try conflicted
			var fresh v1alpha1.SchedulingStrategy
			if err := s.strategyReq("GET").Name(name).Do(ctx).Into(&fresh); err != nil {
				return s.writeError("read", name, fieldPrefix, err)
			}
			if fresh.DeletionTimestamp != nil {
				return store.ErrNotFound
			}
			cur = &fresh
		}
		o := cur.DeepCopy()
		mutate(o)
		req := s.strategyReq("PUT").Name(name).Body(o)
		if dryRun {
			req = req.Param("dryRun", metav1.DryRunAll)
		}
		err := req.Do(ctx).Into(&out)
		if apierrors.IsConflict(err) {
			cur = nil
			return err
		}
		if err != nil {
			return s.writeError("update", name, fieldPrefix, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &out, nil
}

func (s *Store) DeleteStrategy(ctx context.Context, name string) (uint64, error) {
	s.mu.Lock()
	e := s.objs[name]
	if e == nil || e.st == nil {
		s.mu.Unlock()
		return 0, store.ErrNotFound
	}
	uid := e.obj.UID
	s.mu.Unlock()
	return s.delete(ctx, name, uid)
}

// delete deletes the object with this UID (not a namesake created since)
// and waits until the watch has delivered the deletion.
func (s *Store) delete(ctx context.Context, name string, uid types.UID) (uint64, error) {
	res := s.strategyReq("DELETE").Name(name).Body(&metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}).Do(ctx)
	if err := res.Error(); err != nil {
		if apierrors.IsConflict(err) { // the UID differs: that object is gone
			return 0, store.ErrNotFound
		}
		return 0, s.writeError("delete", name, "", err)
	}
	// The response is the object at the deletion's revision (with
	// deletionTimestamp set if finalizers hold it).
	if obj, err := res.Get(); err == nil {
		if o, ok := obj.(*v1alpha1.SchedulingStrategy); ok {
			if rev, err := parseRevision(o.ResourceVersion); err == nil {
				return rev, s.waitSeen(ctx, "deletion of strategy "+name, rev)
			}
		}
	}
	var rev uint64
	err := s.waitUntil(ctx, "deletion of strategy "+name, func() bool {
		e := s.objs[name]
		rev = s.head
		return e == nil || e.obj.UID != uid || e.st == nil
	})
	return rev, err
}

// ReplaceStrategies makes list the strategies owner owns (AnnotationOwner),
// in list order (the generation-1 API's "replace all", scoped to the
// client); other strategies are not touched. Kubernetes has no transaction
// over several objects, so it runs in three steps:
//
//  1. every create and update is sent as a dry run: a list the API server
//     refuses (schema, CEL, admission) is refused whole, with the field of
//     the first bad entry, and nothing is written;
//  2. entries are written in list order: new ones created, changed ones
//     updated, ones out of order given a later precedence key; entries
//     already equal and in order are not written (no change event);
//  3. strategies not in the list are deleted.
//
// If a write fails midway (a concurrent writer, the API server going away),
// the error says which entry; the entries before it are written and nothing
// is deleted yet, so the store holds a superset of the old and the new
// list. Repeating the request finishes the job (it is idempotent). Objects
// the API cannot represent are not deleted: the caller never saw them.
func (s *Store) ReplaceStrategies(ctx context.Context, owner string, list []apitypes.Strategy) ([]apitypes.Strategy, uint64, error) {
	type plan struct {
		want *v1alpha1.SchedulingStrategy
		cur  *v1alpha1.SchedulingStrategy // nil: create
	}
	plans := make([]plan, len(list))
	seen := map[string]bool{}
	for i, st := range list {
		if seen[st.Name] {
			return nil, 0, fmt.Errorf("%w: strategy %q twice in one list", store.ErrExists, st.Name)
		}
		seen[st.Name] = true
		st.Owner = owner
		list[i] = st
		obj, err := toObject(s.o.Namespace, st)
		if err != nil {
			return nil, 0, prefixed(err, i)
		}
		cur := s.current(st.Name)
		if cur != nil && cur.Annotations[v1alpha1.AnnotationOwner] != owner {
			return nil, 0, &store.OwnedError{Index: i, Name: st.Name, Owner: cur.Annotations[v1alpha1.AnnotationOwner]}
		}
		plans[i] = plan{want: obj, cur: cur}
	}
	// 1. Dry runs.
	for i, p := range plans {
		var err error
		if p.cur == nil {
			_, err = s.create(ctx, p.want, fmt.Sprintf("strategies[%d].", i), true)
		} else {
			_, err = s.update(ctx, p.cur, fmt.Sprintf("strategies[%d].", i), true, func(o *v1alpha1.SchedulingStrategy) { o.Spec = p.want.Spec })
		}
		if err != nil {
			return nil, 0, err
		}
	}
	// 2. Writes in list order.
	var last uint64 // revision of the last write
	var prevKey uint64
	for i, p := range plans {
		key := uint64(0)
		if p.cur != nil {
			key = createdRevision(p.cur)
		}
		moved := p.cur == nil || (i > 0 && key <= prevKey)
		if moved {
			s.mu.Lock()
			key = max(s.head, prevKey+1)
			s.mu.Unlock()
		}
		prevKey = key
		var out *v1alpha1.SchedulingStrategy
		var err error
		switch {
		case p.cur == nil:
			setCreatedRevision(p.want, key)
			out, err = s.create(ctx, p.want, fmt.Sprintf("strategies[%d].", i), false)
		case moved || !s.shownAs(p.cur.Name, list[i]):
			out, err = s.update(ctx, p.cur, fmt.Sprintf("strategies[%d].", i), false, func(o *v1alpha1.SchedulingStrategy) {
				o.Spec = p.want.Spec
				if moved {
					setCreatedRevision(o, key)
				}
			})
		default:
			continue // equal and in order
		}
		if err != nil {
			return nil, 0, fmt.Errorf("replace stopped at strategies[%d] (%s), after writing the entries before it and deleting nothing; repeat the request to finish: %w", i, list[i].Name, err)
		}
		rev, err := parseRevision(out.ResourceVersion)
		if err != nil {
			return nil, 0, err
		}
		// Wait for each write: the next precedence key must be past it.
		if err := s.waitSeen(ctx, "strategy "+out.Name, rev); err != nil {
			return nil, 0, err
		}
		last = max(last, rev)
	}
	// 3. Deletions.
	s.mu.Lock()
	var gone []*v1alpha1.SchedulingStrategy
	for name, e := range s.objs {
		if !seen[name] && e.st != nil && e.st.Owner == owner {
			gone = append(gone, e.obj)
		}
	}
	s.mu.Unlock()
	sort.Slice(gone, func(i, j int) bool { return gone[i].Name < gone[j].Name })
	for _, o := range gone {
		if _, err := s.delete(ctx, o.Name, o.UID); err != nil && !errors.Is(err, store.ErrNotFound) {
			return nil, 0, fmt.Errorf("replace wrote every entry but stopped deleting at strategy %s; repeat the request to finish: %w", o.Name, err)
		}
	}
	out, rev, err := s.ListStrategies(ctx)
	return out, max(rev, last), err
}

// prefixed puts a list entry's index before a field error's field.
func prefixed(err error, i int) error {
	var fe *strategy.FieldError
	if errors.As(err, &fe) {
		return &strategy.FieldError{Field: fmt.Sprintf("strategies[%d].%s", i, fe.Field), Msg: fe.Msg}
	}
	return fmt.Errorf("strategies[%d]: %w", i, err)
}

// shownAs reports whether the API already shows name exactly as st.
func (s *Store) shownAs(name string, st apitypes.Strategy) bool {
	want, err := toObject(s.o.Namespace, st)
	if err != nil {
		return false
	}
	norm, err := fromObject(want)
	if err != nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.objs[name]
	if e == nil || e.st == nil {
		return false
	}
	norm.CreatedRevision = e.st.CreatedRevision
	return sameView(norm, *e.st)
}

// writeError maps the API server's answer to the store's errors: the
// sentinels, field errors for validation, and a fix for the rest.
func (s *Store) writeError(op, name, fieldPrefix string, err error) error {
	if fe, ok := invalidToField(err, fieldPrefix); ok {
		return fe
	}
	var se *apierrors.StatusError
	switch {
	case apierrors.IsAlreadyExists(err):
		return store.ErrExists
	case apierrors.IsNotFound(err):
		if errors.As(err, &se) && se.ErrStatus.Details != nil && se.ErrStatus.Details.Kind == "namespaces" {
			return fmt.Errorf("%s strategy %s: namespace %s does not exist: create it (kubectl create namespace %s) or pass --namespace", op, name, s.o.Namespace, s.o.Namespace)
		}
		return store.ErrNotFound
	case apierrors.IsForbidden(err):
		return fmt.Errorf("%s strategy %s: %v: grant the API's service account %s on schedulingstrategies.%s in namespace %s", op, name, err, op, v1alpha1.GroupVersion.Group, s.o.Namespace)
	case apierrors.IsConflict(err):
		return fmt.Errorf("%s strategy %s: changed by another writer meanwhile: retry: %w", op, name, err)
	}
	return fmt.Errorf("%s strategy %s in namespace %s: %w", op, name, s.o.Namespace, err)
}
