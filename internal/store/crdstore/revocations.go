// SPDX-License-Identifier: Apache-2.0

package crdstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/swiftlane/swiftlane/apis/swiftlane/v1alpha1"
)

// The token deny list is one TokenRevocation object per revoked token in
// the namespace. One object each, not one shared list: replicas revoking at
// once create different objects and never conflict. Every replica keeps an
// informer (list, then watch) of them, so a revocation through any replica
// is refused by all of them once their watches deliver it (milliseconds).
// A replica cut off from the API server keeps refusing what it had listed.

// byTokenID indexes revocations by spec.tokenID (an old base64url id is
// not an object name; see revocationName).
const byTokenID = "tokenID"

func (s *Store) revocationReq(verb string) *rest.Request {
	return s.rc.Verb(verb).Namespace(s.o.Namespace).Resource(v1alpha1.RevocationsResource.Resource)
}

// startRevocations checks access to TokenRevocations and runs their
// informer until run ends; it returns once the first list is in.
func (s *Store) startRevocations(ctx, run context.Context, done chan<- struct{}) error {
	c, err := s.startInformer(ctx, run, done, v1alpha1.RevocationsResource, &v1alpha1.TokenRevocation{}, cache.Indexers{byTokenID: func(o any) ([]string, error) {
		if t, ok := o.(*v1alpha1.TokenRevocation); ok {
			return []string{t.Spec.TokenID}, nil
		}
		return nil, nil
	}})
	if err != nil {
		return err
	}
	s.rev = c
	return nil
}

// hexID is what token ids look like since they are hex: also a valid name.
var hexID = regexp.MustCompile(`^[0-9a-f]{1,63}$`)

// revocationName names the object of a token id: the id itself, or for an
// old base64url id (upper case, '_') a hash of it.
func revocationName(id string) string {
	if hexID.MatchString(id) {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return "sha256-" + hex.EncodeToString(sum[:20])
}

// TokenRevoked reports whether the replica's copy of the deny list has id.
func (s *Store) TokenRevoked(id string) (bool, error) {
	objs, err := s.rev.idx.ByIndex(byTokenID, id)
	return len(objs) > 0, err
}

// RevokeToken creates the token's TokenRevocation and waits until this
// replica's informer has it; the others get it from their watches. Then it
// deletes the revocations of tokens that have expired (whichever replica
// revokes next cleans up; a deletion another replica made first is fine).
func (s *Store) RevokeToken(ctx context.Context, id string, until time.Time, by string) error {
	obj := &v1alpha1.TokenRevocation{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "TokenRevocation"},
		ObjectMeta: metav1.ObjectMeta{Name: revocationName(id), Namespace: s.o.Namespace},
		Spec:       v1alpha1.TokenRevocationSpec{TokenID: id, ExpiresAt: metav1.NewTime(until), RevokedBy: by},
	}
	err := s.revocationReq("POST").Body(obj).Do(ctx).Error()
	if apierrors.IsAlreadyExists(err) {
		var cur v1alpha1.TokenRevocation
		if err = s.revocationReq("GET").Name(obj.Name).Do(ctx).Into(&cur); err == nil && cur.Spec.TokenID != id {
			err = fmt.Errorf("TokenRevocation %s holds token id %s, not %s: delete it (kubectl -n %s delete tokenrevocation %s) and revoke again",
				obj.Name, cur.Spec.TokenID, id, s.o.Namespace, obj.Name)
		}
	}
	if err != nil {
		return s.objectError("create", v1alpha1.RevocationsResource, obj.Name, err)
	}
	if err := s.rev.waitFor(ctx, s.o.Namespace, "the revocation of token "+id, func() bool {
		ok, _ := s.TokenRevoked(id)
		return ok
	}); err != nil {
		return err
	}
	s.dropExpiredRevocations(ctx, id)
	return nil
}

// dropExpiredRevocations deletes the revocations of expired tokens but
// keep's, each conditionally on its UID (not a namesake created since);
// failures are logged, the next revocation tries again.
func (s *Store) dropExpiredRevocations(ctx context.Context, keep string) {
	now := time.Now()
	for _, o := range s.rev.idx.List() {
		t, ok := o.(*v1alpha1.TokenRevocation)
		if !ok || t.Spec.TokenID == keep || !t.Spec.ExpiresAt.Time.Before(now) {
			continue
		}
		uid := t.UID
		err := s.revocationReq("DELETE").Name(t.Name).Body(&metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}).Do(ctx).Error()
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			s.o.Log.Warn("could not delete the revocation of an expired token; the next revocation retries", "namespace", s.o.Namespace, "name", t.Name, "err", err)
		}
	}
}
