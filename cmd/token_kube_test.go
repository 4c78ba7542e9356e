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
// The token was minted there with `token create --store kubernetes`: both
// commands are in the audit history the replica serves.
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
	inStore := []string{"--store", "kubernetes", "--kubeconfig", srv.Kubeconfig(), "--namespace", ns, "--data-dir", dir}
	var out strings.Builder
	cmd := newTokenCmd()
	cmd.SetOut(&out)
	cmd.SetArgs(append([]string{"create", "--role", "viewer", "--subject", "leaked"}, inStore...))
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	tok := strings.TrimSpace(out.String())
	if _, err := a.Verify(tok); err != nil {
		t.Fatal(err)
	}
	cmd = newTokenCmd()
	cmd.SetArgs(append([]string{"revoke", tok}, inStore...))
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
	// The commands recorded the token's issue and revocation in the audit
	// history the replica serves (appended before each command returned,
	// delivered by the replica's watch since: the deny list's object came
	// before the second).
	id, _, _ := a.TokenID(tok)
	start = time.Now()
	for {
		h, _, err := replica.ListAudit(ctx, apitypes.AuditQuery{})
		if err == nil && len(h) == 2 && h[0].Operation == apitypes.AuditTokenRevoke && h[1].Operation == apitypes.AuditTokenIssue &&
			h[0].Object.Name == id && h[1].Object.Name == id && h[1].Role == apitypes.RoleLocal && strings.HasPrefix(h[1].Subject, "cli:") &&
			strings.Contains(h[1].Detail, "viewer token, subject leaked") {
			break
		}
		if time.Since(start) > time.Second {
			t.Fatalf("the replica's audit history after %s: %+v %v", time.Since(start), h, err)
		}
		time.Sleep(time.Millisecond)
	}
}
