// SPDX-License-Identifier: Apache-2.0

package cmd

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/swiftlane/swiftlane/internal/apitypes"
	"github.com/swiftlane/swiftlane/internal/auth"
	"github.com/swiftlane/swiftlane/internal/store/crdstore"
	"github.com/swiftlane/swiftlane/internal/store/crdstore/crdtest"
)

func TestMain(m *testing.M) { crdtest.Main(m) }

// TestTokenRevokeKubernetes: `swiftlane token revoke --store kubernetes`
// (what an operator runs in the API's pod, whose data directory is
// read-only) writes the deny list that a running replica refuses tokens by.
func TestTokenRevokeKubernetes(t *testing.T) {
	srv := crdtest.Cluster(t)
	ns := crdtest.Namespace(t, srv)
	dir := t.TempDir()
	a, _, err := auth.LoadOrCreate(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	replica, err := crdstore.Open(ctx, crdstore.Options{Config: srv.RESTConfig(), Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	defer replica.Close()
	a.UseDenyList(replica)
	tok, _, _ := a.Issue("leaked", auth.Viewer, "", time.Hour)
	if _, err := a.Verify(tok); err != nil {
		t.Fatal(err)
	}
	cmd := newTokenCmd()
	cmd.SetArgs([]string{"revoke", tok, "--store", "kubernetes", "--kubeconfig", srv.Kubeconfig(), "--namespace", ns, "--data-dir", dir})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	// The replica's watch delivers it; measured, not waited for blindly.
	start := time.Now()
	for {
		_, err := a.Verify(tok)
		if errors.Is(err, auth.ErrRevoked) {
			break
		}
		if time.Since(start) > time.Second {
			t.Fatalf("still accepted %s after the revoke: %v", time.Since(start), err)
		}
		time.Sleep(time.Millisecond)
	}
	// The command recorded the revocation in the audit history the
	// replica serves (appended before the command returned, delivered by
	// the replica's watch since: the deny list's object came first).
	id, _, _ := a.TokenID(tok)
	start = time.Now()
	for {
		h, _, err := replica.ListAudit(ctx, apitypes.AuditQuery{Operation: apitypes.AuditTokenRevoke})
		if err == nil && len(h) == 1 && h[0].Object.Name == id && h[0].Role == apitypes.RoleLocal && strings.HasPrefix(h[0].Subject, "cli:") {
			break
		}
		if time.Since(start) > time.Second {
			t.Fatalf("the replica's audit history after %s: %+v %v", time.Since(start), h, err)
		}
		time.Sleep(time.Millisecond)
	}
}
