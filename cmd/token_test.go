// SPDX-License-Identifier: Apache-2.0

package cmd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/swiftlane/swiftlane/internal/apitypes"
	"github.com/swiftlane/swiftlane/internal/auth"
	"github.com/swiftlane/swiftlane/internal/store"
)

// TestTokenRevokeCommand: `swiftlane token revoke` without --server puts
// the token (given whole, or by id) on the deny list in the bolt store of
// --data-dir, which a server on that store reads; while a server holds the
// store it says to go through the server.
func TestTokenRevokeCommand(t *testing.T) {
	dir := t.TempDir()
	server, _, err := auth.LoadOrCreate(dir)
	if err != nil {
		t.Fatal(err)
	}
	a, _, _ := server.Issue("a", auth.Viewer, "", time.Hour)
	b, _, _ := server.Issue("b", auth.Viewer, "", time.Hour)
	keep, _, _ := server.Issue("c", auth.Viewer, "", time.Hour)
	bID, _, _ := server.TokenID(b)
	for _, arg := range []string{a, bID} {
		cmd := newTokenCmd()
		cmd.SetArgs([]string{"revoke", arg, "--data-dir", dir})
		if err := cmd.Execute(); err != nil {
			t.Fatalf("revoke %.20s: %v", arg, err)
		}
	}
	st, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	server.UseDenyList(st)
	for _, tok := range []string{a, b} {
		if _, err := server.Verify(tok); !errors.Is(err, auth.ErrRevoked) {
			t.Errorf("revoked token verified: %v", err)
		}
	}
	if _, err := server.Verify(keep); err != nil {
		t.Errorf("other token refused: %v", err)
	}
	// No server saw the revocations: the command put them in the history.
	aID, _, _ := server.TokenID(a)
	hist, _, err := st.ListAudit(context.Background(), apitypes.AuditQuery{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range hist {
		got = append(got, fmt.Sprintf("%s %s/%s %s %s %v", e.Operation, e.Object.Kind, e.Object.Name, e.Role, e.Outcome, strings.HasPrefix(e.Subject, "cli:")))
	}
	if want := []string{"token.revoke token/" + bID + " local ok true", "token.revoke token/" + aID + " local ok true"}; strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("audit history:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// The store is open (as a running server holds it).
	cmd := newTokenCmd()
	cmd.SetArgs([]string{"revoke", bID, "--data-dir", dir})
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "--server") {
		t.Errorf("revoke while a server holds the store: %v, want a hint to use --server", err)
	}
}

// TestTokenCreateAudit: a token signed by the command itself is recorded
// in the store's audit history with --store; without it the command says
// the token is in none; with the store held (a running server) --store
// fails before anything is signed, pointing at --server.
func TestTokenCreateAudit(t *testing.T) {
	dir := t.TempDir()
	server, _, err := auth.LoadOrCreate(dir)
	if err != nil {
		t.Fatal(err)
	}
	create := func(args ...string) (string, string, error) {
		var out, errOut strings.Builder
		cmd := newTokenCmd()
		cmd.SetOut(&out)
		cmd.SetErr(&errOut)
		cmd.SilenceUsage, cmd.SilenceErrors = true, true
		cmd.SetArgs(append([]string{"create", "--data-dir", dir}, args...))
		err := cmd.Execute()
		return strings.TrimSpace(out.String()), errOut.String(), err
	}
	recorded, _, err := create("--role", "agent", "--node", "n7", "--store", "bolt")
	if err != nil {
		t.Fatal(err)
	}
	unrecorded, stderr, err := create("--role", "viewer")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr, "in no audit history") || !strings.Contains(stderr, "--store") {
		t.Errorf("without --store the command does not say the token is unrecorded:\n%s", stderr)
	}
	st, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	hist, _, err := st.ListAudit(context.Background(), apitypes.AuditQuery{})
	if err != nil {
		t.Fatal(err)
	}
	id, _, _ := server.TokenID(recorded)
	if len(hist) != 1 || hist[0].Operation != apitypes.AuditTokenIssue || hist[0].Object.Name != id || hist[0].Role != apitypes.RoleLocal ||
		!strings.HasPrefix(hist[0].Subject, "cli:") || !strings.Contains(hist[0].Detail, "agent token for node n7") {
		t.Errorf("audit history %+v, want the agent token %s's issue alone (not the viewer token %.20s…)", hist, id, unrecorded)
	}
	// The store is open (as a running server holds it).
	tok, _, err := create("--role", "viewer", "--store", "bolt")
	if err == nil || !strings.Contains(err.Error(), "--server") || tok != "" {
		t.Errorf("create --store bolt while a server holds the store: %q, %v; want no token and a hint to use --server", tok, err)
	}
}
