// SPDX-License-Identifier: Apache-2.0

package crdstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/swiftlane/swiftlane/apis/swiftlane/v1alpha1"
	"github.com/swiftlane/swiftlane/internal/apitypes"
)

// The audit history is one AuditEntry object per entry in the namespace,
// named after the entry's ID: the recording replica's clock in nanoseconds
// (16 hex digits) then 8 random hex digits, so names sort by time and two
// replicas never pick the same one.
//
// One object per entry rather than a few objects holding many entries
// each: replicas appending at once create different objects, so an append
// never conflicts and never has to re-read and retry (a shared object
// would be rewritten by every change of every replica). The bound holds by
// pruning: once its own entry is in its copy, the appending replica deletes
// the oldest entries beyond the bound. An entry another replica is
// appending at that moment may not be in its copy yet, so the namespace
// can hold a few entries more than the bound until the next append trims
// them; reads never show more than the bound.
//
// Every replica keeps an informer of them (without managed fields): at
// about 1 KB an entry, the default 10,000 entries are ~10 MB per replica.
// Entries are ordered by their recording replicas' clocks, so replicas'
// clock skew can reorder changes made within it of each other.

func (s *Store) auditReq(verb string) *rest.Request {
	return s.rc.Verb(verb).Namespace(s.o.Namespace).Resource(v1alpha1.AuditResource.Resource)
}

func (s *Store) startAudit(ctx, run context.Context, done chan<- struct{}) error {
	c, err := s.startInformer(ctx, run, done, v1alpha1.AuditResource, &v1alpha1.AuditEntry{}, nil)
	if err != nil {
		return err
	}
	s.audit = c
	return nil
}

// auditID is the ID (and object name) of an entry recorded at t.
func auditID(t time.Time) string {
	return fmt.Sprintf("%016x%08x", uint64(t.UnixNano()), rand.Uint32())
}

// AppendAudit creates the entry's object, waits until this replica's copy
// has it (so a read through this replica right after shows it), then
// prunes the oldest beyond the bound.
func (s *Store) AppendAudit(ctx context.Context, e apitypes.AuditEntry) (apitypes.AuditEntry, error) {
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	e.Time = e.Time.Truncate(time.Microsecond).UTC() // what the object keeps
	e.ID = auditID(e.Time)
	obj := auditObject(e)
	obj.Namespace = s.o.Namespace
	if err := s.auditReq("POST").Body(obj).Do(ctx).Error(); err != nil {
		return e, s.objectError("create", v1alpha1.AuditResource, obj.Name, err)
	}
	key := s.o.Namespace + "/" + obj.Name
	if err := s.audit.waitFor(ctx, s.o.Namespace, "audit entry "+obj.Name, func() bool {
		_, ok, _ := s.audit.idx.GetByKey(key)
		return ok
	}); err != nil {
		return e, err
	}
	s.pruneAudit(ctx)
	return e, nil
}

// pruneAudit deletes the oldest entries of the copy beyond the bound;
// failures are logged, the next append tries again.
func (s *Store) pruneAudit(ctx context.Context) {
	keys := s.audit.idx.ListKeys() // namespace/name: one namespace, so name order
	over := len(keys) - s.o.AuditSize
	if over <= 0 {
		return
	}
	sort.Strings(keys)
	for _, k := range keys[:over] {
		name := k[strings.IndexByte(k, '/')+1:]
		err := s.auditReq("DELETE").Name(name).Do(ctx).Error()
		if err != nil && !apierrors.IsNotFound(err) { // NotFound: another replica pruned it first
			s.o.Log.Warn("could not delete an audit entry beyond the bound; the next change retries", "namespace", s.o.Namespace, "name", name, "err", s.objectError("delete", v1alpha1.AuditResource, name, err))
			return
		}
	}
}

// ListAudit pages through the newest entries of this replica's copy, up
// to the bound.
func (s *Store) ListAudit(_ context.Context, q apitypes.AuditQuery) ([]apitypes.AuditEntry, bool, error) {
	objs := s.audit.idx.List()
	all := make([]*v1alpha1.AuditEntry, 0, len(objs))
	for _, o := range objs {
		if a, ok := o.(*v1alpha1.AuditEntry); ok {
			all = append(all, a)
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Name > all[j].Name })
	all = all[:min(len(all), s.o.AuditSize)]
	i := 0
	if q.Before != "" { // the first below it
		i = sort.Search(len(all), func(i int) bool { return all[i].Name < q.Before })
	}
	return q.Page(func() (apitypes.AuditEntry, bool, error) {
		if i == len(all) {
			return apitypes.AuditEntry{}, false, nil
		}
		i++
		return fromAuditObject(all[i-1]), true, nil
	})
}

func auditObject(e apitypes.AuditEntry) *v1alpha1.AuditEntry {
	return &v1alpha1.AuditEntry{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "AuditEntry"},
		ObjectMeta: metav1.ObjectMeta{Name: e.ID},
		Spec: v1alpha1.AuditEntrySpec{
			Time: metav1.NewMicroTime(e.Time), Subject: e.Subject, Role: e.Role, Node: e.Node, TokenID: e.TokenID,
			Operation: e.Operation, Object: v1alpha1.AuditEntryObject{Kind: e.Object.Kind, Name: e.Object.Name},
			Outcome: e.Outcome, Status: int32(e.Status), Error: e.Error, Detail: e.Detail, Revision: int64(e.Revision),
			Server: e.Server, Source: e.Source,
		},
	}
}

func fromAuditObject(o *v1alpha1.AuditEntry) apitypes.AuditEntry {
	sp := o.Spec
	return apitypes.AuditEntry{
		ID: o.Name, Time: sp.Time.UTC(), Subject: sp.Subject, Role: sp.Role, Node: sp.Node, TokenID: sp.TokenID,
		Operation: sp.Operation, Object: apitypes.AuditObject{Kind: sp.Object.Kind, Name: sp.Object.Name},
		Outcome: sp.Outcome, Status: int(sp.Status), Error: sp.Error, Detail: sp.Detail, Revision: uint64(sp.Revision),
		Server: sp.Server, Source: sp.Source,
	}
}

// objectError adds the object and the fix to a failed write of one of the
// namespace's objects.
func (s *Store) objectError(op string, res schema.GroupVersionResource, name string, err error) error {
	var se *apierrors.StatusError
	switch {
	case apierrors.IsForbidden(err):
		return fmt.Errorf("%s %s/%s: %v: grant the API's service account get, list, watch, create, delete on %s.%s in namespace %s (the Helm chart's RBAC does)",
			op, res.Resource, name, err, res.Resource, res.Group, s.o.Namespace)
	case errors.As(err, &se):
		return fmt.Errorf("%s %s/%s in namespace %s: %w", op, res.Resource, name, s.o.Namespace, err)
	}
	return err
}
